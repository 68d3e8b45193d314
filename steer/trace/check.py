"""`steer check`: what this host lets steer do, found by trying it. Each timing mode and each
receive hook is loaded and attached as the commands would load it (steer.trace.tracer, which leaves
out what the kernel refuses and says why), the PMU events and the steering program are opened,
and everything is closed again before the report: nothing stays attached.

The report (a dict, JSON as it is) says per figure whether it works, is degraded or is missing,
why, and what would change that; per program whether the kernel runs it. `text_lines` lays it out
for a terminal; both are pure, so fixture reports test them."""
from __future__ import annotations

import os
import platform
import re
import struct

from steer.trace.programs import ALL_PROGRAMS, FIGURE_NAMES, FIGURES, SECTIONS
from steer.model.capabilities import WORKS, Figure, lost_to_kernel

# checks of what the kernel refused, in order: the first whose pattern is in the reason gives
# what to change. The reasons come from steer.trace.tracer (refusal, _absent) and steer.trace.counters.
REMEDIES = [
    (r"STEER_TEST_REFUSE", "unset STEER_TEST_REFUSE (a test's stand-in for a refusing kernel)"),
    (r"sock_recv_length", "Linux 6.3 or later has sock:sock_recv_length"),
    (r"kprobe.*ENOENT|ENOENT.*kprobe", "a kernel with CONFIG_KPROBES=y and CONFIG_KPROBE_EVENTS=y"),
    (r"fexit.*ENOTSUPP|ENOTSUPP.*fexit",
     "a kernel with BPF trampolines (CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS=y)"),
    (r"perf_event_paranoid is", "sysctl kernel.perf_event_paranoid=2 (a file in /etc/sysctl.d/ "
                                "keeps it), or CAP_SYS_ADMIN"),
    (r"EPERM.*without CAP_SYS_ADMIN", "CAP_SYS_ADMIN (root): some kernels keep these programs "
                                      "for it (Debian's 5.10: tp_btf); else a security policy: "
                                      "kernel lockdown, an LSM or a container's seccomp profile"),
    (r"EPERM", "a security policy denies it: kernel lockdown (/sys/kernel/security/lockdown), "
               "an LSM (SELinux, AppArmor, BPF LSM) or a container's seccomp profile"),
    (r"EACCES|EINVAL", "the verifier rejected it on this kernel: STEER_LIBBPF_DEBUG=1 shows its "
                       "log; please report it with `uname -r`"),
    (r"kallsyms|kptr_restrict", "sysctl kernel.kptr_restrict=1 (root then reads kernel "
                                "addresses) or run as root with CAP_SYSLOG"),
    (r"cpu-clock", "sysctl kernel.perf_event_paranoid=2 or lower, or CAP_PERFMON"),
    (r"drop reason", "Linux 5.17 or later gives skb:kfree_skb a drop reason"),
    (r"xdp_cpumap_(kthread|enqueue)", "Linux 4.15 or later has the cpumap tracepoints"),
    (r"BTF has no|signature", "a kernel whose BTF describes tcp_recvmsg/udp_recvmsg "
                              "(CONFIG_DEBUG_INFO_BTF=y; IPv6 loaded for udpv6_recvmsg)"),
    (r"no hardware PMU|ENOENT", "a host with a hardware PMU: bare metal, or a VM given one "
                                "(qemu/KVM -cpu host, a cloud's metal or vPMU instance types)"),
    (r"CAP_|root", "run as root, or grant the capabilities named"),
    (r"BTF", "a kernel built with CONFIG_DEBUG_INFO_BTF=y (or --btf FILE)"),
]


def remedy(why: str) -> str:
    """What would change a refusal, from its reason."""
    for pattern, fix in REMEDIES:
        if re.search(pattern, why):
            return fix
    return ""


# the sampled run watches its clock this long at this rate: each CPU's expiries, and those the
# kernel ran no program for (bpf/flowtrace/withheld.bpf.h)
WATCH_SECONDS = 0.3
WATCH_HZ = 997


