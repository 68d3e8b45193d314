"""The load plan (steer.trace.programs): which programs each mode loads on a kernel that refused some,
what stands in for them, and each figure's state. Pure: no kernel, no root. The live tests
(tests/live/test_refusals_live.py) load each plan into this kernel with real traffic."""
import os
import re

import pytest

from helpers import ROOT
from steer.abi.flowtrace import FT_COUNT_TCP, FT_COUNT_UDP
from steer.trace.programs import (ALL_PROGRAMS, CORE, HOOKS, OPTIONAL, SECTIONS, SOCKET_PROGRAMS,
                                  UDP_READS_FALLBACK, WITHHELD,
                                  PlanError, forced_refusals, plan, refusals)

EPERM = "EPERM: Operation not permitted"


def refused(*names, code=EPERM) -> dict[str, str]:
    return {n: f"the kernel refused {SECTIONS[n]} ({code})" for n in names}


def states(p) -> dict[str, str]:
    return {n: f.state for n, f in p.figures.items()}


def _flowtrace_source() -> str:
    """bpf/flowtrace.bpf.c with its parts (bpf/flowtrace/*.bpf.h) included where the preprocessor
    includes them: each once (they are guarded), a part's own includes first."""
    bpf = os.path.join(ROOT, "bpf")
    seen = set()

    def expand(path: str) -> str:
        def include(m):
            name = m.group(1)
            target = os.path.join(bpf, name) if name.startswith("flowtrace/") else \
                os.path.join(os.path.dirname(path), name)
            target = os.path.normpath(target)
            if not os.path.exists(target) or target in seen:   # protocols.bpf.h: bpf/, kept out
                return ""
            seen.add(target)
            return expand(target)
        return re.sub(r'^#include "([\w./]+\.bpf\.h)"$', include, open(path).read(), flags=re.M)
    return expand(os.path.join(bpf, "flowtrace.bpf.c"))


def test_the_section_table_is_the_objects():
    """Every program of bpf/flowtrace.bpf.c and its parts, with its SEC(), and nothing else."""
    src = _flowtrace_source()
    assert "ft_sample" in src and "ft_softirq_entry" in src
    found = {m.group(2): m.group(1) for m in re.finditer(
        r'SEC\("([^"]+)"\)\s*\n\s*int\s+(?:BPF_PROG\(|BPF_KRETPROBE\()?(\w+)', src)}
    assert found == SECTIONS


def test_every_program_is_a_core_or_optional():
    cores = {p for c in CORE.values() for p in c}
    assert cores.isdisjoint(OPTIONAL) and cores | set(OPTIONAL) == set(ALL_PROGRAMS)
    assert "ft_sample" in CORE["sampled"] and "ft_flush_socks" in OPTIONAL


def test_a_kernel_that_runs_everything_gets_the_default_mode():
    p = plan("auto", "auto", {})
    assert (p.timing, p.hook, p.tcp_walk, p.skb_count) == ("sampled", "counters", False,
                                                           FT_COUNT_UDP)
    assert {"ft_sample", "ft_skb_hint", *SOCKET_PROGRAMS, *HOOKS["counters"]} <= p.programs
    assert "ft_netif_receive_skb" not in p.programs and "ft_sys_enter" not in p.programs
    assert {n for n, s in states(p).items() if s != "works"} == {"app_calls"}   # by choice


def test_without_the_flush_iterator_a_walk_of_iter_tcp_flushes_the_sockets():
    p = plan("auto", "auto", refused("ft_flush_socks"))
    assert p.tcp_walk and p.skb_count == FT_COUNT_UDP
    f = p.figures["tcp_app_bytes"]
    assert f.state == "works" and "iter/tcp" in f.how and "iter/bpf_sk_storage_map" in f.why


def test_without_the_state_program_new_connections_come_from_the_walk():
    """Their reads from the first walk that finds them; what they received, per skb, whole."""
    p = plan("auto", "auto", refused("ft_tcp_state"))
    assert p.tcp_walk and p.skb_count == FT_COUNT_TCP | FT_COUNT_UDP
    assert "per skb" in p.figures["tcp_rx_bytes"].how
    assert "inet_sock_set_state" in p.figures["tcp_rx_bytes"].why
    f = p.figures["tcp_app_bytes"]
    assert f.state == "degraded" and "inet_sock_set_state" in f.why


def test_without_any_live_flush_tcp_bytes_are_counted_per_skb():
    p = plan("auto", "auto", refused("ft_flush_socks", "ft_tcp_sockets"))
    assert not p.tcp_walk and p.skb_count == FT_COUNT_TCP | FT_COUNT_UDP
    assert p.figures["tcp_rx_bytes"].state == "works"
    assert "per skb" in p.figures["tcp_rx_bytes"].how
    assert p.figures["tcp_app_bytes"].state == "degraded"
    assert "closes" in p.figures["tcp_app_bytes"].how
    assert p.figures["open_connections"].state == "missing"


