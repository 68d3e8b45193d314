"""Snapshot logic on synthetic tracer samples: deltas, dominant CPUs, classes, the UDP join."""
import os
from dataclasses import replace

from steer.model.flows import NS, Intervals, build_snapshot
from steer.model.placement import PLACEMENT_HALF_LIFE, PlacementMemory
from steer.model.topology import read_topology
from steer.model.capabilities import MISSING, WORKS, Capabilities, Figure
from steer.model.samples import CpuSample, FlowCpuSample, FlowId, TraceSample

VM = os.path.join(os.path.dirname(__file__), "../support/fixtures/sysfs-vm-2cpu")
CAPS = Capabilities(*[Figure(WORKS, "")] * 3, Figure(MISSING, "no PMU"))
A = FlowId("tcp", "198.18.0.1", 40000, "198.18.0.2", 5201)
B = FlowId("udp", "198.18.0.1", 40001, "198.18.0.2", 9000)
UDP_SOCKET = FlowId("udp", "0.0.0.0", 0, "198.18.0.2", 9000)


def sample(t_ns, entries, cpus=None):
    e = {(s.flow, s.cpu): s for s in entries}
    return TraceSample(t_ns, e, tuple(cpus or (CpuSample(0), CpuSample(1))), len(e), 1024)


def test_deltas_dominant_cpus_and_class():
    before = sample(0, [FlowCpuSample(A, 0, rx_bytes=1000, kernel_ns=10, app_calls=1)])
    after = sample(2_000_000_000, [
        FlowCpuSample(A, 0, rx_bytes=1000 + 10**9, rx_skbs=100, kernel_ns=10 + 900_000_000,
                      app_calls=1),
        FlowCpuSample(A, 1, kernel_ns=100_000_000, app_ns=500_000_000, app_calls=50,
                      app_bytes=10**9, app_pid=42, app_comm="iperf3"),
    ])
    snap = build_snapshot(before, after, read_topology(VM), CAPS)
    (f,) = snap.flows
    assert snap.duration == 2.0
    assert f.rx_bytes == 10**9 and f.rate_bps == 4e9
    assert f.rx_skbs == 100 and f.as_json()["rx_skbs"] == 100
    assert f.kernel_cpu == 0 and abs(f.kernel_cpu_share - 0.9) < 1e-9
    assert abs(f.kernel_seconds - 1.0) < 1e-9
    assert f.app_cpu == 1 and f.app_cpu_share == 1.0 and f.app_pid == 42
    assert f.placement.cls == "same-socket" and f.placement.shared_llc is True
    assert abs(f.kernel_seconds_per_gb - 1.0) < 1e-9
    assert f.llc_misses_kernel is None   # unavailable is not zero
    j = f.as_json()
    assert j["class"] == "same-socket" and j["llc_misses_app"] is None


def test_reader_not_seen_is_unknown():
    after = sample(10**9, [FlowCpuSample(A, 1, rx_bytes=5, rx_skbs=1, kernel_ns=7)])
    (f,) = build_snapshot(sample(0, []), after, read_topology(VM), CAPS).flows
    assert f.kernel_cpu == 1 and f.app_cpu is None and f.placement.cls == "unknown"


def test_evicted_entry_counts_from_zero():
    before = sample(0, [FlowCpuSample(A, 0, rx_bytes=10**6, app_calls=9)])
    after = sample(10**9, [FlowCpuSample(A, 0, rx_bytes=100, rx_skbs=1, app_calls=1)])
    (f,) = build_snapshot(before, after, read_topology(VM), CAPS).flows
    assert f.rx_bytes == 100


def test_unconnected_udp_reader_joins_its_only_flow():
    after = sample(10**9, [
        FlowCpuSample(B, 0, rx_bytes=3000, rx_skbs=3, kernel_ns=30),
        FlowCpuSample(UDP_SOCKET, 1, app_bytes=3000, app_calls=3, app_ns=90, app_pid=7),
    ])
    (f,) = build_snapshot(sample(0, []), after, read_topology(VM), CAPS).flows
    assert f.flow == B and f.app_bytes == 3000 and f.app_cpu == 1 and f.kernel_cpu == 0


