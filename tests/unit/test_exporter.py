"""The exporter's collector on a fake tracer (the TraceSource protocol) and fake steering state:
what Prometheus would scrape, without root or BPF, in the text format a real scrape gets."""
import dataclasses
import os
import platform

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import fakes
from steer import __version__
from steer.present.exporter import SteerCollector
from steer.model.flowspec import FlowSpec
from steer.model.capabilities import MISSING, WORKS, Capabilities, Figure
from steer.model.samples import CpuSample, FlowCpuSample, FlowId, TraceSample
from steer.steering.xdp import DeviceState, RuleView
from steer.model.topology import read_topology

VM = os.path.join(os.path.dirname(__file__), "../support/fixtures/sysfs-vm-2cpu")
CAPS = Capabilities(Figure(WORKS, ""), Figure(WORKS, "sock_recv_length"), Figure(WORKS, ""),
                    Figure(MISSING, "no PMU (perf_event_open: ENOENT)"), Figure(WORKS, "sampled: 99 Hz"))
FAST = FlowId("tcp", "198.18.0.1", 40000, "198.18.0.2", 5201)
SLOW = FlowId("tcp", "198.18.0.1", 40001, "198.18.0.2", 5202)
S = 1_000_000_000


def FakeTracer(samples):
    return fakes.FakeTracer(samples, CAPS)


