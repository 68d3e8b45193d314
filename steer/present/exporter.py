"""Prometheus exporter: a Collector that reads the BPF maps at every scrape.

Per-class counters must only go up, yet a flow's class can change between scrapes. So every
scrape takes what each flow did since the previous scrape, classifies that interval (by the
flow's recent past, PlacementMemory, so that sampling noise in one short interval does not move
it), and adds it to the running totals of its class. Per-flow series exist only for the top-K
flows by rate of the last interval: cardinality stays bounded, and a flow that went away loses
its series.
"""
from __future__ import annotations

import errno
import heapq
import os
import platform
import socket
import threading
import time
from collections import OrderedDict, defaultdict
from typing import TYPE_CHECKING, Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from steer import __version__
from steer.model.classify import CLASSES
from steer.model.flows import (SIDE_EVENTS, SIDES, FlowTotals, PlacementMemory, ServiceTotals, Snapshot,
                               WorkloadTotals, build_snapshot, by_side, side_events, workload_key)
from steer.trace.programs import SECTIONS
from steer.model.topology import Topology, read_int
from steer.model.samples import TraceSample, TraceSource
from steer.present.webserver import DEFAULT_TIMEOUT, DEFAULT_WORKERS, ExporterServer, WebConfig

if TYPE_CHECKING:
    from steer.steering.xdp import DeviceState

# 9723: marked FREE in the Prometheus wiki's "Default port allocations" (a stored copy of the page
# read 2026-11-23); 9435, steer's default before, is Cloudflare's ebpf_exporter's, the exporter
# most likely to run beside steer on an eBPF host
DEFAULT_LISTEN = "127.0.0.1:9723"
DEFAULT_TOP_K = 20
# the labels of per-flow series: the whole 5-tuple, or the receiving service alone (no peer
# address or port), whose series do not come and go with every connection
FLOW_LABEL_SETS = {"five-tuple": ["proto", "src", "sport", "dst", "dport"],
                   "service": ["proto", "dst", "dport"],
                   "workload": ["workload", "namespace", "pod", "container"]}
DEFAULT_FLOW_LABELS = "five-tuple"
# what the cpu label of the per-CPU series names: each CPU, or the CPUs of a last-level cache or
# of a socket summed (a 2 x 64-core host with SMT has 256 CPUs: see docs/guide/exporter.md)
CPU_LABELS = ("cpu", "llc", "socket")
DEFAULT_CPU_LABELS = "cpu"
ACTIVE_WINDOW = 10.0   # seconds: steer_class_flows counts the flows with traffic in this window
MAX_ACTIVE = 65536     # and at most this many (13,900 new connections a second fill 10 s twice)


_CLASS_INDEX = {cls: i for i, cls in enumerate(CLASSES)}   # in two bits: four classes
assert len(CLASSES) <= 4


def bpf_stats_enabled(path: str = "/proc/sys/kernel/bpf_stats_enabled") -> bool:
    return read_int(path) == 1


