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
import os
import platform
import socket
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from steer import __version__
from steer.defaults import (CPU_LABELS, DEFAULT_CPU_LABELS, DEFAULT_FLOW_LABELS, DEFAULT_LISTEN, DEFAULT_TOP_K,
                            DEFAULT_TIMEOUT, DEFAULT_WORKERS, FLOW_LABEL_SETS)
from steer.model.capabilities import MECHANISMS
from steer.model.classify import CLASSES
from steer.model.flowarrays import FLOW, FlowArrays, flow_fields, flow_hashes, flow_id
from steer.model.latency import ClassWaits, LabelWaits
from steer.model.reports import SIDE_EVENTS, SIDES, by_side, side_events
from steer.model.totals import EPHEMERAL, FlowTotal, ServiceTotals, WorkloadTotals, workload_key
from steer.model.ledger import AT, TOTALS, Fold, FlowLedger, find
from steer.trace.programs import SECTIONS
from steer.model.numeric import np
from steer.model.topology import Topology, read_int
from steer.model.samples import TraceSample, TraceSource, address_text, proto_name
from steer.present.webserver import ExporterServer, WebConfig

if TYPE_CHECKING:
    from steer.steering.xdp import DeviceState

ACTIVE_WINDOW = 10.0   # seconds: steer_class_flows counts the flows with traffic in this window
MAX_ACTIVE = 65536     # and at most this many (13,900 new connections a second fill 10 s twice)