def _tracer_run(timing: str, app_hook: str, latency: bool = False, watch: bool = False) -> dict:
    """Start a tracer as the commands do, note what it took and what was refused, stop it;
    with WATCH, a sampled one's clock watched for WATCH_SECONDS first ("sampler")."""
    import time
    from steer.kernel.privileges import PrivilegeError
    from steer.trace.programs import WITHHELD
    from steer.trace.tracer import Tracer, TracerError
    from steer.trace.windows import default_windows
    t = Tracer(timing=timing, app_hook=app_hook, counters="off", latency=latency,
               windows=default_windows(timing), **({"sample_hz": WATCH_HZ} if watch else {}))
    try:
        t.start()
    except (TracerError, PrivilegeError) as e:
        return {"runs": False, "error": str(e), "refused": dict(t.refused), "loaded": [],
                "refused_maps": dict(t.refused_maps)}
    try:
        p = t.plan
        out = {"runs": True, "mode": p.timing, "hook": p.hook, "why": p.timing_why,
               "hook_why": p.hook_why, "loaded": sorted(p.programs), "refused": dict(t.refused),
               "refused_maps": dict(t.refused_maps),
               "figures": {n: f.as_dict() for n, f in t.capabilities.figures.items()}}
        if watch and p.timing == "sampled" and WITHHELD in p.programs:
            c0, t0 = t.cpu_totals(), time.monotonic()
            time.sleep(WATCH_SECONDS)
            c1, t1 = t.cpu_totals(), time.monotonic()
            out["sampler"] = {
                "seconds": round(t1 - t0, 3), "hz": WATCH_HZ,
                "cpus": {str(b.cpu): {
                    "expiries": b.samples - a.samples + b.samples_withheld_unknown
                    - a.samples_withheld_unknown,
                    "withheld": b.samples_withheld - a.samples_withheld,
                    "not_charged": b.samples_withheld_unknown - a.samples_withheld_unknown}
                    for a, b in zip(c0, c1) if b.samples != a.samples
                    or b.samples_withheld_unknown != a.samples_withheld_unknown}}
        return out
    finally:
        t.stop()


def _counters() -> dict:
    from steer.trace.counters import EVENTS, CounterSet
    from steer.model.topology import online_cpus
    cs = CounterSet.open("auto", online_cpus())
    try:
        return {e: cs.status(e).line() for e in EVENTS}
    finally:
        cs.close()


def steering_status() -> str:
    """Whether the XDP steering program loads and a cpumap entry (a kthread) can be made."""
    from steer.kernel.errors import KernelError
    from steer.steering.xdp import CPUMAP_QSIZE, load_unattached
    from steer.abi import xdp as steer_abi
    try:
        obj, _ = load_unattached()
    except KernelError as e:
        return f"unavailable: {e}"
    try:
        cm = obj.map("cpu_map")
        cm.update(struct.pack("I", 0), bytes(steer_abi.CpumapVal(qsize=CPUMAP_QSIZE)))
        cm.delete(struct.pack("I", 0))
    except KernelError as e:
        return f"unavailable: the kernel refused a cpumap entry: {e}"
    finally:
        obj.close()
    from steer.kernel.btf import generic_xdp_redirects_to_cpumap
    from steer.steering.xdp import NO_GENERIC_CPUMAP
    if not generic_xdp_redirects_to_cpumap():
        return ("available with native XDP only (XDP program and cpumap; " + NO_GENERIC_CPUMAP
                + "; attaching to a device is tried by `steer pin`)")
    return "available (XDP program and cpumap; attaching to a device is tried by `steer pin`)"


def run_checks() -> dict:
    """Try everything; the report."""
    from steer.kernel.libc import fs_magic
    from steer.kernel.mounts import BPFFS, TRACEFS, BPF_FS_MAGIC, TRACEFS_MAGIC
    from steer.kernel.privileges import CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON, CAP_SYS_ADMIN, missing_caps
    from steer.kernel.btf import irq_time_kept_from_tasks
    from steer.kernel.objects import VMLINUX_BTF
    uname = platform.uname()
    report: dict = {
        "kernel": uname.release, "machine": uname.machine,
        "privileges": {"missing": missing_caps([CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN,
                                                CAP_SYS_ADMIN])},
        "btf": os.path.exists(VMLINUX_BTF),
        "bpffs": fs_magic(BPFFS) == BPF_FS_MAGIC,
        "tracefs": fs_magic(TRACEFS) == TRACEFS_MAGIC,
        # CONFIG_IRQ_TIME_ACCOUNTING, told by BTF: the sampled mode weighs its samples so
        "irq_time_apart": irq_time_kept_from_tasks(),
    }
    # the default, with what --latency adds beside it (optional programs: they change neither
    # the mode nor the hook the default takes, and their figure is marked as the option's)
    default = _tracer_run("auto", "auto", latency=True)
    runs = {"default": default}
    for timing in ("sampled", "exact"):
        runs[timing] = _tracer_run(timing, "auto", watch=timing == "sampled")
    for hook in ("tracepoint", "fexit", "kprobe"):
        runs[f"exact/{hook}"] = _tracer_run("exact", hook)
    report["default"] = {k: default.get(k) for k in ("runs", "mode", "hook", "why", "error")}
    report["modes"] = {name: {k: r.get(k) for k in ("runs", "mode", "hook", "why", "error")}
                       for name, r in runs.items() if name != "default"}
    programs = {}
    for prog in ALL_PROGRAMS:
        loaded = [n for n, r in runs.items() if prog in r["loaded"]]
        why = next((r["refused"][prog] for r in runs.values() if prog in r["refused"]), "")
        state = "works" if loaded else "refused" if why.startswith("the kernel refused") else \
            "absent" if why else "not tried"
        programs[prog] = {"hook": SECTIONS[prog], "state": state, "why": "" if loaded else why,
                          "fix": "" if loaded else remedy(why)}
    report["programs"] = programs
    # the map types the kernel would not create (the programs that use them are refused with it)
    report["maps"] = {m: why for r in runs.values() for m, why in r["refused_maps"].items()}
    figures = {}
    for name, f in (default.get("figures") or {}).items():
        figures[name] = dict(f, what=FIGURES[name],
                             fix=remedy(f["why"]) if f["state"] != WORKS else "",
                             # a figure of an option's: "option" says which
                             **({"option": "--latency"} if name == "latency" else {}))
    report["figures"] = figures
    report["sampler"] = runs["sampled"].get("sampler")
    if report["privileges"]["missing"] or not report["btf"]:
        report["counters"], report["steering"] = {}, "not tried"
    else:
        report["counters"] = _counters()
        report["steering"] = steering_status()
    return report


