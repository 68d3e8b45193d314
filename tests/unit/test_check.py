"""`steer check`'s report laid out for a terminal, and the remedies it gives, on fixture reports
made as run_checks makes them (tests/live/test_refusals_live.py runs the command itself)."""
from steer.trace.check import headline, program_rows, remedy, text_lines
from steer.trace.programs import ALL_PROGRAMS, FIGURES, SECTIONS, plan


def report(refused: dict[str, str]) -> dict:
    p = plan("auto", "auto", refused)
    return {
        "kernel": "6.18.0", "machine": "x86_64", "privileges": {"missing": []}, "btf": True,
        "default": {"runs": True, "mode": p.timing, "hook": p.hook, "why": p.timing_why,
                    "error": None},
        "figures": {n: dict(f.as_dict(), what=FIGURES[n], fix=remedy(f.why)) for n, f in
                    p.figures.items()},
        "programs": {n: {"hook": SECTIONS[n], "state": "refused" if n in refused else "works",
                         "why": refused.get(n, ""), "fix": remedy(refused.get(n, ""))}
                     for n in ALL_PROGRAMS},
        "counters": {"llc_misses": "unavailable: no hardware PMU (perf_event_open: ENOENT)"},
        "steering": "available (XDP program and cpumap)"}


EPERM = {p: f"the kernel refused {SECTIONS[p]} (EPERM: Operation not permitted)"
         for p in ("ft_flush_socks", "ft_udp_recvmsg_exit", "ft_udpv6_recvmsg_exit")}


def test_the_report_names_what_is_lost_why_and_what_would_change_it():
    r = report(EPERM)
    lines = text_lines(r, width=100)
    assert lines[0] == headline(r)
    assert "runs as sampled timing; degraded: UDP app bytes" in lines[0]
    assert all(len(l) <= 100 for l in lines[1:])
    udp = next(i for i, l in enumerate(lines) if l.startswith("UDP app bytes"))
    block = " ".join(" ".join(lines[udp:udp + 8]).split())   # the wrapped lines as one
    # read by the tracepoint on demand instead, which says why
    assert "degraded" in block and "sock:sock_recv_length, on its hook while UDP" in block
    assert "fexit/udp_recvmsg, fexit/udpv6_recvmsg (EPERM" in block
    assert "-> a security policy denies it" in block
    # the walk stands in for the flush iterator: TCP's reader bytes still work, and say how
    tcp = next(l for l in lines if l.startswith("TCP app bytes"))
    assert "works" in tcp
    n = len(ALL_PROGRAMS)
    assert f"{n - len(EPERM)} of {n} BPF programs run here" in "\n".join(lines)


def test_programs_refused_for_one_reason_are_one_row():
    rows = program_rows(report(EPERM))
    assert [r[0] for r in rows] == ["iter/bpf_sk_storage_map, fexit/udp_recvmsg, "
                                    "fexit/udpv6_recvmsg"]
    assert rows[0][2] == "the kernel refused them (EPERM: Operation not permitted)"


def test_a_host_where_nothing_loads_says_so_first():
    r = report({})
    r["default"] = {"runs": False, "error": "tracing needs CAP_BPF and CAP_PERFMON: run as root"}
    assert headline(r).endswith("steer cannot trace here: tracing needs CAP_BPF and CAP_PERFMON: "
                                "run as root")


def test_remedies_follow_the_kernels_answer():
    assert "CONFIG_KPROBES" in remedy("the kernel refused kprobe/tcp_recvmsg (ENOENT: No such "
                                      "file or directory)")
    assert "6.3" in remedy("this kernel has no sock:sock_recv_length (Linux 6.3+)")
    assert "lockdown" in remedy("the kernel refused fexit/tcp_recvmsg (EPERM: x)")
    assert remedy("the kernel refused tp_btf/softirq_entry (EPERM: x; without CAP_SYS_ADMIN)") \
        .startswith("CAP_SYS_ADMIN (root): some kernels keep these programs for it")
    assert "trampolines" in remedy("the kernel refused fexit/tcp_recvmsg (ENOTSUPP: x)")
    assert "PMU" in remedy("unavailable: no hardware PMU (perf_event_open: ENOENT)")
    assert "STEER_TEST_REFUSE" in remedy("the kernel refused iter/tcp (STEER_TEST_REFUSE)")
    assert "perf_event_paranoid=2" in remedy(
        "the kernel refused perf_event (EACCES: Permission denied; kernel.perf_event_paranoid "
        "is 3: above 2, Debian's kernels keep perf events for CAP_SYS_ADMIN)")
    assert "verifier" in remedy("the kernel refused perf_event (EACCES: Permission denied)")
    assert remedy("") == ""