def test_every_optional_program_refused_leaves_the_core_and_its_figures():
    every = refused(*OPTIONAL)
    p = plan("auto", "auto", every)
    assert p.timing == "sampled" and p.programs == frozenset(CORE["sampled"])
    assert p.skb_count == FT_COUNT_TCP | FT_COUNT_UDP
    s = states(p)
    for works in ("kthread_time", "tcp_rx_bytes", "udp_rx_bytes", "reader", "app_time"):
        assert s[works] == "works", works
    # the samples a kernel withholds go uncounted: none on most kernels, but no one can tell
    assert s["kernel_time"] == "degraded"
    assert "hrtimer_expire_exit" in p.figures["kernel_time"].why
    for lost in ("tcp_app_bytes", "udp_app_bytes", "drops", "napi_polls", "hardirqs"):
        assert s[lost] == "missing", lost
        assert "the kernel refused" in p.figures[lost].why


def test_exact_takes_the_first_receive_hook_the_kernel_runs():
    assert plan("exact", "auto", {}).hook == "tracepoint"
    p = plan("exact", "auto", refused("ft_sock_recv_length"))
    assert p.hook == "fexit" and "sock_recv_length" in p.hook_why
    p = plan("exact", "auto", refused("ft_sock_recv_length", "ft_tcp_recvmsg_exit"))
    assert p.hook == "kprobe"
    p = plan("exact", "auto", refused("ft_sock_recv_length", "ft_tcp_recvmsg_exit",
                                      "ft_tcp_recvmsg_entry"))
    assert p.hook == "off" and not p.programs & {"ft_sys_enter", "ft_sys_exit"}
    assert states(p)["reader"] == states(p)["tcp_app_bytes"] == "missing"
    assert "fexit/tcp_recvmsg" in p.figures["tcp_app_bytes"].why


def test_a_hook_keeps_tcp_where_only_its_udp_programs_are_refused():
    p = plan("exact", "fexit", refused("ft_udpv6_recvmsg_exit"))
    assert p.hook == "fexit" and states(p)["tcp_app_bytes"] == "works"
    assert p.figures["udp_app_bytes"].state == "degraded"
    assert states(plan("exact", "fexit", refused("ft_udp_recvmsg_exit")))["udp_app_bytes"] == \
        "missing"


def test_the_default_reads_udp_by_the_tracepoint_where_fexit_is_refused():
    """Either fexit refused: one tracepoint program for both families, never beside an fexit
    one (each read counted once), and the figure says it is on demand and why."""
    for lost in ("ft_udp_recvmsg_exit", "ft_udpv6_recvmsg_exit"):
        p = plan("auto", "auto", refused(lost))
        assert p.hook == "counters"
        assert UDP_READS_FALLBACK in p.programs and not p.programs & set(HOOKS["counters"])
        f = p.figures["udp_app_bytes"]
        assert f.state == "degraded" and "sock_recv_length" in f.how and "while UDP datagrams arrive" in f.how
        assert SECTIONS[lost] in f.why
        assert states(p)["tcp_app_bytes"] == "works"
    assert UDP_READS_FALLBACK not in plan("auto", "auto", {}).programs
    # refused too: missing, with every refusal that took it
    p = plan("auto", "auto", refused("ft_udp_recvmsg_exit", UDP_READS_FALLBACK))
    f = p.figures["udp_app_bytes"]
    assert f.state == "missing" and "fexit/udp_recvmsg" in f.why and \
        "sock_recv_length" in f.why
    # the other hooks read UDP their own way
    assert UDP_READS_FALLBACK not in plan("exact", "auto", refused("ft_udp_recvmsg_exit")).programs


def test_auto_timing_falls_back_and_says_why():
    p = plan("auto", "auto", refused("ft_sample"))
    assert p.timing == "exact" and "perf_event" in p.timing_why and p.skb_count == 0
    assert {"ft_softirq_entry", "ft_sys_enter", "ft_sched_switch"} <= p.programs
    p = plan("auto", "auto", refused("ft_sample", "ft_softirq_exit"))
    assert p.timing == "counts" and p.skb_count == FT_COUNT_TCP | FT_COUNT_UDP
    assert states(p)["kernel_time"] == "missing" and "softirq_exit" in p.figures["kernel_time"].why
    assert states(p)["tcp_rx_bytes"] == "works"


def test_what_was_asked_for_by_name_is_an_error_when_refused():
    with pytest.raises(PlanError, match="perf_event"):
        plan("sampled", "auto", refused("ft_sample"))
    with pytest.raises(PlanError, match=r"--app-hook fexit: .*fexit/tcp_recvmsg"):
        plan("exact", "fexit", refused("ft_tcp_recvmsg_exit"))
    with pytest.raises(PlanError, match="needs --timing sampled"):
        plan("auto", "counters", refused("ft_sample"))
    with pytest.raises(PlanError, match="softirq_entry"):
        plan("auto", "auto", refused("ft_sample", "ft_skb_hint", "ft_softirq_entry"))