def hardware_devices(sysfs: str = "/sys") -> list[str]:
    """The devices of this namespace backed by hardware (a device/ link in sysfs): NICs."""
    base = os.path.join(sysfs, "class/net")
    try:
        return sorted(d for d in os.listdir(base) if os.path.exists(os.path.join(base, d, "device")))
    except OSError:
        return []


def device_methods(devs: list[str], netns: str | None, steering: str) -> dict:
    """{device: {"methods": [each method's state]} or {"error": why}}: what steer pin --method
    can do on each of DEVS (steer.steering.methods)."""
    from steer.steering.methods import describe, methods
    out = {}
    for dev in devs:
        try:
            desc = describe(dev, netns)
        except Exception as e:   # noqa: BLE001 - a device's error is its row, not the report's
            out[dev] = {"error": str(e)}
            continue
        out[dev] = {"methods": [m.as_dict() for m in methods(desc, steering).values()]}
    return out


def method_lines(report: dict, width: int) -> list[str]:
    import textwrap
    out = []
    for dev, d in (report.get("methods") or {}).items():
        out.append(f"ways to move the receive work of {dev} (steer pin --method):")
        if "error" in d:
            out.extend(textwrap.wrap(d["error"], width, initial_indent="    ",
                                     subsequent_indent="    "))
            continue
        for m in d["methods"]:
            head = f"  {m['method']:<7} {'works' if m['works'] else 'no':<6} "
            text = (f"moves {m['moves']}: " if m["works"] else "") + m["why"]
            out.extend(textwrap.wrap(text, width, initial_indent=head,
                                     subsequent_indent=" " * len(head)))
    return out


def figure_rows(report: dict) -> list[tuple[str, str, str, str]]:
    """Per figure: its name, state, how it is measured or why not, what would change it."""
    return [(FIGURE_NAMES[n], f["state"], f["how"] + (f": {f['why']}" if f["why"] else ""),
             f.get("fix", "")) for n, f in report["figures"].items()]


def host_rows(report: dict) -> list[tuple[str, str, str, str]]:
    """The host's parts as figure_rows has them: privileges, BTF, PMU events (those that share a
    status in one row), steering."""
    missing = report["privileges"]["missing"]
    rows = [("privileges", "missing" if missing else WORKS,
             ", ".join(missing) or "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN, CAP_SYS_ADMIN",
             remedy("CAP_") if missing else ""),
            ("kernel BTF", WORKS if report["btf"] else "missing", "/sys/kernel/btf/vmlinux",
             "" if report["btf"] else remedy("BTF"))]
    by_status: dict[str, list[str]] = {}
    for event, status in report["counters"].items():
        by_status.setdefault(status, []).append(event)
    for status, events in by_status.items():
        ok = status.startswith("available")
        rows.append((f"PMU {', '.join(events)}", WORKS if ok else "missing", status,
                     "" if ok else remedy(status)))
    sampler = report.get("sampler")
    if sampler:
        rows.append(("sampler's clock", WORKS, sampler_line(sampler), ""))
    if "irq_time_apart" in report:
        rows.append(("tasks' run time", WORKS, IRQ_TIME_LINES[report["irq_time_apart"]], ""))
    steering = report["steering"]
    rows.append(("steering", WORKS if steering.startswith("available") else "missing",
                 steering, ""))
    return rows