def _sample(t, entries):
    e = {(s.flow, s.cpu): s for s in entries}
    return TraceSample(t * S, e, (CpuSample(0, net_rx_ns=t * S // 4), CpuSample(1)), len(e), 1024)


def _flow(flow, t, rate, kernel_cpu, app_cpu, kernel_bytes=None):
    """FLOW's entries (one per CPU) after T seconds at RATE bytes/s: its softirq on KERNEL_CPU,
    its reader on APP_CPU; KERNEL_BYTES: {cpu: bytes} where the softirq moved meanwhile."""
    per_cpu = {}
    for cpu, n in (kernel_bytes or {kernel_cpu: rate * t}).items():
        per_cpu[cpu] = dict(rx_bytes=n, rx_skbs=n // rate, kernel_ns=n // rate * S // 10)
    per_cpu.setdefault(app_cpu, {}).update(app_bytes=rate * t, app_calls=t, app_ns=t * S // 5,
                                           app_pid=7, app_comm="iperf3")
    return [FlowCpuSample(flow, cpu, **v) for cpu, v in per_cpu.items()]


def _scrape(collector) -> dict:
    """{(metric sample name, frozen labels): value} of one scrape, through the text format."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    text = generate_latest(reg).decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def _get(scrape, name, **labels):
    return scrape[(name, frozenset({k: str(v) for k, v in labels.items()}.items()))]


def test_class_counters_per_flow_series_and_top_k():
    tracer = FakeTracer([_sample(0, []),
                         _sample(2, _flow(FAST, 2, 10**9, 0, 1) + _flow(SLOW, 2, 10**6, 1, 1))])
    c = SteerCollector(tracer, read_topology(VM), top_k=1)
    list(c.collect())   # the first read: the baseline of the next
    m = _scrape(c)
    # FAST: softirq on 0, reader on 1 (same socket); SLOW both on 1 (same core)
    assert _get(m, "steer_class_rx_bytes_total", **{"class": "same-socket"}) == 2 * 10**9
    assert _get(m, "steer_class_rx_bytes_total", **{"class": "same-core"}) == 2 * 10**6
    assert _get(m, "steer_class_flows", **{"class": "same-socket"}) == 1
    labels = dict(proto="tcp", src="198.18.0.1", sport=40000, dst="198.18.0.2", dport=5201)
    assert _get(m, "steer_flow_receive_bytes_total", **labels) == 2 * 10**9
    assert abs(_get(m, "steer_flow_kernel_seconds_total", **labels) - 0.2) < 1e-9
    assert abs(_get(m, "steer_flow_app_seconds_total", **labels) - 0.4) < 1e-9
    assert _get(m, "steer_flow_info", **labels, kernel_cpu=0, stack_cpu=0, app_cpu=1,
                shared_llc="true", smt_sibling="false", app_comm="iperf3",
                **{"class": "same-socket"}) == 1
    # top_k=1: the slow flow has no series of its own
    assert not [k for k in m if k[0].startswith("steer_flow_") and ("sport", "40001") in k[1]]
    assert _get(m, "steer_cpu_kernel_seconds_total", cpu=0, context="softirq") == 0.5
    assert _get(m, "steer_build_info", version=__version__, python=platform.python_version(),
                kernel=os.uname().release) == 1
    assert 0 <= _get(m, "steer_scrape_duration_seconds") < 1


def test_class_counters_never_go_down_when_a_flow_changes_class():
    # 2 s with the softirq on CPU 0 (same socket as the reader on 1), then 4 s on CPU 1 (same core)
    t1 = _flow(FAST, 2, 10**9, 0, 1)
    t2 = _flow(FAST, 6, 10**9, 1, 1, kernel_bytes={0: 2 * 10**9, 1: 4 * 10**9})
    tracer = FakeTracer([_sample(0, []), _sample(2, t1), _sample(6, t2)])
    c = SteerCollector(tracer, read_topology(VM))
    list(c.collect())
    first, second = _scrape(c), _scrape(c)

    def by_class(m):
        return {dict(labels)["class"]: v for (n, labels), v in m.items()
                if n == "steer_class_rx_bytes_total"}
    assert by_class(first) == {"same-socket": 2e9, "same-core": 0, "cross-socket": 0, "unknown": 0}
    assert by_class(second) == {"same-socket": 2e9, "same-core": 4e9, "cross-socket": 0, "unknown": 0}


def test_steering_state_and_capabilities():
    rule = RuleView(FlowSpec.parse("proto=tcp,dport=5201"), cpu=1, id=0, packets=10, bytes=15000)
    devices = [DeviceState("veth-rx", "lab", "generic", None, [rule],
                           {"passed": 3, "unparsed": 1, "redirected": 10, "redirect_failed": 0}),
               DeviceState("bvb", None, "generic", "bvb was removed"),
               DeviceState("gone", "x", error="network namespace 'x' not found")]
    tracer = FakeTracer([_sample(0, []), _sample(1, [])])
    c = SteerCollector(tracer, read_topology(VM), steering=lambda: devices)
    list(c.collect())
    m = _scrape(c)
    assert _get(m, "steer_rule_packets_total", dev="veth-rx", netns="lab",
                rule="proto=tcp,dport=5201", cpu=1) == 10
    assert _get(m, "steer_xdp_packets_total", dev="veth-rx", netns="lab", result="unparsed") == 1
    assert _get(m, "steer_xdp_detached", dev="bvb", netns="") == 1
    assert _get(m, "steer_xdp_detached", dev="veth-rx", netns="lab") == 0
    assert not [k for k in m if ("dev", "gone") in k[1]]   # unreadable: no series, no error
    assert _get(m, "steer_capability_info", mechanism="llc", state="unavailable",
                detail="no PMU (perf_event_open: ENOENT)") == 1
    assert _get(m, "steer_capability_info", mechanism="timing", state="available",
                detail="sampled: 99 Hz") == 1


def test_a_second_scraper_changes_nothing_the_first_sees():
    """Two Prometheus servers (or a curl) read the same counters: scraping more often only
    splits the same counts into more intervals."""
    reads = [_sample(t, _flow(FAST, t, 10**9, 0, 1)) for t in range(0, 7)]
    one = SteerCollector(FakeTracer(reads[0::3]), read_topology(VM))   # t = 0, 3, 6
    two = SteerCollector(FakeTracer(reads), read_topology(VM))         # t = 0, 1, ..., 6
    list(one.collect())
    list(two.collect())
    a = [_scrape(one), _scrape(one)]
    b = [_scrape(two) for _ in range(6)]
    for name in ("steer_flow_receive_bytes_total", "steer_flow_kernel_seconds_total",
                 "steer_flow_app_seconds_total", "steer_class_rx_bytes_total",
                 "steer_class_kernel_seconds_total"):
        assert {k: v for k, v in a[1].items() if k[0] == name} == \
            {k: v for k, v in b[5].items() if k[0] == name}, name
    labels = dict(proto="tcp", src="198.18.0.1", sport=40000, dst="198.18.0.2", dport=5201)
    assert _get(a[1], "steer_flow_receive_bytes_total", **labels) == 6 * 10**9


def test_flow_counters_keep_what_a_deleted_entry_counted():
    """The flow moves from CPU 0 to CPU 1; its CPU-0 entry later expires (idle), and its CPU-1
    entry is evicted and inserted again from zero: the flow's counter never goes down."""
    topo = read_topology(VM)
    on0 = FlowCpuSample(FAST, 0, rx_bytes=100, kernel_ns=10)
    on1 = FlowCpuSample(FAST, 1, rx_bytes=50, kernel_ns=5, app_ns=7)
    reads = [_sample(0, []), _sample(1, [on0]), _sample(2, [on0, on1]), _sample(3, [on1]),
             _sample(4, [FlowCpuSample(FAST, 1, rx_bytes=20, kernel_ns=2)]), _sample(5, [])]
    c = SteerCollector(FakeTracer(reads), topo)
    list(c.collect())
    labels = dict(proto="tcp", src="198.18.0.1", sport=40000, dst="198.18.0.2", dport=5201)
    seen = []
    for _ in range(3):
        seen.append(_get(_scrape(c), "steer_flow_receive_bytes_total", **labels))
    m = _scrape(c)   # t=4: the CPU-1 entry restarted from zero
    seen.append(_get(m, "steer_flow_receive_bytes_total", **labels))
    assert seen == [100, 150, 150, 170]
    assert _get(m, "steer_flow_app_seconds_total", **labels) == 7e-9
    m = _scrape(c)   # t=5: every entry gone, and so is the flow
    assert not [k for k in m if k[0].startswith("steer_flow_")]


def test_service_labels_sum_the_connections_of_a_port_and_outlive_them():
    topo = read_topology(VM)
    a = FlowId("tcp", "198.18.0.1", 40000, "198.18.0.2", 5201)
    b = FlowId("tcp", "198.18.0.9", 50000, "198.18.0.2", 5201)
    reads = [_sample(0, []),
             _sample(1, [FlowCpuSample(a, 1, rx_bytes=100, kernel_ns=10),
                         FlowCpuSample(b, 1, rx_bytes=30, kernel_ns=3)]),
             _sample(2, [FlowCpuSample(b, 1, rx_bytes=40, kernel_ns=4)])]   # a ended
    c = SteerCollector(FakeTracer(reads), topo, flow_labels="service")
    list(c.collect())
    first, second = _scrape(c), _scrape(c)
    service = dict(proto="tcp", dst="198.18.0.2", dport=5201)
    assert _get(first, "steer_flow_receive_bytes_total", **service) == 130
    assert _get(second, "steer_flow_receive_bytes_total", **service) == 140   # a's 100 stay
    assert not [k for k in second if dict(k[1]).get("sport")]
    assert _get(first, "steer_flow_info", **service, kernel_cpu=1, stack_cpu=1, app_cpu="",
                shared_llc="",
                smt_sibling="", app_comm="", **{"class": "unknown"}) == 2   # two flows, no reader seen


def test_a_steered_flows_class_and_info_are_of_its_stack_cpu():
    """Arrival on CPU 0 (generic XDP: more time there than in the stack), the stack in CPU 1's
    cpumap kthread, the reader on 1: same-core by its stack, the arrival CPU a label beside."""
    def steered(t):
        return _sample(t, [FlowCpuSample(FAST, 0, rx_bytes=t * 10**9, kernel_ns=t * S // 2),
                           FlowCpuSample(FAST, 1, rx_skbs=t * 1000, kthread_ns=t * S // 4,
                                         app_bytes=t * 10**9, app_calls=t, app_ns=t * S // 5,
                                         app_pid=7, app_comm="iperf3")])
    c = SteerCollector(FakeTracer([steered(0), steered(2)]), read_topology(VM))
    list(c.collect())
    m = _scrape(c)
    labels = dict(proto="tcp", src="198.18.0.1", sport=40000, dst="198.18.0.2", dport=5201)
    assert _get(m, "steer_flow_info", **labels, kernel_cpu=0, stack_cpu=1, app_cpu=1,
                shared_llc="true", smt_sibling="false", app_comm="iperf3",
                **{"class": "same-core"}) == 1
    assert _get(m, "steer_class_rx_bytes_total", **{"class": "same-core"}) == 2 * 10**9


def test_service_labels_sum_the_replies_a_client_receives_on_ephemeral_ports():
    topo = read_topology(VM)
    # this host as a client of two servers: replies from port 6379 and 443 to local ports of
    # the ephemeral range; one flow between two ephemeral ports stays as it is
    replies = [FlowId("tcp", "198.18.0.1", 6379, "198.18.0.2", 40000 + i) for i in range(3)]
    other = FlowId("tcp", "198.18.0.1", 443, "198.18.0.2", 50000)
    both = FlowId("tcp", "198.18.0.1", 45000, "198.18.0.2", 46000)
    entries = [FlowCpuSample(f, 1, rx_bytes=10) for f in replies + [other, both]]
    c = SteerCollector(FakeTracer([_sample(0, []), _sample(1, entries)]), topo,
                       flow_labels="service")
    c._service_totals.ephemeral = range(32768, 61000)
    list(c.collect())
    m = _scrape(c)
    series = {dict(k[1])["dport"]: v for k, v in m.items() if k[0] == "steer_flow_receive_bytes_total"}
    assert series == {"ephemeral": 40, "46000": 10}


def test_pmu_events_per_cpu_whole_and_by_side_and_per_class():
    """The per-CPU events reach the exporter twice: whole (all a CPU ran, as PCM counts it) and
    charged to receive work by side; the classes get each side's events of their flows. No
    series at all without them (the default CAPS: no PMU)."""
    from dataclasses import replace
    caps = replace(CAPS, llc=Figure(WORKS, "hardware cache-misses"), counters=Figure(WORKS, "hardware"),
                   counters_per_flow=Figure(WORKS, "llc_references, instructions, cycles ..."))
    flows = [replace(s, instructions_kernel=500, refs_app=40) if s.cpu == 0 else s
             for s in _flow(FAST, 2, 10**9, 0, 1)]
    after = TraceSample(2 * S, {(s.flow, s.cpu): s for s in flows},
                        (CpuSample(0, llc_kernel=7, refs_kernel=70, instructions_kernel=500),
                         CpuSample(1, cycles_app=11)), 2, 1024,
                        cpu_events={0: {"llc_misses": 5, "instructions": 9}, 1: {"cycles": 3}})
    tracer = FakeTracer([_sample(0, []), after])
    tracer.capabilities = caps
    c = SteerCollector(tracer, read_topology(VM))
    list(c.collect())
    m = _scrape(c)
    assert _get(m, "steer_cpu_events_total", cpu=0, event="instructions") == 9
    assert _get(m, "steer_cpu_events_total", cpu=1, event="cycles") == 3
    assert _get(m, "steer_cpu_receive_events_total", cpu=0, side="kernel", event="llc_misses") == 7
    assert _get(m, "steer_cpu_receive_events_total", cpu=0, side="kernel",
                event="llc_references") == 70
    assert _get(m, "steer_cpu_receive_events_total", cpu=1, side="app", event="cycles") == 11
    assert _get(m, "steer_class_instructions_total", side="kernel", **{"class": "same-socket"}) == 500
    assert _get(m, "steer_class_llc_references_total", side="app", **{"class": "same-socket"}) == 40

    bare = SteerCollector(FakeTracer([_sample(0, []), _sample(2, _flow(FAST, 2, 10**9, 0, 1))]),
                          read_topology(VM))
    list(bare.collect())
    names = {name for name, _ in _scrape(bare)}
    assert not [n for n in names if "events" in n or "instructions" in n or "references" in n]


def test_napi_polls_per_cpu_split_into_device_and_backlog():
    """Each CPU's NAPI polls, packets and full polls, the devices' instances added up apart from
    the backlog: a CPU polling a device is where that device's packets arrive."""
    from dataclasses import replace
    from steer.model.samples import NapiCounts, NapiId
    after = replace(_sample(2, _flow(FAST, 2, 10**9, 0, 1)), napi={
        NapiId(7, 2, 8193): {0: NapiCounts(10, 600, 2)}, NapiId(7, 2, 8194): {0: NapiCounts(5, 5, 0)},
        NapiId(0, 0, 0): {1: NapiCounts(30, 31, 0)}})
    c = SteerCollector(FakeTracer([_sample(0, []), after]), read_topology(VM))
    list(c.collect())
    m = _scrape(c)
    assert _get(m, "steer_cpu_napi_polls_total", cpu=0, source="device") == 15
    assert _get(m, "steer_cpu_napi_packets_total", cpu=0, source="device") == 605
    assert _get(m, "steer_cpu_napi_full_polls_total", cpu=0, source="device") == 2
    assert _get(m, "steer_cpu_napi_polls_total", cpu=1, source="backlog") == 30
    assert (("steer_cpu_napi_polls_total", frozenset({("cpu", "1"), ("source", "device")}))
            not in m)


def test_the_kernels_refusals_are_series_a_fleet_can_alert_on():
    """steer_timing_mode_info, a steer_figure_info per figure with its state and why, a
    steer_program_refused per refused program with its hook: the dashboards' degraded table and
    SteerKernelLimitsTracing read them."""
    from test_flows import refusing_caps
    tracer = FakeTracer([_sample(0, []), _sample(1, [])])
    tracer.capabilities = refusing_caps("ft_flush_socks", "ft_sample")
    c = SteerCollector(tracer, read_topology(VM))
    m = _scrape(c)
    assert _get(m, "steer_timing_mode_info", mode="exact") == 1
    why = tracer.capabilities.figures["kthread_time"].why
    assert _get(m, "steer_figure_info", figure="kernel_time", state="works", why="") == 1
    refused = {dict(l)["program"]: dict(l) for (n, l), _ in m.items()
               if n == "steer_program_refused"}
    assert set(refused) == {"ft_flush_socks", "ft_sample"}
    assert refused["ft_sample"]["hook"] == "perf_event" and "EPERM" in refused["ft_sample"]["reason"]
    assert not why   # exact timing measures kthreads by its own programs
    figures = {dict(l)["figure"] for (n, l), _ in m.items() if n == "steer_figure_info"}
    assert figures == set(tracer.capabilities.figures)


def test_sampled_seconds_come_with_the_samples_they_rest_on():
    from dataclasses import replace
    flows = _flow(FAST, 1, 10**9, 0, 1)
    flows = [replace(e, kernel_samples=90 if e.cpu == 0 else 0, app_samples=20 if e.cpu == 1 else 0)
             for e in flows]
    tracer = FakeTracer([_sample(0, []), _sample(1, flows)])
    tracer.capabilities = replace(CAPS, mode="sampled")
    c = SteerCollector(tracer, read_topology(VM))
    list(c.collect())
    m = _scrape(c)
    tuple5 = dict(proto="tcp", src="198.18.0.1", sport=40000, dst="198.18.0.2", dport=5201)
    assert _get(m, "steer_flow_samples_total", side="kernel", **tuple5) == 90
    assert _get(m, "steer_flow_samples_total", side="app", **tuple5) == 20


def test_what_the_tracer_could_not_count_is_exported():
    """A full napi_polls or profile map, a cpumap's dropped frames and the receive calls the
    kprobe fallback lost are counts, not silence."""
    cpus = (CpuSample(0, napi_map_full=3, profile_map_full=5, cpumap_enqueue_drops=7),
            CpuSample(1, cpumap_kthread_drops=2, napi_map_full=1, recv_calls_lost=6))
    tracer = FakeTracer([_sample(0, []), TraceSample(S, {}, cpus, 0, 1024)])
    c = SteerCollector(tracer, read_topology(VM))
    list(c.collect())
    m = _scrape(c)
    assert _get(m, "steer_tracer_map_full_total", map="napi_polls") == 4
    assert _get(m, "steer_tracer_map_full_total", map="profile") == 5
    assert _get(m, "steer_tracer_map_full_total", map="recv_calls") == 6
    assert _get(m, "steer_cpu_cpumap_drops_total", cpu=0, where="enqueue") == 7
    assert _get(m, "steer_cpu_cpumap_drops_total", cpu=1, where="kthread") == 2


def test_the_samplers_clock_expiries_are_exported_by_outcome():
    """Sampled timing: each CPU's expiries that ran the sampler's program, those the kernel
    ran none for (samples_withheld, of samples) and, of those, the ones it could not charge
    (samples_withheld_unknown, not in samples)."""
    cpus = (CpuSample(0, samples=100), CpuSample(1, samples=90, samples_withheld=60,
                                                   samples_withheld_unknown=5))
    tracer = fakes.FakeTracer([_sample(0, []), TraceSample(S, {}, cpus, 0, 1024)],
                              dataclasses.replace(CAPS, mode="sampled"))
    c = SteerCollector(tracer, read_topology(VM))
    list(c.collect())
    m = _scrape(c)
    assert _get(m, "steer_tracer_clock_expiries_total", cpu=0, outcome="ran") == 100
    assert _get(m, "steer_tracer_clock_expiries_total", cpu=0, outcome="withheld") == 0
    assert _get(m, "steer_tracer_clock_expiries_total", cpu=1, outcome="ran") == 35
    assert _get(m, "steer_tracer_clock_expiries_total", cpu=1, outcome="withheld") == 60
    assert _get(m, "steer_tracer_clock_expiries_total", cpu=1, outcome="not_charged") == 5
    exact = SteerCollector(FakeTracer([_sample(0, []), TraceSample(S, {}, cpus, 0, 1024)]),
                           read_topology(VM))
    list(exact.collect())
    assert not [k for k in _scrape(exact) if k[0] == "steer_tracer_clock_expiries_total"]


def test_softirqs_a_receive_kthread_ran_are_exported_apart_from_receive_time():
    """The timers a NAPI kthread runs at its local_bh_enable are the kthread's time by the
    scheduler, and no flow's: a counter of their own, not in steer_cpu_kernel_seconds. The
    NET_RX softirqs it runs there are NET_RX time (in steer_cpu_kernel_seconds) and the
    kthread's: a counter of that part, which the kernel time already holds."""
    cpus = (CpuSample(0, net_rx_ns=3 * 10**9, napi_thread_ns=2 * 10**9,
                      kthread_softirq_ns=10**9, softirq_ns=4 * 10**9,
                      kthread_net_rx_ns=5 * 10**8, kthread_ns=2 * 10**9,
                      kthread_unattributed_ns=25 * 10**7),)
    tracer = FakeTracer([_sample(0, []), TraceSample(S, {}, cpus, 0, 1024)])
    c = SteerCollector(tracer, read_topology(VM))
    list(c.collect())
    m = _scrape(c)
    assert _get(m, "steer_cpu_kthread_softirq_seconds_total", cpu=0) == 1
    assert _get(m, "steer_cpu_kthread_net_rx_seconds_total", cpu=0) == 0.5
    # of the cpumap kthread's 2 s, what no flow was charged with
    assert _get(m, "steer_cpu_kernel_seconds_total", cpu=0, context="kthread") == 2
    assert _get(m, "steer_cpu_kthread_unattributed_seconds_total", cpu=0) == 0.25
    assert _get(m, "steer_cpu_kernel_seconds_total", cpu=0, context="napi_thread") == 2
    assert _get(m, "steer_cpu_kernel_seconds_total", cpu=0, context="softirq") == 1


def test_unreadable_pinned_rules_are_a_gauge_with_why_not_a_failed_scrape():
    def steering():
        raise PermissionError(13, "Permission denied", "/sys/fs/bpf/steer")
    tracer = FakeTracer([_sample(0, []), _sample(1, [])])
    c = SteerCollector(tracer, read_topology(VM), steering=steering)
    list(c.collect())
    m = _scrape(c)
    (why,) = [dict(k[1])["why"] for k in m if k[0] == "steer_steering_readable"]
    assert "Permission denied" in why and _get(m, "steer_steering_readable", why=why) == 0


def test_a_hostile_readers_name_is_a_label_value_and_nothing_more():
    """A comm of '[/x]', quotes, a backslash or an ESC sequence: escaped by the text format and
    read back unchanged by Prometheus' own parser (client_python's)."""
    names = ['[/x]', 'a"b\\c', '\x1b[2Jx', 'new\nline'[:15]]
    flows = [FlowId("tcp", "198.18.0.1", 40000 + i, "198.18.0.2", 5201) for i in range(len(names))]
    entries = [FlowCpuSample(f, 1, rx_bytes=10**6, rx_skbs=10, kernel_ns=S // 100, app_bytes=10**6,
                             app_calls=1, app_ns=S // 100, app_pid=7, app_comm=n)
               for f, n in zip(flows, names)]
    tracer = FakeTracer([_sample(0, []), _sample(1, entries), _sample(2, entries)])
    c = SteerCollector(tracer, read_topology(VM), top_k=10)
    list(c.collect())
    m = _scrape(c)
    comms = {dict(k[1])["app_comm"] for k in m if k[0] == "steer_flow_info"}
    assert comms == set(names)


def test_the_exporters_per_flow_memory_is_bounded_and_what_it_forgets_is_counted(monkeypatch):
    """steer_class_flows' window and the retired services of --flow-labels service hold at
    most their bound of entries under churn (a port scan, a frontend's short connections)."""
    import steer.present.exporter as exporter
    import steer.model.totals as totals
    monkeypatch.setattr(exporter, "MAX_ACTIVE", 50)
    monkeypatch.setattr(totals, "MAX_RETIRED_SERVICES", 20)
    conns = [[FlowCpuSample(FlowId("tcp", "198.18.0.1", 40000 + t, "198.18.0.2", 1000 + t * 10 + i),
                            0, rx_bytes=100, rx_skbs=1, kernel_ns=1000) for i in range(10)]
             for t in range(12)]
    tracer = FakeTracer([_sample(0, [])] + [_sample(t + 1, c) for t, c in enumerate(conns)])
    c = SteerCollector(tracer, read_topology(VM), flow_labels="service")
    for _ in conns:
        list(c.collect())
    assert len(c._active_flows) <= 50 and len(c._service_totals._retired) <= 20
    m = _scrape(c)
    assert _get(m, "steer_exporter_evictions_total", structure="active_flows") == 120 - 50
    assert _get(m, "steer_exporter_evictions_total", structure="services") > 0
    # steer_class_flows, counted as flows come and go, is what the window holds
    from steer.model.classify import CLASSES
    assert sum(_get(m, "steer_class_flows", **{"class": k}) or 0 for k in CLASSES) == 50


def test_per_cpu_series_fold_by_llc_or_socket_and_keep_their_sums(tmp_path):
    """--cpu-labels llc|socket: on a 2 x 64-core host with SMT (256 CPUs, 16 LLCs), each per-CPU
    family has a series per LLC or per socket, whose values are the sums of their CPUs'."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../support"))
    from sysfs import epyc_2s
    from steer.model.samples import NapiCounts, NapiId
    topo = read_topology(epyc_2s(str(tmp_path), cores=64))
    cpus = tuple(CpuSample(c, net_rx_ns=(c + 1) * S, napi_thread_ns=c, kthread_ns=7, app_ns=3,
                           net_rx_events=c, rx_drops=1, hardirq_ns=5, hardirqs=2,
                           cpumap_enqueue_drops=1, cpumap_kthread_drops=c % 2)
                 for c in range(256))
    napi = {NapiId(1, 2, 9): {c: NapiCounts(10, 20, 1) for c in range(256)},
            NapiId(0, 0, 0): {c: NapiCounts(1, 2, 0) for c in range(256)}}
    per_cpu = lambda m: {k: v for k, v in m.items() if k[0].startswith("steer_cpu_")}  # noqa: E731
    got = {}
    for labels in ("cpu", "llc", "socket"):
        samples = [TraceSample(0, {}, cpus, 0, 1024, napi=napi)] * 2
        c = SteerCollector(FakeTracer(samples), topo, cpu_labels=labels)
        got[labels] = per_cpu(_scrape(c))
    # 20 per-CPU series a CPU (3 contexts of kernel time, 9 more counters, NAPI's 3 by 2
    # sources, cpumap drops at 2 places): 5,120 on this host, 320 by LLC, 40 by socket
    assert [len(got[k]) for k in ("cpu", "llc", "socket")] == [5120, 320, 40]
    assert {dict(k[1])["cpu"] for k in got["socket"]} == {"socket0", "socket1"}
    assert {dict(k[1])["cpu"] for k in got["llc"]} == {f"llc{i}" for i in range(16)}
    for name in ("steer_cpu_kernel_seconds_total", "steer_cpu_napi_polls_total",
                 "steer_cpu_cpumap_drops_total", "steer_cpu_net_rx_softirqs_total"):
        sums = [sum(v for k, v in got[m].items() if k[0] == name) for m in ("cpu", "llc", "socket")]
        assert sums[0] > 0 and all(abs(x - sums[0]) < 1e-6 * sums[0] for x in sums), (name, sums)
    # a socket's series is its CPUs' sum: socket 0 holds CPUs 0-63 and 128-191
    want = sum((c + 1) - c / S for c in (*range(64), *range(128, 192)))
    key = ("steer_cpu_kernel_seconds_total", frozenset({"cpu": "socket0", "context": "softirq"}.items()))
    assert abs(got["socket"][key] - want) < 1e-6


def test_workload_labels_sum_a_pods_flows_and_keep_them_under_it():
    """--flow-labels workload: the flows of one pod in one series, labelled as the kubelet names
    the pod; a flow counts (whole) from the read in which its reader's cgroup is known, and one
    whose reader was never seen is in no series."""
    from steer.model.workloads import Workload
    topo = read_topology(VM)
    a = FlowId("tcp", "198.18.0.1", 40000, "198.18.0.2", 8080)
    b = FlowId("tcp", "198.18.0.9", 50000, "198.18.0.2", 8080)
    acks = FlowId("tcp", "198.18.0.2", 8080, "198.18.0.1", 40000)
    unit = FlowId("tcp", "198.18.0.1", 40002, "198.18.0.2", 22)
    pod = Workload(container_id="a" * 64, pod_uid="7d1c2a3b-4e5f-4a6b-8c7d-9e0f1a2b3c4d")
    names = {11: ("/kubepods/pod7d1c2a3b-4e5f-4a6b-8c7d-9e0f1a2b3c4d/" + "a" * 64,
                  pod.with_pod("web", "nginx-7d9f", "nginx")),
             12: ("/system.slice/sshd.service", Workload(unit="sshd.service"))}
    reader = dict(app_pid=7, app_comm="nginx", app_cgroup=11, app_calls=1, app_ns=1000)
    reads = [_sample(0, []),
             _sample(1, [FlowCpuSample(a, 1, rx_bytes=100, kernel_ns=10, app_bytes=100, **reader),
                         FlowCpuSample(b, 1, rx_bytes=30, kernel_ns=3),   # reader not seen yet
                         FlowCpuSample(acks, 0, rx_packets=5, kernel_ns=1),
                         FlowCpuSample(unit, 1, rx_bytes=5, app_bytes=5, app_pid=9,
                                       app_comm="sshd", app_cgroup=12)]),
             _sample(2, [FlowCpuSample(a, 1, rx_bytes=150, kernel_ns=15, app_bytes=150, **reader),
                         FlowCpuSample(b, 1, rx_bytes=40, kernel_ns=4, app_bytes=40, **reader),
                         FlowCpuSample(acks, 0, rx_packets=7, kernel_ns=2)]),
             _sample(3, [FlowCpuSample(b, 1, rx_bytes=45, kernel_ns=5, app_bytes=45, **reader)])]
    c = SteerCollector(FakeTracer(reads), topo, flow_labels="workload",
                       workloads=lambda i: names.get(i, (None, None)))
    list(c.collect())
    pod_labels = dict(workload="web/nginx-7d9f:nginx", namespace="web", pod="nginx-7d9f",
                      container="nginx")
    first, second, third = _scrape(c), _scrape(c), _scrape(c)
    assert _get(first, "steer_flow_receive_bytes_total", **pod_labels) == 100   # b not yet
    assert _get(first, "steer_flow_receive_bytes_total", workload="sshd.service", namespace="",
                pod="", container="") == 5
    assert _get(second, "steer_flow_receive_bytes_total", **pod_labels) == 190   # b whole
    assert _get(third, "steer_flow_receive_bytes_total", **pod_labels) == 195    # a's 150 stay
    series = {dict(k[1])["workload"] for k in second if k[0] == "steer_flow_receive_bytes_total"}
    assert series == {"web/nginx-7d9f:nginx", "sshd.service"}   # the ACKs are no workload's
    assert _get(second, "steer_flow_info", **pod_labels, kernel_cpu=1, stack_cpu=1, app_cpu=1,
                shared_llc="true", smt_sibling="false", app_comm="nginx",
                **{"class": "same-core"}) == 2


def test_with_latency_each_workload_has_its_wait_histogram():
    """--latency --flow-labels workload: each top-K workload's histogram holds its flows'
    sampled delays, a flow's from the read in which its reader's cgroup is known (as its bytes),
    and only goes up; the class histogram beside it holds the same delays by class."""
    from steer.model.flowarrays import FLOW_SIZE, pack_key
    from steer.model.latency import BUCKETS, Totals, bucket_of
    from steer.model.workloads import Workload

    class LatencyTracer(fakes.FakeTracer):
        latency = True

        def __init__(self, samples, waits):
            super().__init__(samples, CAPS)
            self._waits = iter(waits)

        def latency_totals(self, raw=False):
            return next(self._waits)

    def waits(**delays):   # flow name -> [(delay ns, count)]
        out = {}
        for name, pairs in delays.items():
            hist = [0] * BUCKETS
            for ns, n in pairs:
                hist[bucket_of(ns)] += n
            n = sum(c for _, c in pairs)
            out[pack_key(flows[name], 0)[:FLOW_SIZE]] = Totals(hist, n, 0, sum(ns * c for ns, c in pairs))
        return out
    topo = read_topology(VM)
    flows = {"a": FlowId("tcp", "198.18.0.1", 40000, "198.18.0.2", 8080),
             "b": FlowId("tcp", "198.18.0.9", 50000, "198.18.0.2", 8080),
             "unit": FlowId("tcp", "198.18.0.1", 40002, "198.18.0.2", 22)}
    names = {11: ("/kubepods/podx/c", Workload(unit="nginx.service")),
             12: ("/system.slice/sshd.service", Workload(unit="sshd.service"))}
    reader = dict(app_pid=7, app_comm="nginx", app_cgroup=11, app_calls=1, app_ns=1000)
    a, b, unit = flows["a"], flows["b"], flows["unit"]
    reads = [_sample(0, []),
             _sample(1, [FlowCpuSample(a, 1, rx_bytes=100, kernel_ns=10, app_bytes=100, **reader),
                         FlowCpuSample(b, 1, rx_bytes=30, kernel_ns=3),   # reader not seen yet
                         FlowCpuSample(unit, 1, rx_bytes=5, app_bytes=5, app_pid=9,
                                       app_comm="sshd", app_cgroup=12)]),
             _sample(2, [FlowCpuSample(a, 1, rx_bytes=150, kernel_ns=15, app_bytes=150, **reader),
                         FlowCpuSample(b, 1, rx_bytes=40, kernel_ns=4, app_bytes=40, **reader)])]
    us40, ms2 = 40_000, 2_000_000
    lat = [{}, waits(a=[(us40, 3)], b=[(us40, 1)], unit=[(ms2, 1)]),
           waits(a=[(us40, 3), (ms2, 2)], b=[(us40, 4)])]
    c = SteerCollector(LatencyTracer(reads, lat), topo, flow_labels="workload",
                       workloads=lambda i: names.get(i, (None, None)))
    list(c.collect())
    first, second = _scrape(c), _scrape(c)
    pod = dict(workload="nginx.service", namespace="", pod="", container="")
    sshd = dict(workload="sshd.service", namespace="", pod="", container="")
    name = "steer_workload_receive_wait_seconds"
    assert _get(first, f"{name}_count", **pod) == 3                        # b not yet
    assert _get(first, f"{name}_bucket", le="5e-05", **pod) == 3
    assert _get(first, f"{name}_count", **sshd) == 1
    assert _get(first, f"{name}_sum", **sshd) == pytest.approx(2e-3)
    assert _get(second, f"{name}_count", **pod) == 9                       # a's 5, b's 4 whole
    assert _get(second, f"{name}_bucket", le="0.0025", **pod) == 9
    assert _get(second, f"{name}_bucket", le="5e-05", **pod) == 7
    assert _get(second, f"{name}_count", **sshd) == 1                      # nothing taken back
    by_class = sum(v for (n, labels), v in second.items()
                   if n == "steer_class_receive_wait_seconds_count")
    assert by_class == 5 + 4 + 1
    plain = SteerCollector(LatencyTracer(reads, lat), topo, flow_labels="service")
    list(plain.collect())
    assert not [k for k in _scrape(plain) if k[0].startswith(name)]


def test_importing_the_exporter_starts_no_thread():
    """numpy's OpenBLAS would start a thread per CPU at import, before `steer export` gives up its
    privileges, and that thread would keep them: the exporter's imports leave one thread, even
    with a BLAS thread count in the environment."""
    import subprocess
    import sys
    code = ("import os, steer.cli.main, steer.present.exporter, steer.trace.tracer\n"
            "print(len(os.listdir('/proc/self/task')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, OPENBLAS_NUM_THREADS="8", OMP_NUM_THREADS="8"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"