def test_cpu_reports_and_evictions():
    cpus_before = (CpuSample(0, net_rx_events=5, net_rx_ns=100), CpuSample(1))
    cpus_after = (CpuSample(0, net_rx_events=25, net_rx_ns=1100, flow_inserts=3), CpuSample(1))
    snap = build_snapshot(sample(0, [], cpus_before), sample(10**9, [], cpus_after),
                          read_topology(VM), CAPS)
    assert snap.cpus[0].net_rx_events == 20 and snap.cpus[0].net_rx_seconds == 1e-6
    assert snap.evictions == 3   # three inserts, none left


def _interval(t0, t1, kernel_by_cpu, app_cpu=0):
    """A snapshot of flow A between T0 and T1 s: KERNEL_BY_CPU seconds, reads on APP_CPU."""
    entries = [FlowCpuSample(A, c, rx_bytes=10**6, kernel_ns=int(s * NS)) for c, s in kernel_by_cpu.items()]
    entries.append(FlowCpuSample(A, app_cpu, app_ns=50_000_000, app_calls=10, app_bytes=10**6))
    merged = {}
    for e in entries:
        merged[e.cpu] = replace(merged[e.cpu], app_ns=e.app_ns, app_calls=e.app_calls,
                                app_bytes=e.app_bytes) if e.cpu in merged else e
    return build_snapshot(sample(int(t0 * NS), []), sample(int(t1 * NS), merged.values()),
                          read_topology(VM), CAPS)


def test_placement_memory_holds_a_class_through_a_noisy_interval_and_follows_a_move():
    """Kernel work mostly on CPU 1, reader on CPU 0 (same-socket): one second where a few samples
    land on CPU 0 makes that interval alone same-core, not the remembered flow; a real move to
    CPU 0 shows within a few half-lives."""
    mem = PlacementMemory(read_topology(VM))
    for t in range(5):
        (f,) = mem.update(_interval(t, t + 1, {1: 0.08})).flows
        assert f.placement.cls == "same-socket"
    noisy = _interval(5, 6, {0: 0.05, 1: 0.04})
    assert noisy.flows[0].placement.cls == "same-core"       # the interval alone
    (f,) = mem.update(noisy).flows
    assert f.placement.cls == "same-socket" and f.kernel_cpu == 1 and f.kernel_cpu_share < 0.9
    classes = [mem.update(_interval(t, t + 1, {0: 0.08})).flows[0].placement.cls
               for t in range(6, 6 + 3 * int(PLACEMENT_HALF_LIFE))]
    assert classes[0] == "same-socket" and classes[-1] == "same-core"
    assert classes.index("same-core") <= 2 * PLACEMENT_HALF_LIFE


def test_placement_memory_holds_only_the_last_snapshots_flows():
    """Thousands of short connections a second must not grow it: a flow absent from an interval
    is forgotten, and comes back without its past."""
    mem = PlacementMemory(read_topology(VM))
    for t in range(5):
        mem.update(_interval(t, t + 1, {1: 0.08}))
    assert A in mem._past
    mem.update(build_snapshot(sample(0, []), sample(NS, []), read_topology(VM), CAPS))
    assert not mem._past
    (f,) = mem.update(_interval(6, 7, {0: 0.05, 1: 0.04})).flows
    assert f.placement.cls == "same-core"


def test_consecutive_reads_diff_only_the_entries_the_tracer_saw_change():
    """The tracer numbers its reads and lists the keys that changed since the previous one; for
    two consecutive reads only those are compared, for any other pair every entry is."""
    a0 = FlowCpuSample(A, 0, rx_bytes=100, rx_skbs=1, kernel_ns=10)
    b0 = FlowCpuSample(B, 1, rx_bytes=100, rx_skbs=1, kernel_ns=10)
    first = replace(sample(0, [a0, b0]), seq=1)
    a1 = replace(a0, rx_bytes=1100, rx_skbs=2)
    b1 = replace(b0, rx_bytes=5100, rx_skbs=3)   # changed, but left out of `changed` on purpose
    second = replace(sample(10**9, [a1, b1]), seq=2, changed=((A, 0),))
    topo = read_topology(VM)
    (f,) = build_snapshot(first, second, topo, CAPS).flows
    assert f.flow == A and f.rx_bytes == 1000
    third = replace(second, seq=3)               # a read skipped between: compare everything
    by_flow = {f.flow: f.rx_bytes for f in build_snapshot(first, third, topo, CAPS).flows}
    assert by_flow == {A: 1000, B: 5000}