@pytest.mark.parametrize("timing,hook", [("auto", "auto"), ("exact", "auto"),
                                         ("sampled", "tracepoint"), ("auto", "off")])
@pytest.mark.parametrize("kernel", ["each optional alone", "every optional"])
def test_a_refusing_kernel_is_met_in_one_attempt_a_refusal(timing, hook, kernel):
    """As the tracer meets a kernel: it loads the plan, the kernel refuses one program of it,
    the next plan goes without it. It ends within one attempt per refusal, and what it ends on
    loads: none of the refused programs is in it."""
    refusing = [{p} for p in OPTIONAL] if kernel == "each optional alone" else [set(OPTIONAL)]
    if hook == "tracepoint":   # asked for by name: its own program must load
        refusing = [r - {"ft_sock_recv_length"} for r in refusing]
    for kernel_refuses in refusing:
        seen: dict[str, str] = {}
        for attempt in range(len(kernel_refuses) + 1):
            p = plan(timing, hook, seen)
            hit = sorted(kernel_refuses & p.programs)
            if not hit:
                break
            seen.update(refused(hit[0]))
        else:
            pytest.fail(f"no plan without {kernel_refuses}")
        assert attempt <= len(kernel_refuses)
        assert not p.programs & kernel_refuses
        for name, f in p.figures.items():
            if f.state != "works":
                assert f.why, (name, f)


def test_refusals_for_one_reason_read_as_one():
    r = refused("ft_udp_recvmsg_exit", "ft_udpv6_recvmsg_exit") | refused("ft_flush_socks",
                                                                          code="EINVAL: x")
    assert refusals(["ft_udp_recvmsg_exit", "ft_udpv6_recvmsg_exit", "ft_flush_socks"], r) == (
        f"the kernel refused fexit/udp_recvmsg, fexit/udpv6_recvmsg ({EPERM}); "
        "the kernel refused iter/bpf_sk_storage_map (EINVAL: x)")
    assert refusals(["ft_sock_recv_length"], {"ft_sock_recv_length": "no such hook"}) == \
        "no such hook"


def test_the_tests_stand_in_for_a_refusing_kernel():
    assert forced_refusals(None) == set() and forced_refusals("") == set()
    assert forced_refusals("ft_flush_socks, ft_tcp_state") == {"ft_flush_socks", "ft_tcp_state"}
    assert forced_refusals("optional") == set(OPTIONAL)
    assert forced_refusals("optional,ft_sample") == set(OPTIONAL) | {"ft_sample"}
    with pytest.raises(PlanError, match="names no program or map ft_nope"):
        forced_refusals("ft_nope")


def test_the_map_table_is_the_objects():
    src = _flowtrace_source()
    from steer.trace.programs import MAPS
    found = re.findall(r'^\} (\w+) SEC\("\.maps"\);', src, re.M)
    assert sorted(found) == sorted(MAPS) and len(set(found)) == len(found), found
    assert forced_refusals("readers,ft_tcp_state") == {"readers", "ft_tcp_state"}


def test_a_figure_is_lost_to_the_kernel_by_where_its_reason_came_from_not_its_words():
    """What the kernel refused or lacks (whatever its words) costs a figure to the kernel; what
    an option left out (whatever its words) does not: the live view's degraded line, steer
    check's headline and the exporter's state read the flag, not the English."""
    from steer.model.capabilities import lost_to_kernel
    odd = {p: "EACCES: no words a parser would look for" for p in ("ft_kfree_skb", "ft_napi_poll")}
    lost = lost_to_kernel(plan("auto", "auto", odd).figures)
    assert sorted(lost) == ["drops", "napi_polls"]
    assert all(f.kernel and f.why == odd["ft_kfree_skb"] for f in lost.values())
    # the hook turned off by name: every reader figure missing, none of them the kernel's
    off = plan("auto", "off", {}).figures
    assert {n for n, f in off.items() if f.state == "missing"} >= {"tcp_app_bytes", "app_calls"}
    assert not lost_to_kernel(off) and off["tcp_app_bytes"].why == "--app-hook off"
    # the same hook gone because the kernel refused every one: the kernel's
    every = {p: f"the kernel refused {SECTIONS[p]} (EPERM: x)" for h in HOOKS.values() for p in h}
    gone = plan("exact", "auto", every).figures
    assert {"tcp_app_bytes", "reader", "app_time"} <= set(lost_to_kernel(gone))


def test_sampled_timing_counts_the_samples_a_kernel_withholds():
    """The sampled mode takes ft_sample_withheld beside its core, and without it says what
    kernel time loses; the exact mode has no sampler's clock to watch."""
    assert WITHHELD in plan("sampled", "auto", {}).programs
    assert WITHHELD not in plan("exact", "auto", {}).programs
    assert states(plan("sampled", "auto", {}))["kernel_time"] == "works"
    p = plan("sampled", "auto", refused(WITHHELD))
    assert p.timing == "sampled" and WITHHELD not in p.programs
    assert states(p)["kernel_time"] == "degraded"
    assert "idle" in p.figures["kernel_time"].how