# what the scheduler's account of a task holds, which the sampled mode's weights are made of
IRQ_TIME_LINES = {
    True: "leaves out the interrupts and softirqs on top of the task (CONFIG_IRQ_TIME_"
          "ACCOUNTING): a sample in one weighs its clock's period",
    False: "holds the interrupts and softirqs on top of the task (no CONFIG_IRQ_TIME_ACCOUNTING)",
}


def sampler_line(sampler: dict) -> str:
    """What the watch of the sampler's clock found: every expiry ran its program, or on which
    CPUs the kernel ran none for how many (counted and charged from the timer itself)."""
    cpus = sampler["cpus"]
    held = {c: v for c, v in cpus.items() if v["withheld"]}
    total = sum(v["expiries"] for v in cpus.values())
    head = f"{total} expiries at {sampler['hz']} Hz on {len(cpus)} CPUs in {sampler['seconds']} s"
    if not held:
        return head + ": each ran the sampler's program"
    lost = sum(v["not_charged"] for v in held.values())
    return (head + ": the kernel ran no program for " + ", ".join(
        f"{v['withheld']} of CPU {c}'s {v['expiries']}" for c, v in sorted(
            held.items(), key=lambda kv: int(kv[0]))) + " (while idle, on some kernels); "
        "steer counts them from the timer and charges what it can tell"
        + (f", {lost} it could not" if lost else ""))


def program_rows(report: dict) -> list[tuple[str, str, str, str]]:
    """The programs the kernel does not run, those with one reason in one row: their hooks,
    state, why, what would change it."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for p in report["programs"].values():
        if p["state"] != WORKS:
            m = _KERNEL_REFUSED.match(p["why"])
            why = f"the kernel refused them ({m.group(1)})" if m else p["why"]
            groups.setdefault((p["state"], why, p["fix"]), []).append(p["hook"])
    return [(", ".join(hooks), state,
             why or "not loaded: what they serve was refused, or another hook serves it", fix)
            for (state, why, fix), hooks in groups.items()]


_KERNEL_REFUSED = re.compile(r"the kernel refused \S+ \((.*)\)$")


def text_lines(report: dict, width: int = 100) -> list[str]:
    """The report for a terminal WIDTH wide: the headline, a line per figure and part of the
    host (what would change it on the next, marked ->), the programs the kernel does not run."""
    import textwrap
    out = [headline(report), ""]
    items = figure_rows(report) + host_rows(report)
    # the longest figure name sets the columns (none where no mode loads); a longer host row
    # (the PMU's events) has a line of its own
    name_width = max((len(name) for name, *_ in figure_rows(report)), default=20)
    left = name_width + 1 + 9 + 1
    for name, state, detail, fix in items:
        head = f"{name:<{name_width}} {state:<9} "
        if len(head) > left:
            out.append(f"{name} {state}")
            head = " " * left
        out.extend(textwrap.wrap(detail, width, initial_indent=head,
                                 subsequent_indent=" " * left) or [head.rstrip()])
        if fix:
            out.extend(textwrap.wrap(fix, width, initial_indent=" " * left + "-> ",
                                     subsequent_indent=" " * (left + 3)))
    refused = program_rows(report)
    n = len(report["programs"])
    not_run = sum(1 for p in report["programs"].values() if p["state"] != WORKS)
    out += ["", f"{n - not_run} of {n} BPF programs run here" +
            ("; these do not (--json lists each):" if refused else ".")]
    maps = report.get("maps") or {}
    if maps:
        out.extend(textwrap.wrap("maps the kernel would not create (the programs that use them are "
                                 "refused with them): " + "; ".join(f"{m} ({why})" for m, why in
                                                                   maps.items()), width))
    for hooks, state, why, fix in refused:
        out.extend(textwrap.wrap(f"{state}: {hooks}", width, subsequent_indent="    "))
        out.extend(textwrap.wrap(why, width, initial_indent="    ", subsequent_indent="    "))
        if fix:
            out.extend(textwrap.wrap(fix, width, initial_indent="    -> ",
                                     subsequent_indent="       "))
    if report.get("methods"):
        out += [""] + method_lines(report, width)
    return out


def headline(report: dict) -> str:
    d = report["default"]
    head = f"steer check: Linux {report['kernel']} {report['machine']}: "
    if not d["runs"]:
        return head + f"steer cannot trace here: {d['error']}"
    # the default's figures: not those of an option (--latency), which the default has not
    lost = lost_to_kernel({n: Figure.from_dict(f) for n, f in report["figures"].items()
                           if not f.get("option")})
    return head + f"the default mode runs as {d['mode']} timing" + (
        f" ({d['why']})" if d["why"] else "") + (
        f"; degraded: {', '.join(FIGURE_NAMES[n] for n in lost)}" if lost else
        "; no figure lost to the kernel")