def test_smoothed_intervals_classify_by_the_recent_past_and_total_by_the_whole():
    """The live view's Intervals(smooth=True): a noisy second keeps the class; total() does not
    smooth (it covers every interval at once)."""
    cum = {0: 0.0, 1: 0.0}
    reads = [sample(0, [])]
    for t, kernel in enumerate([{1: 0.08}] * 4 + [{0: 0.05, 1: 0.04}], start=1):
        for c, s in kernel.items():
            cum[c] += s
        entries = [FlowCpuSample(A, c, rx_bytes=10**6 * t, kernel_ns=int(s * NS))
                   for c, s in cum.items() if s]
        e = {x.cpu: x for x in entries}
        e[0] = replace(e.get(0, FlowCpuSample(A, 0)), app_ns=t * 50_000_000, app_calls=10 * t,
                       app_bytes=10**6 * t)
        reads.append(sample(t * NS, e.values()))

    class Reads:
        capabilities = CAPS

        def __init__(self):
            self.it = iter(reads)

        def sample(self):
            return next(self.it)

    plain, smooth = Intervals(Reads(), read_topology(VM)), \
        Intervals(Reads(), read_topology(VM), smooth=True)
    for _ in range(4):
        assert plain().flows[0].placement.cls == smooth().flows[0].placement.cls == "same-socket"
    assert plain().flows[0].placement.cls == "same-core"    # the noisy second alone
    assert smooth().flows[0].placement.cls == "same-socket"
    assert smooth.total().flows[0].kernel_cpu == 1


def test_pmu_events_per_side_only_when_counted_and_whole_cpu_deltas():
    """The references, instructions and cycles a flow's sides took reach it only where the tracer
    charges them per flow (else None, not 0); each CPU's whole counts are the delta between the
    two reads, with the LLC hit ratio."""
    counted = replace(CAPS, llc=Figure(WORKS, "hardware cache-misses"),
                      counters_per_flow=Figure(WORKS, "llc_references, instructions, cycles ..."))
    entry = dict(rx_bytes=10**6, rx_skbs=1, kernel_ns=5, llc_kernel=40, refs_kernel=100,
                 instructions_kernel=7000, cycles_kernel=9000, llc_app=1, refs_app=4)
    after = TraceSample(10**9, {(A, 0): FlowCpuSample(A, 0, **entry)},
                        (CpuSample(0, refs_kernel=150, cycles_app=3), CpuSample(1)), 1, 1024,
                        cpu_events={0: {"llc_misses": 60, "llc_references": 240, "cycles": 10**9}})
    before = TraceSample(0, {}, (CpuSample(0, refs_kernel=50), CpuSample(1)), 0, 1024,
                         cpu_events={0: {"llc_misses": 10, "llc_references": 40, "cycles": 1}})
    snap = build_snapshot(before, after, read_topology(VM), counted)
    (f,) = snap.flows
    assert (f.llc_references_kernel, f.instructions_kernel, f.cycles_kernel) == (100, 7000, 9000)
    assert f.llc_hit_ratio_kernel == 0.6 and f.llc_hit_ratio_app == 0.75
    assert f.as_json()["llc_hit_ratio_kernel"] == 0.6 and f.as_json()["instructions_app"] == 0
    cpu0 = snap.cpus[0]
    assert cpu0.events["kernel"]["llc_references"] == 100 and cpu0.events["app"]["cycles"] == 3
    assert cpu0.whole_cpu == {"llc_misses": 50, "llc_references": 200, "cycles": 10**9 - 1,
                              "llc_hit_ratio": 0.75}
    assert snap.cpus[1].whole_cpu is None
    (g,) = build_snapshot(before, after, read_topology(VM), CAPS).flows
    assert g.llc_references_kernel is None and g.llc_hit_ratio_kernel is None
    assert g.as_json()["cycles_app"] is None and build_snapshot(
        before, after, read_topology(VM), CAPS).cpus[0].events is None