class SteerCollector(Collector):
    """Yields fresh metric families on every collect(). Every counter is the same whoever scrapes
    and how often: per-class totals fold each interval between two reads into running sums,
    per-flow totals come from the tracer's cumulative entries (FlowTotals). Only the choice of
    the top-K series and steer_class_flows look at the recent past."""

    def __init__(self, tracer: TraceSource, topo: Topology, top_k: int = DEFAULT_TOP_K,
                 steering: Callable[[], list[DeviceState]] | None = None,
                 actions: Callable[[], dict[str, int]] | None = None,
                 flow_labels: str = DEFAULT_FLOW_LABELS, cpu_labels: str = DEFAULT_CPU_LABELS,
                 workloads: Callable | None = None):
        if flow_labels not in FLOW_LABEL_SETS:
            raise ValueError(f"flow labels {flow_labels!r}: one of {', '.join(FLOW_LABEL_SETS)}")
        if cpu_labels not in CPU_LABELS:
            raise ValueError(f"cpu labels {cpu_labels!r}: one of {', '.join(CPU_LABELS)}")
        self.cpu_labels = cpu_labels
        self.tracer, self.topo, self.top_k = tracer, topo, top_k
        self.steering, self.actions, self.flow_labels = steering, actions, flow_labels
        self._lock = threading.Lock()
        self._last: TraceSample | None = None
        self._placement = PlacementMemory(topo)
        self._class_totals: dict[str, dict[str, float]] = {
            c: defaultdict(float) for c in CLASSES}
        self._flow_totals = FlowTotals()
        self._service_totals = ServiceTotals()
        # --flow-labels workload: cgroup id -> (path, Workload) (steer.trace.workloads)
        self._workloads = workloads
        if flow_labels == "workload" and workloads is None:
            from steer.trace.workloads import WorkloadResolver
            self._workloads = WorkloadResolver()
        self._workload_totals = WorkloadTotals()
        self._active: OrderedDict[int, int] = OrderedDict()   # steer_class_flows' window
        self._active_classes = [0] * len(CLASSES)   # of _active, by class
        # per structure bounded by size, what it had to forget early
        self.evicted: dict[str, int] = defaultdict(int)

    def _advance(self) -> tuple[TraceSample, Snapshot, dict]:
        """Read the maps once; fold the interval since the last read into the class totals; the
        per-series totals as of this read. Called under self._lock."""
        now = self.tracer.sample()
        snap = self._placement.update(
            build_snapshot(self._last, now, self.topo, self.tracer.capabilities))
        for f in snap.flows:
            t = self._class_totals[f.placement.cls]
            t["rx_bytes"] += f.rx_bytes
            t["kernel_seconds"] += f.kernel_seconds
            t["app_seconds"] += f.app_seconds
            t["llc_kernel"] += f.llc_misses_kernel or 0
            t["llc_app"] += f.llc_misses_app or 0
            for key in _SIDE_EVENTS:
                t[key] += getattr(f, key) or 0
        self._last = now
        t = now.monotonic_ns / 1e9
        # flow's hash -> when it last had traffic (ms) and its class then, both in one int: a
        # port scan fills this window with tens of thousands of flows, and a FlowId and a tuple
        # each would keep ~250 bytes a flow where this keeps ~100 (a collision of two hashes
        # in 2^64 counts two flows as one)
        active, count = self._active, self._active_classes   # in order of last traffic
        ms = int(t * 1000)
        for f in snap.flows:
            key, cls = hash(f.flow), _CLASS_INDEX[f.placement.cls]
            was = active.get(key)
            if was is not None:
                count[was & 3] -= 1
            active[key] = ms << 2 | cls
            active.move_to_end(key)
            count[cls] += 1
        # from the oldest end, in O(1) a flow (a plain dict's first key, after many deletions at
        # its front, is found by a scan past them: a scrape under churn spent most of its time so)
        window = int(ACTIVE_WINDOW * 1000)
        while active and (ms - (next(iter(active.values())) >> 2) > window
                          or len(active) > MAX_ACTIVE):
            was = active.popitem(last=False)[1]
            count[was & 3] -= 1
            if ms - (was >> 2) <= window:
                self.evicted["active_flows"] += 1
        totals = self._flow_totals.update(now)
        if self.flow_labels == "service":
            totals = self._service_totals.update(totals, t)
        elif self.flow_labels == "workload":
            wt = self._workload_totals
            for f in snap.flows:
                if f.app_cgroup_id and not wt.knows(f.flow):
                    wt.learn(f.flow, workload_key(*self._workloads(f.app_cgroup_id)))
            totals = wt.update(totals, t)
        return now, snap, totals

    def _series_key(self, flow) -> tuple | None:
        """FLOW's series: None for a flow in none (--flow-labels workload: its reader not seen)."""
        if self.flow_labels == "five-tuple":
            return flow.proto, flow.src, flow.sport, flow.dst, flow.dport
        if self.flow_labels == "service":
            return self._service_totals.key(flow)
        return self._workload_totals.key(flow)

    def collect(self) -> Iterable:
        # one scrape at a time from the read to the last family: the totals and the flows the
        # families are made of belong to this read until the next one
        with self._lock:
            families = list(self._families())
        yield from families

    def _families(self) -> Iterable:
        start = time.monotonic()
        sample, snap, totals = self._advance()
        took = time.monotonic() - start
        caps = self.tracer.capabilities
        yield from self._class_metrics(snap, caps.llc_available, caps.counters_per_flow_available)
        yield from self._cpu_metrics(sample, caps)
        yield from self._flow_metrics(snap, totals)
        yield from self._health_metrics(sample, caps)
        g = GaugeMetricFamily("steer_scrape_duration_seconds",
                              "Time this scrape took to read the BPF maps and build its snapshot.")
        g.add_metric([], took)
        yield g
        info = GaugeMetricFamily("steer_build_info", "steer's version, Python and kernel (value 1).",
                                 labels=["version", "python", "kernel"])
        info.add_metric([__version__, platform.python_version(), os.uname().release], 1)
        yield info
        if self.steering:
            readable = GaugeMetricFamily(
                "steer_steering_readable", "1 when the exporter can read the pinned steering "
                "rules (steer pin); 0, with why, when it cannot, such as when it runs as a user "
                "other than root (they are root's).", labels=["why"])
            try:
                devices, why = self.steering(), ""
            except Exception as e:  # noqa: BLE001 - unreadable rules must not fail the scrape
                devices, why = [], str(e)
            readable.add_metric([why], 0 if why else 1)
            yield readable
            yield from self._steering_metrics(devices)
        if self.actions:
            moves = CounterMetricFamily("steer_auto_moves", "Flows moved by steer auto.",
                                        labels=["policy"])
            for policy, n in self.actions().items():
                moves.add_metric([policy], n)
            yield moves

    def _class_metrics(self, snap: Snapshot, llc: bool, events: bool):
        spec = [("rx_bytes", "steer_class_rx_bytes", "Transport payload received, by affinity class."),
                ("kernel_seconds", "steer_class_kernel_seconds",
                 "Kernel receive processing time (NET_RX softirq and cpumap kthread), by class."),
                ("app_seconds", "steer_class_app_seconds",
                 "Application receive syscall time (nested softirq excluded), by class.")]
        for key, name, doc in spec:
            m = CounterMetricFamily(name, doc, labels=["class"])
            for cls in CLASSES:
                m.add_metric([cls], self._class_totals[cls][key])
            yield m
        if llc:
            m = CounterMetricFamily("steer_class_llc_misses", "LLC misses by class and side.",
                                    labels=["class", "side"])
            for cls in CLASSES:
                m.add_metric([cls, "kernel"], self._class_totals[cls]["llc_kernel"])
                m.add_metric([cls, "app"], self._class_totals[cls]["llc_app"])
            yield m
        if events:
            for event, doc in _EVENT_DOCS.items():
                m = CounterMetricFamily(f"steer_class_{event}", f"{doc} by class and side.",
                                        labels=["class", "side"])
                for cls in CLASSES:
                    for side in SIDES:
                        m.add_metric([cls, side], self._class_totals[cls][f"{event}_{side}"])
                yield m
        flows = GaugeMetricFamily("steer_class_flows",
                                  f"Flows with traffic in the last {ACTIVE_WINDOW:g} s, by class.",
                                  labels=["class"])
        for i, cls in enumerate(CLASSES):
            flows.add_metric([cls], self._active_classes[i])
        yield flows

    def _cpu_label(self, cpu: int) -> str | None:
        """The cpu label of CPU's series: the CPU, or with --cpu-labels llc|socket the domain
        it is folded into ("llc3", "socket0"); None for a CPU the topology does not know."""
        c = self.topo.cpus.get(cpu)
        if c is None:
            return None
        if self.cpu_labels == "cpu":
            return str(cpu)
        domain = c.llc if self.cpu_labels == "llc" else c.socket
        return f"{self.cpu_labels}{'' if domain is None else domain}"

    def _cpu_metrics(self, s: TraceSample, caps):
        """Per-CPU counters, or per LLC or socket (--cpu-labels): the CPUs of a domain summed."""
        # family name -> labels -> value, summed over the CPUs that share a label
        values: dict[str, dict[tuple, float]] = defaultdict(lambda: defaultdict(float))

        def add(name: str, cpu: int, value: float, *more: str) -> None:
            key = self._cpu_label(cpu)
            if key is not None:
                values[name][(key, *more)] += value

        for key, cpus in s.napi.items():
            for cpu, n in cpus.items():
                for name, v in zip(("polls", "packets", "full_polls"), n):
                    add(f"napi_{name}", cpu, v, "device" if key.ifindex else "backlog")
        for c in s.cpus:
            add("kernel", c.cpu, (c.net_rx_ns - c.napi_thread_ns) / 1e9, "softirq")
            add("kernel", c.cpu, c.napi_thread_ns / 1e9, "napi_thread")
            add("kernel", c.cpu, c.kthread_ns / 1e9, "kthread")
            add("hardirq", c.cpu, c.hardirq_ns / 1e9)
            add("hardirqs", c.cpu, c.hardirqs)
            add("unattr", c.cpu, c.net_rx_unattributed_ns / 1e9)
            add("app", c.cpu, c.app_ns / 1e9)
            add("events", c.cpu, c.net_rx_events)
            add("drops", c.cpu, c.rx_drops)
            add("cpumap_drops", c.cpu, c.cpumap_enqueue_drops, "enqueue")
            add("cpumap_drops", c.cpu, c.cpumap_kthread_drops, "kthread")
        for cpu, counts in s.cpu_events.items():
            for event, n in counts.items():
                add("whole", cpu, n, event)
        if caps.llc_available or caps.counters_per_flow_available:
            for c in s.cpus:
                counts = by_side(side_events([c])) if caps.counters_per_flow_available else {}
                for side in SIDES:
                    if caps.llc_available:
                        add("recv", c.cpu, getattr(c, f"llc_{side}"), side, "llc_misses")
                    for event, n in counts.get(side, {}).items():
                        add("recv", c.cpu, n, side, event)
        families = [
            ("kernel", "steer_cpu_kernel_seconds", "Kernel receive processing time per CPU and "
             "context (softirq: NET_RX; napi_thread: threaded NAPI; kthread: cpumap).", ["context"]),
            ("unattr", "steer_cpu_net_rx_unattributed_seconds",
             "NET_RX time with no TCP/UDP skb to charge it to.", []),
            ("app", "steer_cpu_app_seconds", "Application receive syscall time per CPU.", []),
            ("events", "steer_cpu_net_rx_softirqs", "NET_RX softirqs run per CPU.", []),
            ("drops", "steer_cpu_receive_drops",
             "Received TCP/UDP packets the kernel dropped, per CPU.", []),
            ("hardirq", "steer_cpu_hardirq_seconds", "Device interrupt handler time per CPU: a "
             "NIC queue's interrupt lands on its arrival CPU.", []),
            ("hardirqs", "steer_cpu_hardirqs", "Device interrupt handler runs per CPU "
             "(/proc/interrupts counts these).", []),
            ("napi_polls", "steer_cpu_napi_polls", "NAPI polls per CPU (napi:napi_poll). source "
             "device: a driver's poll, where its packets arrive (the queue IRQ's CPU, its "
             "threaded NAPI kthread's, a busy-polling reader's); backlog: RPS, netif_rx, "
             "loopback.", ["source"]),
            ("napi_packets", "steer_cpu_napi_packets", "Packets taken in by NAPI polls per CPU.",
             ["source"]),
            ("napi_full_polls", "steer_cpu_napi_full_polls", "NAPI polls that used their whole "
             "budget per CPU: more was waiting.", ["source"]),
            ("cpumap_drops", "steer_cpu_cpumap_drops", "Frames a steering cpumap dropped, per "
             "CPU: at enqueue (the queue to the target CPU full; on the redirecting CPU) or in "
             "the target's kthread.", ["where"]),
            ("whole", "steer_cpu_events", "PMU events of everything a CPU ran (every task, user "
             "and kernel), as PCM counts a core; software stand-ins with --counters software.",
             ["event"]),
            ("recv", "steer_cpu_receive_events", "PMU events charged to receive work per CPU and "
             "side (kernel: NET_RX and cpumap kthreads; app: receive syscalls).",
             ["side", "event"])]
        for key, name, doc, more in families:
            if key in ("whole", "recv") and not values.get(key):
                continue   # no PMU events counted: no family
            m = CounterMetricFamily(name, doc, labels=["cpu", *more])
            for labels, v in sorted(values[key].items(), key=_cpu_order):
                m.add_metric(list(labels), v)
            yield m

    def _flow_metrics(self, snap: Snapshot, totals: dict):
        """The top-K series by the rate of the last interval, then by bytes (a flow idle for an
        interval keeps its series while the tracer keeps it): cumulative counters (rate() gives
        their rates), and the placement of their flows."""
        labels = FLOW_LABEL_SETS[self.flow_labels]
        rate: dict[tuple, float] = defaultdict(float)
        for f in snap.flows:
            k = self._series_key(f.flow)
            if k is not None:
                rate[k] += f.rate_bps
        top = heapq.nlargest(self.top_k, totals,
                             key=lambda k: (rate.get(k, 0.0), totals[k].rx_bytes))
        rx = CounterMetricFamily("steer_flow_receive_bytes",
                                 "Transport payload received by a top-K flow (or service).",
                                 labels=labels)
        kernel = CounterMetricFamily("steer_flow_kernel_seconds",
                                     "Kernel receive processing time of a top-K flow (or service).",
                                     labels=labels)
        app = CounterMetricFamily("steer_flow_app_seconds",
                                  "Application receive time of a top-K flow (or service).",
                                  labels=labels)
        drops = CounterMetricFamily("steer_flow_receive_drops",
                                    "Received packets of a top-K flow (or service) the kernel dropped.",
                                    labels=labels)
        # sampled timing: the samples each seconds counter rests on; over a rate() window the
        # time's standard error is about seconds / sqrt(samples)
        samples = CounterMetricFamily("steer_flow_samples",
                                      "Samples the kernel and app seconds of a top-K flow (or "
                                      "service) rest on (sampled timing).", labels=labels + ["side"])
        sampled = self.tracer.capabilities.mode == "sampled"
        for k in top:
            t, values = totals[k], [str(v) for v in k]
            rx.add_metric(values, t.rx_bytes)
            kernel.add_metric(values, t.kernel_ns / 1e9)
            app.add_metric(values, t.app_ns / 1e9)
            drops.add_metric(values, t.rx_drops)
            if sampled:
                samples.add_metric(values + ["kernel"], t.kernel_samples)
                samples.add_metric(values + ["app"], t.app_samples)
        info = GaugeMetricFamily(
            "steer_flow_info", "Placement of the flows of a top-K series: 1 per flow (with "
            "service labels, how many of its flows have that placement).",
            labels=labels + ["kernel_cpu", "app_cpu", "class", "shared_llc", "smt_sibling",
                             "app_comm"])
        placed: dict[tuple, int] = defaultdict(int)
        wanted = set(top)
        for f in snap.flows:
            k = self._series_key(f.flow)
            if k in wanted:
                placed[tuple(str(v) for v in k) + (
                    _s(f.kernel_cpu), _s(f.app_cpu), f.placement.cls,
                    _s(f.placement.shared_llc).lower(), _s(f.placement.smt_sibling).lower(),
                    f.app_comm or "")] += 1
        for values, n in placed.items():
            info.add_metric(list(values), n)
        yield from (rx, kernel, app, drops, samples, info)

    def _health_metrics(self, s: TraceSample, caps):
        g = GaugeMetricFamily("steer_tracer_flow_entries", "Live (flow, CPU) entries in the flow map.")
        g.add_metric([], s.live_entries)
        yield g
        g = GaugeMetricFamily("steer_tracer_flow_entries_max", "Bound of the flow map (--max-flows).")
        g.add_metric([], s.max_entries)
        yield g
        c = CounterMetricFamily("steer_tracer_evictions", "Flow map entries the LRU evicted.")
        c.add_metric([], s.evictions)
        yield c
        c = CounterMetricFamily("steer_tracer_map_update_failures",
                                "Flow map updates that failed; their time went to unattributed.")
        c.add_metric([], sum(x.flow_failures for x in s.cpus))
        yield c
        c = CounterMetricFamily("steer_exporter_evictions",
                                "Entries the exporter's own bounded structures forgot before "
                                "their time: active_flows (steer_class_flows' window), services "
                                "(--flow-labels service: totals of services with no flow left), "
                                "workloads (--flow-labels workload: the same of workloads).",
                                labels=["structure"])
        c.add_metric(["active_flows"], self.evicted["active_flows"])
        c.add_metric(["services"], self._service_totals.evicted)
        c.add_metric(["workloads"], self._workload_totals.evicted)
        yield c
        c = CounterMetricFamily("steer_tracer_map_full",
                                "What a full map of the tracer could not count: NAPI polls of "
                                "instances beyond napi_polls' entries, profile samples beyond "
                                "profile's.", labels=["map"])
        c.add_metric(["napi_polls"], sum(x.napi_map_full for x in s.cpus))
        c.add_metric(["profile"], sum(x.profile_map_full for x in s.cpus))
        yield c
        cap = GaugeMetricFamily("steer_capability_info",
                                "Tracing mechanisms: state is available or unavailable (value 1).",
                                labels=["mechanism", "state", "detail"])
        for name, text in caps.as_dict().items():
            if isinstance(text, str) and name != "mode":
                cap.add_metric([name, *_capability_state(text)], 1)
        yield cap
        mode = GaugeMetricFamily("steer_timing_mode_info",
                                 "The timing mode the tracer runs in on this kernel (value 1).",
                                 labels=["mode"])
        mode.add_metric([caps.mode], 1)
        yield mode
        fig = GaugeMetricFamily("steer_figure_info",
                                "Each figure steer shows: state is works, degraded or missing on "
                                "this kernel, why names the refused programs behind it (value 1).",
                                labels=["figure", "state", "why"])
        for name, f in caps.figures.items():
            fig.add_metric([name, f["state"], f["why"]], 1)
        yield fig
        refused = GaugeMetricFamily("steer_program_refused",
                                    "A tracer program this kernel refused or lacks (value 1); the "
                                    "figures that depend on it are in steer_figure_info.",
                                    labels=["program", "hook", "reason"])
        for prog, why in caps.refused.items():
            refused.add_metric([prog, SECTIONS.get(prog, ""), why], 1)
        yield refused
        if bpf_stats_enabled():
            runtime = CounterMetricFamily("steer_bpf_program_run_seconds",
                                          "Time spent in each steer BPF program (bpf_stats_enabled).",
                                          labels=["program"])
            runs = CounterMetricFamily("steer_bpf_program_runs", "Runs of each steer BPF program.",
                                       labels=["program"])
            for prog, (ns, cnt) in self.tracer.program_stats().items():
                runtime.add_metric([prog], ns / 1e9)
                runs.add_metric([prog], cnt)
            yield from (runtime, runs)

    def _steering_metrics(self, devices: list[DeviceState]):
        pk = CounterMetricFamily("steer_rule_packets", "Packets a steering rule redirected.",
                                 labels=["dev", "netns", "rule", "cpu"])
        by = CounterMetricFamily("steer_rule_bytes", "Bytes a steering rule redirected.",
                                 labels=["dev", "netns", "rule", "cpu"])
        xdp = CounterMetricFamily("steer_xdp_packets", "Packets seen by the steering program.",
                                  labels=["dev", "netns", "result"])
        mode = GaugeMetricFamily("steer_xdp_info", "Steering program of a device (value 1).",
                                 labels=["dev", "netns", "mode"])
        gone = GaugeMetricFamily("steer_xdp_detached",
                                 "1 when the device of pinned rules was removed, so they steer "
                                 "nothing; 0 while attached.", labels=["dev", "netns"])
        for d in devices:
            if d.error:
                continue
            dev, ns = d.dev, d.netns or ""
            mode.add_metric([dev, ns, d.mode], 1)
            gone.add_metric([dev, ns], 1 if d.detached else 0)
            for r in d.rules:
                pk.add_metric([dev, ns, str(r.spec), str(r.cpu)], r.packets)
                by.add_metric([dev, ns, str(r.spec), str(r.cpu)], r.bytes)
            for result, n in d.counters.items():
                xdp.add_metric([dev, ns, result], n)
        yield from (pk, by, xdp, mode, gone)