def ephemeral_ports(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> range:
    """The ports connect() picks local ports from (the kernel's default where unreadable)."""
    try:
        low, high = (int(v) for v in open(path).read().split())
        return range(low, high + 1)
    except (OSError, ValueError):
        return range(32768, 61000)


def bpf_stats_enabled(path: str = "/proc/sys/kernel/bpf_stats_enabled") -> bool:
    return read_int(path) == 1


# the per-CPU families: (key in _cpu_metrics' values, name, help, labels beyond cpu)
CPU_FAMILIES = [
    ("kernel", "steer_cpu_kernel_seconds", "Kernel receive processing time per CPU and "
     "context (softirq: NET_RX; napi_thread: threaded NAPI; kthread: cpumap).", ["context"]),
    ("unattr", "steer_cpu_net_rx_unattributed_seconds",
     "NET_RX time with no TCP/UDP skb to charge it to.", []),
    ("kthread_unattr", "steer_cpu_kthread_unattributed_seconds",
     "Receive kthread time (cpumap) with no flow to charge it to: with the flows' kthread "
     "time on the CPU, the kthread's whole time.", []),
    ("kthread_softirq", "steer_cpu_kthread_softirq_seconds", "Softirqs other than "
     "NET_RX (timers, tasklets) run inside receive kthreads (cpumap, threaded NAPI) per "
     "CPU: the scheduler counts them as the kthread's time.", []),
    ("kthread_net_rx", "steer_cpu_kthread_net_rx_seconds", "Of the NET_RX time, the "
     "softirqs receive kthreads (cpumap, threaded NAPI) ran per CPU: the scheduler counts "
     "them as the kthread's time too.", []),
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


class SteerCollector(Collector):
    """Yields fresh metric families on every collect(). Every counter is the same whoever scrapes
    and how often: per-class totals fold each interval between two reads into running sums,
    per-flow totals come from the tracer's cumulative entries (FlowLedger). Only the choice of
    the top-K series and steer_class_flows look at the recent past."""

    def __init__(self, tracer: TraceSource, topo: Topology, top_k: int = DEFAULT_TOP_K,
                 steering: Callable[[], list[DeviceState]] | None = None,
                 actions: Callable[[], dict[str, dict]] | None = None,
                 flow_labels: str = DEFAULT_FLOW_LABELS, cpu_labels: str = DEFAULT_CPU_LABELS,
                 workloads: Callable | None = None,
                 release_memory: Callable[[], None] | None = None):
        if flow_labels not in FLOW_LABEL_SETS:
            raise ValueError(f"flow labels {flow_labels!r}: one of {', '.join(FLOW_LABEL_SETS)}")
        if cpu_labels not in CPU_LABELS:
            raise ValueError(f"cpu labels {cpu_labels!r}: one of {', '.join(CPU_LABELS)}")
        self.cpu_labels = cpu_labels
        # called after each scrape (steer.kernel.process.trim_heap): this module calls no C itself
        self.release_memory = release_memory
        self.tracer, self.topo, self.top_k = tracer, topo, top_k
        self.steering, self.actions, self.flow_labels = steering, actions, flow_labels
        self._lock = threading.Lock()
        self._last_ns: int | None = None
        self._ledger = FlowLedger(topo)
        self._class_totals: dict[str, dict[str, float]] = {
            c: defaultdict(float) for c in CLASSES}
        self._service_totals = ServiceTotals(ephemeral_ports())
        # --flow-labels workload: cgroup id -> (path, Workload) (steer.trace.workloads)
        self._workloads = workloads
        if flow_labels == "workload" and workloads is None:
            from steer.trace.cgroups import CgroupResolver
            from steer.trace.workloads import WorkloadResolver
            # a slow walk of the cgroup tree in a thread: a scrape never waits for one; the
            # first now, before any thread (the exporter gives up its privileges next)
            self._workloads = WorkloadResolver(CgroupResolver(background=True))
            self._workloads.prime()
        self._workload_totals = WorkloadTotals()
        # --latency: each class's delays from the stack to the reader
        self._waits = ClassWaits() if getattr(tracer, "latency", False) else None
        # and by workload, for the top-K series (--flow-labels workload)
        self._workload_waits = LabelWaits() \
            if self._waits is not None and flow_labels == "workload" else None
        # steer_class_flows' window, sorted by flow (its hash: 1 in 2^64 two count as one, as
        # Python's hash of a FlowId did): each flow, when it last had traffic (ms) and its class
        self._active_flows = np.empty(0, np.uint64)   # their hashes (flowarrays.flow_hashes)
        self._active_ms = np.empty(0, np.int64)
        self._active_cls = np.empty(0, np.int8)
        self._active_classes = [0] * len(CLASSES)   # of those, by class
        # per structure bounded by size, what it had to forget early
        self.evicted: dict[str, int] = defaultdict(int)

    def _advance(self) -> tuple[TraceSample, Fold, Series]:
        """Read the maps once; fold the interval since the last read into the class totals; the
        per-series totals as of this read. Called under self._lock."""
        read = getattr(self.tracer, "sample_arrays", None)
        now = read() if read else self.tracer.sample()
        arrays = now.arrays if now.arrays is not None else FlowArrays.of_entries(now.entries)
        duration = (now.monotonic_ns - self._last_ns) / 1e9 if self._last_ns is not None else 0.0
        self._last_ns = now.monotonic_ns
        fold = self._ledger.fold(arrays, duration)
        caps = self.tracer.capabilities
        counts = fold.counts
        columns = [("rx_bytes", counts[:, AT["rx_bytes"]]), ("kernel_seconds", fold.kernel_seconds),
                   ("app_seconds", fold.app_seconds)]
        if caps.llc.available:
            columns += [("llc_kernel", counts[:, AT["llc_kernel"]]),
                        ("llc_app", counts[:, AT["llc_app"]])]
        if caps.counters_per_flow.available:
            columns += [(f"{name}_{side}", counts[:, AT[f"{field}_{side}"]])
                        for name, field in SIDE_EVENTS.items() for side in SIDES]
        for key, values in columns:
            sums = np.bincount(fold.cls, weights=values, minlength=len(CLASSES))
            for i, cls in enumerate(CLASSES):
                self._class_totals[cls][key] += float(sums[i])
        # the interval's flows with traffic, by their hashes (sorted), and the class of each
        active, first = np.unique(flow_hashes(fold.flows[fold.active]), return_index=True)
        active_cls = fold.cls[first]
        waits = self.tracer.latency_totals(raw=True) if self._waits is not None else None
        if waits is not None:
            self._waits.fold(waits, lambda keys: _classes_of(keys, active, active_cls))
        t = now.monotonic_ns / 1e9
        self._remember_active(active, active_cls, int(t * 1000))
        series = self._series(fold, t)
        if self._workload_waits is not None:
            # after _series, which learns the workloads of this read's flows
            self._workload_waits.fold(waits, [self._workload_totals.key(k) for k in waits])
            self._workload_waits.keep(series.key(i) for i in range(len(series.totals)))
        return now, fold, series

    def _remember_active(self, flows: np.ndarray, cls: np.ndarray, ms: int) -> None:
        """steer_class_flows' window: each flow with traffic in the last ACTIVE_WINDOW seconds,
        when it last had it and its class then; at most MAX_ACTIVE of them, the latest. FLOWS:
        the hashes of this interval's (sorted, once each), CLS their classes."""
        _, again = find(flows, self._active_flows)
        stamps = np.concatenate([self._active_ms[~again], np.full(len(flows), ms, np.int64)])
        classes = np.concatenate([self._active_cls[~again], cls])
        flows = np.concatenate([self._active_flows[~again], flows])
        fresh = ms - stamps <= int(ACTIVE_WINDOW * 1000)
        flows, stamps, classes = flows[fresh], stamps[fresh], classes[fresh]
        if len(flows) > MAX_ACTIVE:
            # a port scan fills the window faster than it empties: the oldest go first
            latest = np.sort(np.argsort(stamps, kind="stable")[len(flows) - MAX_ACTIVE:])
            self.evicted["active_flows"] += len(flows) - MAX_ACTIVE
            flows, stamps, classes = flows[latest], stamps[latest], classes[latest]
        order = np.argsort(flows)   # sorted by flow, for the next read's lookups
        self._active_flows, self._active_ms = flows[order], stamps[order]
        self._active_cls = classes[order]
        self._active_classes = np.bincount(classes, minlength=len(CLASSES)).tolist()

    def _series(self, fold: Fold, now: float) -> Series:
        """The series of --flow-labels: each flow's (fold.flows), and each series' totals."""
        if self.flow_labels == "five-tuple":
            # a flow's series is the flow: keys are made for the top-K alone
            return Series(lambda i: tuple(flow_id(fold.flows[i])), fold.totals,
                          np.arange(len(fold.flows)))
        if self.flow_labels == "service":
            keys, at = self._service_keys(fold.flows)
            gone_keys, gone_at = self._service_keys(fold.gone)
        else:
            keys, at, gone_keys, gone_at = self._workload_keys(fold)
        current = _by_key(keys, at, fold.totals)
        gone = _by_key(gone_keys, gone_at, fold.gone_totals)
        totals = (self._service_totals if self.flow_labels == "service"
                  else self._workload_totals).fold(current, gone, now)
        names = list(totals)
        index = {k: i for i, k in enumerate(names)}
        code = np.array([index.get(k, -1) for k in keys] + [-1], np.int64)
        return Series(names.__getitem__,
                      np.array([[getattr(t, f) for f in TOTALS] for t in totals.values()],
                               np.int64).reshape(len(names), len(TOTALS)),
                      code[at])

    def _service_keys(self, flows) -> tuple[list[tuple], np.ndarray]:
        """(proto, dst, dport) of FLOWS: their keys, and each flow's among them; a flow to a
        port of the ephemeral range from one outside it is a reply to this host, dport
        "ephemeral" (ServiceTotals)."""
        f = flow_fields(flows)
        eph = self._service_totals.ephemeral
        lo, hi = (eph.start, eph.stop - 1) if len(eph) else (1, 0)
        client = ((f["dport"] >= lo) & (f["dport"] <= hi)) & ~((f["sport"] >= lo) & (f["sport"] <= hi))
        rows = np.zeros(len(flows), [("proto", "u1"), ("family", "u1"), ("daddr", "u1", 16),
                                      ("dport", "<i4")])
        for name in ("proto", "family", "daddr"):
            rows[name] = f[name]
        rows["dport"] = np.where(client, -1, f["dport"].astype(np.int32))
        unique, at = np.unique(rows.view(np.dtype((np.void, rows.dtype.itemsize))),
                               return_inverse=True)
        keys = [(proto_name(r["proto"]), address_text(r["daddr"], r["family"]),
                 EPHEMERAL if r["dport"] < 0 else int(r["dport"]))
                for r in unique.view(rows.dtype)]
        return keys, at.ravel()

    def _workload_keys(self, fold: Fold):
        """The workloads of fold's flows, and of those gone (their keys, each flow's), as
        _service_keys gives services; a flow is under the workload of its reader's cgroup from
        the first read that knew it (WorkloadTotals); -1 for a flow in none."""
        wt, flows = self._workload_totals, fold.flows
        for i in np.flatnonzero(fold.reader_cgroup):
            flow = flows[fold.active[i]].tobytes()
            if not wt.knows(flow):
                wt.learn(flow, workload_key(*self._workloads(int(fold.reader_cgroup[i]))))
        gone = [wt.forget(f.tobytes()) for f in fold.gone]
        mine = [wt.key(f.tobytes()) for f in flows]
        return (*_indexed(mine), *_indexed(gone))

    def collect(self) -> Iterable:
        # one scrape at a time from the read to the last family: the totals and the flows the
        # families are made of belong to this read until the next one
        with self._lock:
            families = list(self._families())
            if self.release_memory:
                self.release_memory()   # the fold's temporary arrays: their pages, given back
        yield from families

    def _families(self) -> Iterable:
        start = time.monotonic()
        sample, fold, series = self._advance()
        # the read's own time: not what it waited for the gap between two windows (up to 0.5 s)
        took = time.monotonic() - start - getattr(getattr(self.tracer, "waited", None),
                                                  "seconds", 0.0)
        caps = self.tracer.capabilities
        yield from self._class_metrics(caps.llc.available, caps.counters_per_flow.available)
        yield from self._cpu_metrics(sample, caps)
        yield from self._flow_metrics(fold, series)
        yield from self._health_metrics(sample, caps)
        yield from self._clock_metrics(sample, caps)
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
                "outside the steer group.", labels=["why"])
            try:
                devices, why = self.steering(), ""
            except Exception as e:  # noqa: BLE001 - unreadable rules must not fail the scrape
                devices, why = [], str(e)
            readable.add_metric([why], 0 if why else 1)
            yield readable
            yield from self._steering_metrics(devices)
        if self.actions:
            # per policy: {"moves": n, "verdicts": {outcome: n}, "last_change": goodput change
            # of the last move judged or None} (steer.steering.auto.AutoSteer.actions)
            acts = self.actions()
            moves = CounterMetricFamily("steer_auto_moves", "Flows moved by steer auto.",
                                        labels=["policy"])
            verdicts = CounterMetricFamily(
                "steer_auto_move_verdicts", "Moves of steer auto judged, by verdict: kept, "
                "reverted (put back), inconclusive (too noisy to tell), ended (the flow ended "
                "before its verdict).", labels=["policy", "outcome"])
            change = GaugeMetricFamily(
                "steer_auto_last_move_goodput_change", "The last judged move's change in the "
                "goodput of its flow and neighbours, as a share of the goodput before it.",
                labels=["policy"])
            for policy, a in acts.items():
                moves.add_metric([policy], a["moves"])
                for outcome in ("kept", "reverted", "inconclusive", "ended"):
                    verdicts.add_metric([policy, outcome], a["verdicts"].get(outcome, 0))
                if a.get("last_change") is not None:
                    change.add_metric([policy], a["last_change"])
            yield moves
            yield verdicts
            yield change

    def _class_metrics(self, llc: bool, events: bool):
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
        if self._waits is not None:
            m = HistogramMetricFamily(
                "steer_class_receive_wait_seconds",
                "How long received data waits from the stack to the read that takes it, by "
                "class (--latency: sampled skbs).", labels=["class"])
            for i, cls in enumerate(CLASSES):
                buckets, total = self._waits.buckets(i)
                m.add_metric([cls], buckets, total)
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
            add("kthread_softirq", c.cpu, c.kthread_softirq_ns / 1e9)
            add("kthread_net_rx", c.cpu, c.kthread_net_rx_ns / 1e9)
            add("hardirq", c.cpu, c.hardirq_ns / 1e9)
            add("hardirqs", c.cpu, c.hardirqs)
            add("unattr", c.cpu, c.net_rx_unattributed_ns / 1e9)
            add("kthread_unattr", c.cpu, c.kthread_unattributed_ns / 1e9)
            add("app", c.cpu, c.app_ns / 1e9)
            add("events", c.cpu, c.net_rx_events)
            add("drops", c.cpu, c.rx_drops)
            add("cpumap_drops", c.cpu, c.cpumap_enqueue_drops, "enqueue")
            add("cpumap_drops", c.cpu, c.cpumap_kthread_drops, "kthread")
        for cpu, counts in s.cpu_events.items():
            for event, n in counts.items():
                add("whole", cpu, n, event)
        if caps.llc.available or caps.counters_per_flow.available:
            for c in s.cpus:
                counts = by_side(side_events([c])) if caps.counters_per_flow.available else {}
                for side in SIDES:
                    if caps.llc.available:
                        add("recv", c.cpu, getattr(c, f"llc_{side}"), side, "llc_misses")
                    for event, n in counts.get(side, {}).items():
                        add("recv", c.cpu, n, side, event)
        for key, name, doc, more in CPU_FAMILIES:
            if key in ("whole", "recv") and not values.get(key):
                continue   # no PMU events counted: no family
            m = CounterMetricFamily(name, doc, labels=["cpu", *more])
            for labels, v in sorted(values[key].items(), key=_cpu_order):
                m.add_metric(list(labels), v)
            yield m

    def _flow_metrics(self, fold: Fold, series: Series):
        """The top-K series by the rate of the last interval, then by bytes (a flow idle for an
        interval keeps its series while the tracer keeps it): cumulative counters (rate() gives
        their rates), and the placement of their flows."""
        labels = FLOW_LABEL_SETS[self.flow_labels]
        mine = series.of_flow[fold.active]
        rate = np.zeros(len(series.totals))
        np.add.at(rate, mine[mine >= 0], fold.rate_bps()[mine >= 0])
        top = np.lexsort((series.totals[:, 0], rate))[::-1][:self.top_k]
        keys = {int(i): series.key(int(i)) for i in top}
        totals = {k: FlowTotal(*series.totals[i].tolist()) for i, k in keys.items()}
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
        waits = HistogramMetricFamily(
            "steer_workload_receive_wait_seconds", "How long received data waits from the stack "
            "to the read that takes it, of a top-K workload (--latency --flow-labels workload: "
            "sampled skbs).", labels=labels) if self._workload_waits is not None else None
        for i, k in keys.items():
            if waits is not None and (hist := self._workload_waits.buckets(k)) is not None:
                waits.add_metric([str(v) for v in k], *hist)
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
            "service labels, how many of its flows have that placement). kernel_cpu: the most "
            "kernel receive time; stack_cpu: where its packets go up the protocol stack; class: "
            "stack_cpu against app_cpu.",
            labels=labels + ["kernel_cpu", "stack_cpu", "app_cpu", "class", "shared_llc",
                             "smt_sibling", "app_comm"])
        placed: dict[tuple, int] = defaultdict(int)
        for i in np.flatnonzero(np.isin(mine, top)):
            kernel_cpu, stack_cpu = int(fold.kernel_cpu[i]), int(fold.stack_cpu[i])
            app_cpu = int(fold.app_cpu[i])
            p = self._ledger.placement(stack_cpu, app_cpu)
            placed[tuple(str(v) for v in keys[int(mine[i])]) + (
                _cpu(kernel_cpu), _cpu(stack_cpu), _cpu(app_cpu), p.cls, _s(p.shared_llc).lower(),
                _s(p.smt_sibling).lower(),
                fold.reader_comm[i].decode(errors="replace"))] += 1
        for values, n in placed.items():
            info.add_metric(list(values), n)
        yield from (rx, kernel, app, drops, samples, info)
        if waits is not None:
            yield waits

    def _clock_metrics(self, s: TraceSample, caps):
        """Sampled timing: each CPU's expiries of the sampler's clock by outcome."""
        if caps.mode != "sampled":
            return
        c = CounterMetricFamily("steer_tracer_clock_expiries",
                                "Expiries of the sampler's clock per CPU: ran (its program "
                                "ran), withheld (the kernel ran none, as some do while a CPU "
                                "idles; counted from the timer and charged as the sampler "
                                "would have), not_charged (of those, what steer could not "
                                "tell: charged to no one).", labels=["cpu", "outcome"])
        for x in s.cpus:
            if x.samples or x.samples_withheld_unknown:
                ran = x.samples - (x.samples_withheld - x.samples_withheld_unknown)
                c.add_metric([str(x.cpu), "ran"], ran)
                c.add_metric([str(x.cpu), "withheld"], x.samples_withheld)
                c.add_metric([str(x.cpu), "not_charged"], x.samples_withheld_unknown)
        yield c

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
                                "profile's, receive calls whose arguments the kprobe fallback's "
                                "in-flight map no longer held.", labels=["map"])
        c.add_metric(["napi_polls"], sum(x.napi_map_full for x in s.cpus))
        c.add_metric(["profile"], sum(x.profile_map_full for x in s.cpus))
        c.add_metric(["recv_calls"], sum(x.recv_calls_lost for x in s.cpus))
        yield c
        cap = GaugeMetricFamily("steer_capability_info",
                                "Tracing mechanisms: state is available or unavailable (value 1).",
                                labels=["mechanism", "state", "detail"])
        for name in MECHANISMS:
            f = getattr(caps, name)
            cap.add_metric([name, "available" if f.available else "unavailable", str(f)], 1)
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
            fig.add_metric([name, f.state, f.why], 1)
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
            if d.link_read:   # else unknown: no series rather than a 0 that may be false
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