def test_napi_polls_give_each_flow_its_arrival_cpu_and_each_cpu_its_polls():
    """A flow's poll CPUs are those of the NAPI instance its napi_id names, else of its device's
    instances; the backlog (all-zero id) counts on the CPUs but belongs to no flow."""
    from steer.model.samples import NapiCounts, NapiId
    eth, veth, backlog = NapiId(7, 2, 8193), NapiId(9, 3, 8200), NapiId(0, 0, 0)
    v = dict(rx_bytes=10**6, rx_skbs=10, kernel_ns=5)
    before = replace(sample(0, []), napi={eth: {0: NapiCounts(100, 900, 1)}})
    after = replace(sample(10**9, [
        FlowCpuSample(A, 1, rx_ifindex=2, rx_netns=7, rx_napi_id=8193, **v),
        FlowCpuSample(B, 1, rx_ifindex=3, rx_netns=9, **v),   # no napi_id: by its device
    ]), napi={eth: {0: NapiCounts(150, 1900, 3), 1: NapiCounts(5, 5, 0)},
              NapiId(7, 2, 8194): {1: NapiCounts(70, 70, 0)},   # the device's other queue
              veth: {1: NapiCounts(40, 4000, 40)}, backlog: {0: NapiCounts(8, 8, 0)}})
    snap = build_snapshot(before, after, read_topology(VM), CAPS)
    by = {f.flow: f for f in snap.flows}
    assert by[A].rx_poll_cpus == {0: 50, 1: 5}
    assert by[A].as_json()["rx"]["poll_cpus"] == {"0": 50, "1": 5}
    assert by[B].rx_poll_cpus == {1: 40}
    cpus = {c.cpu: c for c in snap.cpus}
    assert cpus[0].napi == NapiCounts(58, 1008, 2) and cpus[1].napi == NapiCounts(115, 4075, 40)
    assert cpus[0].as_json()["napi_full_polls"] == 2
    j = {(n["ifindex"], n["napi_id"]): n for n in snap.as_json()["napi"]}
    assert j[0, 0]["backlog"] and j[0, 0]["polls"] == {"0": 8}
    assert j[2, 8193]["packets"] == {"0": 1000, "1": 5} and not j[2, 8193]["backlog"]
    # a flow whose device did not poll (its packets came through the backlog): none, not unknown
    lone = replace(sample(10**9, [FlowCpuSample(A, 1, rx_ifindex=4, rx_netns=7, **v)]),
                   napi={backlog: {1: NapiCounts(3, 3, 0)}})
    (f,) = build_snapshot(sample(0, []), lone, read_topology(VM), CAPS).flows
    assert f.rx_poll_cpus == {}
    (f,) = build_snapshot(sample(0, []), sample(10**9, [FlowCpuSample(A, 1, **v)]),
                          read_topology(VM), CAPS).flows
    assert f.rx_poll_cpus is None and f.as_json()["rx"] is None


def refusing_caps(*refused_programs: str) -> Capabilities:
    """The capabilities of a kernel that refused REFUSED_PROGRAMS, as the tracer makes them."""
    from steer.trace.programs import SECTIONS, plan
    refused = {p: f"the kernel refused {SECTIONS[p]} (EPERM: Operation not permitted)"
               for p in refused_programs}
    p = plan("auto", "auto", refused)
    return replace(CAPS, mode=p.timing, refused=refused,
                   figures=dict(p.figures))