# the other PMU events of a flow (flows.SIDE_EVENTS), their metrics' text, and FlowReport's
# fields of them by side
_EVENT_DOCS = {"llc_references": "LLC references", "instructions": "Instructions retired",
               "cycles": "Core cycles"}
_SIDE_EVENTS = [f"{e}_{side}" for e in SIDE_EVENTS for side in SIDES]


def _capability_state(text: str) -> tuple[str, str]:
    """'available (sampled: ...)' or 'unavailable: why (ENOENT)' -> (state, detail), the detail
    whole: only the separator after the state and one pair of parentheses around it all go."""
    state, _, detail = text.partition(" ")
    detail = detail.strip().removeprefix(":").strip()
    if detail.startswith("(") and detail.endswith(")"):
        detail = detail[1:-1]
    return ("available" if state == "available" else "unavailable"), detail


def _cpu_order(item) -> tuple:
    """Series of the per-CPU families in the order of their CPUs (or domains), then labels."""
    labels = item[0]
    digits = labels[0].lstrip("abcdefghijklmnopqrstuvwxyz")
    return (labels[0][:len(labels[0]) - len(digits)], int(digits) if digits.isdigit() else -1,
            labels[1:])


def _s(v) -> str:
    return "" if v is None else str(v)


def parse_listen(text: str) -> tuple[str, int]:
    """(host, port) of HOST:PORT or [IPV6]:PORT; ":PORT" gives host "" (every address)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen {text!r}: expected HOST:PORT, e.g. {DEFAULT_LISTEN}, or :PORT "
                         "for every address")
    return host.strip("[]"), int(port)


def bind(collector: SteerCollector, listen: str, web: WebConfig | None = None,
         workers: int = DEFAULT_WORKERS, timeout: float = DEFAULT_TIMEOUT) -> ExporterServer:
    """The HTTP server of COLLECTOR (in a private registry) with its socket bound on LISTEN and no
    thread started yet: the caller gives up its privileges, then calls start()."""
    from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    ProcessCollector(registry=registry)   # process_*: steer's own CPU, memory and fds
    host, port = parse_listen(listen)
    # every address, as ":PORT" means to Go exporters: IPv6 and (dual-stack) IPv4, or IPv4 alone
    # on a host without IPv6
    hosts = [host] if host else ["::", "0.0.0.0"]
    for i, h in enumerate(hosts):
        try:
            family, _, _, _, addr = socket.getaddrinfo(h, port, type=socket.SOCK_STREAM,
                                                       flags=socket.AI_PASSIVE)[0]
            return ExporterServer(lambda: generate_latest(registry), [addr[:2]], web, workers,
                                  timeout).bind()
        except socket.gaierror as e:
            raise ValueError(f"--listen {listen}: {e.strerror}") from None
        except OSError as e:
            if i + 1 == len(hosts) or e.errno != errno.EAFNOSUPPORT:
                raise ValueError(f"--listen {listen}: {e.strerror}") from None
    raise AssertionError("unreachable")