def _classes_of(keys: list[bytes], active: np.ndarray, cls: np.ndarray) -> np.ndarray:
    """The class (an index into CLASSES) each flow of KEYS (packed ft_flow_key) had in the
    interval whose flows with traffic are ACTIVE (their sorted hashes) of classes CLS; -1 where
    it had none there."""
    at, hit = find(active, flow_hashes(np.frombuffer(b"".join(keys), FLOW)))
    return np.where(hit, cls[at] if len(cls) else -1, -1)


def _cpu_order(item) -> tuple:
    """Series of the per-CPU families in the order of their CPUs (or domains), then labels."""
    labels = item[0]
    digits = labels[0].lstrip("abcdefghijklmnopqrstuvwxyz")
    return (labels[0][:len(labels[0]) - len(digits)], int(digits) if digits.isdigit() else -1,
            labels[1:])


def _s(v) -> str:
    return "" if v is None else str(v)


def _cpu(cpu: int) -> str:
    return "" if cpu < 0 else str(cpu)


@dataclass(frozen=True)
class Series:
    """The series of a read: key(i) its labels' values, totals (n, TOTALS) since they began,
    of_flow each flow's series (-1: none)."""
    key: Callable[[int], tuple]
    totals: np.ndarray
    of_flow: np.ndarray


def _indexed(keys: list) -> tuple[list, np.ndarray]:
    """KEYS (None: in no series) as their distinct keys and each one's index among them."""
    distinct = sorted({k for k in keys if k is not None})
    index = {k: i for i, k in enumerate(distinct)}
    return distinct, np.array([index.get(k, -1) for k in keys], np.int64)


def _by_key(keys: list, at: np.ndarray, totals: np.ndarray) -> dict[tuple, FlowTotal]:
    """TOTALS rows summed by their key (AT: each row's index in KEYS; -1: none)."""
    sums = np.zeros((len(keys), len(TOTALS)), np.int64)
    np.add.at(sums, at[at >= 0], totals[at >= 0])
    return {k: FlowTotal(*row) for k, row in zip(keys, sums.tolist())}


def parse_listen(text: str) -> tuple[str, int]:
    """(host, port) of HOST:PORT or [IPV6]:PORT; ":PORT" gives host "" (every address)."""
    host, sep, port = text.rpartition(":")
    # ASCII digits alone: str.isdigit() and int() also take Arabic-Indic and other digits
    if not sep or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
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