def test_the_kernel_table_has_a_column_per_kernel_and_names_the_refusals(tmp_path, monkeypatch):
    """docs/kernels.md from the reports make test-kernels keeps (tests/guest/vm/kernels.py)."""
    import json
    import sys
    from helpers import ROOT
    sys.path.insert(0, f"{ROOT}/tests/guest/vm")
    import kernels
    old = report({p: f"the kernel refused {SECTIONS[p]} (EINVAL: Invalid argument)"
                  for p in ("ft_sample", "ft_sched_switch")})
    old["kernel"] = "5.10.0-32-cloud-amd64"
    for name, r in (("5.10", old), ("6.12", report({}))):
        (tmp_path / f"check-{name}.json").write_text(json.dumps(r))
    monkeypatch.setattr(kernels, "CHECKS", tmp_path)
    rep = kernels.reports(host=False)
    assert list(rep) == ["guest 5.10", "guest 6.12"]
    lines = kernels.table(rep)
    assert lines[0] == "| | guest 5.10: Linux 5.10.0-32-cloud-amd64 | guest 6.12: Linux 6.18.0 |"
    assert "| default mode | exact | sampled |" in lines
    assert "| kthread time | **missing** | works |" in lines
    text = "\n".join(kernels.refusals(rep))
    assert "- `perf_event`: refused: the kernel refused perf_event (EINVAL: Invalid argument)" in text
    assert "Every program runs." in text


def test_the_guests_report_is_taken_off_its_console(tmp_path, monkeypatch):
    import sys
    from helpers import ROOT
    sys.path.insert(0, f"{ROOT}/tests/guest/vm")
    import run
    monkeypatch.setattr(run, "WORK", tmp_path)
    log = tmp_path / "console.log"
    log.write_bytes(b"[ 1.0] boot\r\n..\r\nSTEER_VM_CHECK={\"kernel\":\"6.12.1\",\"x\":[1]}\r\n"
                    b"[ 9.0] more\r\n")
    out = run.keep_check(log, "6.12")
    assert out == tmp_path / "check-6.12.json" and '"kernel": "6.12.1"' in out.read_text()
    log.write_bytes(b"no report\n")
    assert run.keep_check(log, "6.12") is None


def test_every_figures_state_is_in_one_column():
    """The longest figure name ("connections open at start") sets the name column: each
    figure's state starts in the same column as every other's."""
    from steer.trace.check import figure_rows
    r = report(EPERM)
    lines = text_lines(r, width=100)
    names = [name for name, *_ in figure_rows(r)]
    assert max(names, key=len) == "connections open at start"
    starts = {next(l for l in lines if l.startswith(n + " ")).index(state, len(n))
              for n, state, *_ in figure_rows(r)}
    assert starts == {len(max(names, key=len)) + 1}


def test_a_report_with_no_figure_still_lays_out():
    """No mode loads (every core program refused): the report has no figure rows, and its host
    rows still get their columns (the live test_check_fails_in_one_line_where_no_mode_loads
    runs the command)."""
    r = report(EPERM)
    r["figures"] = {}
    lines = text_lines(r, width=100)
    assert any(l.startswith("privileges") for l in lines)


def test_an_options_figure_is_listed_but_not_the_defaults_loss():
    """--latency's figure comes from the same run as the default's (its programs are optional
    beside them) and is marked as the option's: a kernel without sock:sk_data_ready degrades it,
    and the headline, which speaks of the default, does not count that."""
    refused = {"ft_lat_queued": "this kernel has no sock:sk_data_ready (Linux 6.5+)"}
    r = report(refused)
    lat = plan("auto", "auto", refused, latency=True).figures["latency"]
    r["figures"]["latency"] = dict(lat.as_dict(), what=FIGURES["latency"], option="--latency",
                                   fix=remedy(lat.why))
    assert lat.state == "degraded"
    assert "no figure lost to the kernel" in headline(r)
    lines = text_lines(r, width=100)
    assert any(l.startswith("latency (--latency)") and "degraded" in l for l in lines)


def test_the_samplers_clock_says_where_the_kernel_ran_no_program():
    """The sampled run's watch of its clock (run_checks): a row that says on which CPUs the
    kernel ran no program for how many expiries, or that each ran it; none where not watched."""
    r = report({})
    assert not any(l.startswith("sampler's clock") for l in text_lines(r))
    r["sampler"] = {"seconds": 0.52, "hz": 997,
                    "cpus": {"0": {"expiries": 357, "withheld": 0, "not_charged": 0},
                             "1": {"expiries": 517, "withheld": 515, "not_charged": 2}}}
    lines = text_lines(r, width=100)
    row = next(i for i, l in enumerate(lines) if l.startswith("sampler's clock"))
    block = " ".join(" ".join(lines[row:row + 4]).split())
    assert "works" in block and "874 expiries at 997 Hz on 2 CPUs in 0.52 s" in block
    assert "no program for 515 of CPU 1's 517" in block and "2 it could not" in block
    assert "CPU 0" not in block
    r["sampler"]["cpus"]["1"].update(withheld=0, not_charged=0)
    assert "each ran the sampler's program" in " ".join(text_lines(r, width=200))