def test_the_fields_of_a_figure_the_kernel_refused_are_null_not_zero():
    """A flow's reader bytes where the kernel refused every socket program, drops and NAPI polls
    where it refused their tracepoints: null in the JSON, the reason in capabilities.figures;
    what does not depend on them (UDP's reader bytes by fexit, the kernel side) stays."""
    caps = refusing_caps("ft_tcp_state", "ft_tcp_destroy", "ft_flush_socks", "ft_tcp_sockets",
                         "ft_kfree_skb", "ft_napi_poll")
    after = sample(NS, [FlowCpuSample(A, 0, rx_bytes=10**6, rx_skbs=10, kernel_ns=NS // 10),
                        FlowCpuSample(A, 1, app_ns=NS // 5, app_pid=7, app_comm="iperf3"),
                        FlowCpuSample(B, 0, rx_bytes=1000, rx_skbs=1, app_bytes=1000,
                                      app_calls=1)])
    snap = build_snapshot(sample(0, []), after, read_topology(VM), caps)
    j = snap.as_json()
    tcp, udp = (next(f for f in j["flows"] if f["proto"] == p) for p in ("tcp", "udp"))
    assert tcp["app_bytes"] is None and tcp["rx_drops"] is None
    assert tcp["rx_bytes"] == 10**6 and tcp["app_cpu"] == 1 and tcp["kernel_seconds"] == 0.1
    assert udp["app_bytes"] == 1000
    assert all(c["napi_polls"] is None and c["rx_drops"] is None for c in j["cpus"])
    why = j["capabilities"]["figures"]["tcp_app_bytes"]["why"]
    assert "inet_sock_set_state, iter/tcp" in why and "EPERM" in why
    assert sorted(caps.lost) == ["drops", "napi_polls", "open_connections", "tcp_app_bytes"]
    assert snap.flows[0].as_json()["app_bytes"] is not None   # without caps: as counted


def test_without_counted_skbs_the_stack_cpu_is_where_the_kernel_time_was():
    """Sampled timing counts no TCP skb: a steered flow's stack ran in its cpumap kthread (CPU 1)
    though its arrival CPU (0, XDP and linearising) took more time; an unsteered one's where its
    softirq time was. Counted skbs, where there are some, decide as before."""
    steered = sample(NS, [FlowCpuSample(A, 0, rx_bytes=10**6, kernel_ns=NS // 2),
                          FlowCpuSample(A, 1, kthread_ns=NS // 4)])
    (f,) = build_snapshot(sample(0, []), steered, read_topology(VM), CAPS).flows
    assert (f.kernel_cpu, f.stack_cpu, f.stack_cpu_share) == (0, 1, 1.0)
    plain = sample(NS, [FlowCpuSample(A, 1, rx_bytes=10**6, kernel_ns=NS // 2)])
    (f,) = build_snapshot(sample(0, []), plain, read_topology(VM), CAPS).flows
    assert f.stack_cpu == f.kernel_cpu == 1
    counted = sample(NS, [FlowCpuSample(A, 0, rx_bytes=10**6, rx_skbs=10, kernel_ns=NS // 2),
                          FlowCpuSample(A, 1, rx_skbs=30, kthread_ns=NS // 4)])
    (f,) = build_snapshot(sample(0, []), counted, read_topology(VM), CAPS).flows
    assert (f.stack_cpu, f.stack_cpu_share) == (1, 0.75)


def test_a_steered_flows_class_is_its_stacks_not_its_arrival_cpus():
    """Generic XDP steering from CPU 0 to CPU 1: the arrival CPU spends more (XDP, linearising)
    than the cpumap kthread's stack, and the reader is on 1. The class is the stack's against the
    reader's: same-core, in the interval and through the memory; the view shows both CPUs."""
    from steer.present.view import kernel_cpu_text
    topo = read_topology(VM)

    def steered(t):   # the counts after t seconds of it
        return sample(t * NS, [FlowCpuSample(A, 0, rx_bytes=t * 10**6, kernel_ns=t * NS // 2),
                               FlowCpuSample(A, 1, rx_skbs=t * 10, kthread_ns=t * NS // 4,
                                             app_ns=t * NS // 5, app_calls=t * 100,
                                             app_bytes=t * 10**6, app_pid=7, app_comm="r")])

    (f,) = build_snapshot(steered(0), steered(1), topo, CAPS).flows
    assert (f.kernel_cpu, f.stack_cpu, f.app_cpu) == (0, 1, 1)
    assert f.placement.cls == "same-core" and kernel_cpu_text(f) == "0→1"
    mem = PlacementMemory(topo)
    for t in range(1, 6):
        (f,) = mem.update(build_snapshot(steered(t - 1), steered(t), topo, CAPS)).flows
        assert (f.kernel_cpu, f.stack_cpu, f.placement.cls) == (0, 1, "same-core"), t
    assert f.stack_cpu_share == 1.0
    unsteered = sample(NS, [FlowCpuSample(A, 0, rx_bytes=10**6, rx_skbs=10, kernel_ns=NS // 2),
                            FlowCpuSample(A, 1, app_ns=NS // 5, app_calls=100, app_pid=7)])
    (f,) = build_snapshot(sample(0, []), unsteered, topo, CAPS).flows
    assert (f.stack_cpu, f.placement.cls) == (0, "same-socket") and kernel_cpu_text(f) == "0"


def test_a_sampled_time_carries_its_samples_and_standard_error():
    """Sampled timing: each side's samples summed over CPUs, one standard error seconds/sqrt(n);
    exact timing has neither, and a side no sample landed on has no error bar (below a period,
    not known to be 0)."""
    after = sample(NS, [FlowCpuSample(A, 0, rx_bytes=10**6, kernel_ns=NS // 4, kernel_samples=20),
                        FlowCpuSample(A, 1, kernel_ns=NS // 4, kernel_samples=5,
                                      app_pid=7, app_comm="x")])
    sampled = replace(CAPS, mode="sampled")
    (f,) = build_snapshot(sample(0, []), after, read_topology(VM), sampled).flows
    assert (f.kernel_samples, f.app_samples) == (25, 0)
    assert abs(f.kernel_seconds_stderr - 0.5 / 5) < 1e-12 and f.app_seconds_stderr is None
    j = f.as_json()
    assert j["kernel_samples"] == 25 and j["kernel_seconds_stderr"] == 0.1
    (g,) = build_snapshot(sample(0, []), after, read_topology(VM), CAPS).flows   # exact
    assert g.kernel_samples is None and g.kernel_seconds_stderr is None


def test_pmu_events_of_a_flow_are_the_intervals_not_since_the_entry_began():
    """A flow's references, instructions and cycles between two reads are the difference of its
    entry's counts (they were its whole counts since the entry began, which the exporter then
    added to its class totals at every scrape)."""
    counted = replace(CAPS, counters_per_flow=Figure(WORKS, "llc_references, instructions, cycles"))
    first = dict(rx_bytes=10**6, rx_skbs=1, kernel_ns=5, refs_kernel=100, instructions_app=70,
                 cycles_kernel=9000)
    later = dict(rx_bytes=2 * 10**6, rx_skbs=2, kernel_ns=9, refs_kernel=130, instructions_app=75,
                 cycles_kernel=9500)
    before = sample(0, [FlowCpuSample(A, 0, **first)])
    after = sample(10**9, [FlowCpuSample(A, 0, **later)])
    (f,) = build_snapshot(before, after, read_topology(VM), counted).flows
    assert (f.llc_references_kernel, f.instructions_app, f.cycles_kernel) == (30, 5, 500)
    # on two CPUs, the two entries' differences summed
    before = sample(0, [FlowCpuSample(A, 0, **first), FlowCpuSample(A, 1, **first)])
    after = sample(10**9, [FlowCpuSample(A, 0, **later), FlowCpuSample(A, 1, **later)])
    (f,) = build_snapshot(before, after, read_topology(VM), counted).flows
    assert (f.llc_references_kernel, f.instructions_app, f.cycles_kernel) == (60, 10, 1000)


def test_a_flow_on_one_cpu_reports_as_the_general_case_does():
    """build_snapshot's one-entry path (most flows under churn) gives the report the general
    path gives: checked against the same flow with an empty entry on another CPU beside it."""
    topo = read_topology(VM)
    entries = [dict(rx_bytes=5000, rx_skbs=3, kernel_ns=70, app_calls=2, app_ns=40, app_pid=9,
                    app_comm="r", rx_ifindex=3, rx_netns=77, rx_queue=2, rx_drops=1,
                    last_drop_reason="TCP_CSUM", last_seen_ns=5),
               dict(rx_bytes=10, rx_skbs=1),                     # no time: the stack CPU
               dict(kthread_ns=80),                               # a steered flow's kthread
               dict(app_calls=3),                                 # reads, no time counted
               dict(app_ns=30, app_pid=4, app_comm="x"), dict()]
    for e in entries:
        for cpu in (0, 1):
            one = build_snapshot(sample(0, []), sample(10**9, [FlowCpuSample(A, cpu, **e)]), topo,
                                 CAPS).flows
            two = build_snapshot(sample(0, []), sample(10**9, [FlowCpuSample(A, cpu, **e),
                                                                FlowCpuSample(A, 1 - cpu)]),
                                 topo, CAPS).flows
            assert one == two, e
