"""Snapshots: what each flow did between two tracer samples, with its dominant CPUs and class
(by the rules of steer.model.interval)."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import fields, replace
from operator import attrgetter

from steer.model.capabilities import Capabilities
from steer.model.classify import Placement, classify
from steer.model.interval import (ACTIVITY, COUNTERS, WILDCARD_DROPS, dominant, first_named,
                                  interval_cpus, is_wildcard, kernel_time, restarted)
from steer.model.latency import interval_delays
from steer.model.placement import PlacementMemory
from steer.model.reports import (CpuReport, FlowReport, RxPath, Snapshot, attach_delays,
                                 attach_devices, attach_workloads, by_side, side_events)
from steer.model.samples import CpuSample, FlowCpuSample, FlowId, NapiCounts, TraceSample, TraceSource
from steer.model.topology import Topology
from steer.model.units import hit_ratio

NS = 1e9
_ACTIVE = attrgetter(*ACTIVITY)   # a delta's ACTIVITY figures at once, per changed entry
_NO_RX_SIDE = dict.fromkeys(WILDCARD_DROPS, 0)
# FlowCpuSample's fields in order, all read at once, and where its counters are among them
_FIELDS = attrgetter(*(f.name for f in fields(FlowCpuSample)))
_COUNTER_AT = [i for i, f in enumerate(fields(FlowCpuSample)) if f.name in COUNTERS]


def _delta(a: FlowCpuSample | None, b: FlowCpuSample) -> FlowCpuSample:
    if a is None or restarted(b.__getattribute__, a.__getattribute__):
        return b   # new, or evicted and re-created since the earlier sample
    values, was = list(_FIELDS(b)), _FIELDS(a)
    for i in _COUNTER_AT:
        values[i] -= was[i]
    return FlowCpuSample(*values)


def _summed(parts: list[FlowCpuSample]) -> FlowCpuSample:
    """A flow's entries summed (their counters; the rest from the first): the one entry itself
    where there is one, as under connection churn nearly every flow has."""
    if len(parts) == 1:
        return parts[0]
    values = list(_FIELDS(parts[0]))
    for p in parts[1:]:
        more = _FIELDS(p)
        for i in _COUNTER_AT:
            values[i] += more[i]
    return FlowCpuSample(*values)


def _last_drop(parts: list[FlowCpuSample]) -> str | None:
    """The reason of a flow's latest drop in the interval, of the CPUs that dropped any."""
    dropped = [p for p in parts if p.rx_drops]
    return max(dropped, key=lambda p: p.last_seen_ns).last_drop_reason or None if dropped else None


def _whole_cpu(before: dict, after: dict | None) -> dict | None:
    """A CPU's whole counts between two reads of its events, with the LLC hit ratio."""
    if not after:
        return None
    d = {e: v - before.get(e, 0) for e, v in after.items()}
    if "llc_misses" in d and "llc_references" in d:
        ratio = hit_ratio(d["llc_misses"], d["llc_references"])
        d["llc_hit_ratio"] = None if ratio is None else round(ratio, 4)
    return d


def napi_deltas(before: TraceSample | None, after: TraceSample) -> dict:
    """NapiId -> CPU -> NapiCounts between two samples, of the instances and CPUs that polled."""
    old = before.napi if before else {}
    out = {}
    for key, cpus in after.napi.items():
        prev = old.get(key, {})
        d = {}
        for cpu, n in cpus.items():
            b = prev.get(cpu, NapiCounts())
            if n.polls > b.polls:
                d[cpu] = NapiCounts(*(x - y for x, y in zip(n, b)))
        if d:
            out[key] = d
    return out


def cpu_polls(napi: dict, cpu: int) -> NapiCounts:
    """CPU's NAPI polls of every instance, from napi_deltas()."""
    counts = [n[cpu] for n in napi.values() if cpu in n]
    return NapiCounts(*(sum(field) for field in zip(*counts))) if counts else NapiCounts()


def poll_cpus(napi: dict, rx: RxPath | None) -> dict[int, int] | None:
    """CPU -> polls of the NAPI instance of RX (by napi_id, which is unique on the host; without
    one, of every instance of its device), from napi_deltas()."""
    if rx is None:
        return None
    out: dict[int, int] = defaultdict(int)
    for key, cpus in napi.items():
        if (key.napi_id == rx.napi_id) if rx.napi_id else \
                (key.ifindex, key.netns) == (rx.ifindex, rx.netns):
            for cpu, n in cpus.items():
                out[cpu] += n.polls
    return dict(out)


# what the tracer could not count, and counted (since it started): flows --json's tracer block
LOST_COUNTS = ("napi_map_full", "profile_map_full", "cpumap_enqueue_drops", "cpumap_kthread_drops",
               "recv_calls_lost")


# interval_cpus' weights of one entry, kernel and app time in seconds (as reports give them)
_WEIGHT = {"kernel_time": lambda p: kernel_time(p.__getattribute__) / NS,
           "rx_skbs": lambda p: p.rx_skbs, "kthread_ns": lambda p: p.kthread_ns,
           "app_ns": lambda p: p.app_ns / NS, "app_calls": lambda p: p.app_calls}


def _cpus_of(parts: list[FlowCpuSample]) -> tuple:
    """A flow's kernel, stack and app (CPU, share) by interval_cpus, and its kernel and app
    seconds by CPU, from its entries (one a CPU)."""
    if len(parts) == 1:
        # one CPU for everything: its shares are whole (the sums below, without their dicts)
        p = parts[0]
        ks, as_ = _WEIGHT["kernel_time"](p), _WEIGHT["app_ns"](p)
        kcpu, acpu = ({p.cpu: ks} if ks else {}), ({p.cpu: as_} if as_ else {})
        sides = interval_cpus(lambda w: (p.cpu, 1.0) if _WEIGHT[w](p) > 0 else (None, None),
                              first_named)
        return sides, kcpu, acpu
    weights: dict[str, dict[int, float]] = {w: defaultdict(float) for w in _WEIGHT}
    for p in parts:
        for w, of in _WEIGHT.items():
            weights[w][p.cpu] += of(p)
    sides = interval_cpus(lambda w: dominant(weights[w]), first_named)
    return sides, weights["kernel_time"], weights["app_ns"]


def build_snapshot(before: TraceSample | None, after: TraceSample, topo: Topology,
                   caps: Capabilities) -> Snapshot:
    """What happened between BEFORE (None: since the tracer started) and AFTER."""
    duration = (after.monotonic_ns - before.monotonic_ns) / NS if before else 0.0
    napi = napi_deltas(before, after)
    placements: dict[tuple, Placement] = {}   # (kernel CPU, app CPU) -> its class, once
    reports = [_flow_report(fid, parts, duration, topo, caps, napi, placements)
               for fid, parts in _interval_parts(before, after).items()]
    reports.sort(key=lambda r: (-r.rx_bytes, -r.app_bytes, r.flow))
    before_cpus = {c.cpu: c for c in before.cpus} if before else {}
    return Snapshot(duration=duration, flows=reports,
                    cpus=_cpu_reports(before, after, topo, caps, napi), capabilities=caps,
                    live_entries=after.live_entries, max_entries=after.max_entries,
                    evictions=after.evictions, napi=napi,
                    flow_failures=sum(c.flow_failures for c in after.cpus),
                    lost={k: sum(getattr(c, k) for c in after.cpus) for k in LOST_COUNTS},
                    untimed_skbs=sum(c.untimed_skbs - before_cpus.get(c.cpu, CpuSample(c.cpu)).untimed_skbs
                                     for c in after.cpus),
                    ended=after.monotonic_ns / NS)


def _interval_parts(before: TraceSample | None,
                    after: TraceSample) -> dict[FlowId, list[FlowCpuSample]]:
    """Each flow active between BEFORE and AFTER (a delta in one of ACTIVITY): its entries'
    deltas, one per CPU. An unconnected UDP socket knows no peer: its reads go to the one flow
    to that port."""
    per_flow: dict[FlowId, list[FlowCpuSample]] = defaultdict(list)
    old = before.entries if before else {}
    if before is not None and before.seq and after.seq == before.seq + 1:
        # consecutive reads: only the entries the tracer saw change can have a delta
        pairs = ((old.get(k), after.entries[k]) for k in after.changed if k in after.entries)
    else:
        pairs = ((old.get(k), b) for k, b in after.entries.items())
    for a, b in pairs:
        if a is b:
            continue   # the tracer hands back the same object for an entry that did not change
        d = _delta(a, b)
        if any(_ACTIVE(d)):
            per_flow[d.flow].append(d)
    wild = [f for f in per_flow if is_wildcard(f.src, f.sport)]
    for fid in wild:
        peers = [f for f in per_flow if f not in wild and
                 (f.proto, f.dst, f.dport) == (fid.proto, fid.dst, fid.dport)]
        if len(peers) == 1:
            per_flow[peers[0]].extend(replace(s, flow=peers[0], **_NO_RX_SIDE)
                                      for s in per_flow.pop(fid))
    return per_flow


def _flow_report(fid: FlowId, parts: list[FlowCpuSample], duration: float, topo: Topology,
                 caps: Capabilities, napi, placements: dict[tuple, Placement]) -> FlowReport:
    """One flow's report from its per-CPU deltas PARTS; PLACEMENTS caches each pair's class."""
    llc = caps.llc.available
    per_flow_events = caps.counters_per_flow.available
    sampled = caps.mode == "sampled"
    t = _summed(parts)
    sides, kcpu, acpu = _cpus_of(parts)
    (kernel_cpu, kshare), (stack_cpu, stack_share), (app_cpu, ashare) = sides
    # the reader: of the processes seen reading, the one with most calls, else most time
    reader = max((p for p in parts if p.app_pid), key=lambda p: (p.app_calls, p.app_ns),
                 default=None)
    # the class is the stack's CPU against the reader's, as in the papers: with generic XDP
    # steering the arrival CPU's share (XDP, linearising) can outweigh the stack's own
    placement = placements.get((stack_cpu, app_cpu))
    if placement is None:
        placement = placements[stack_cpu, app_cpu] = classify(stack_cpu, app_cpu, topo)
    return FlowReport(
        flow=fid, duration=duration,
        rx_bytes=t.rx_bytes, rx_packets=t.rx_packets, rx_skbs=t.rx_skbs,
        kernel_cpu=kernel_cpu, kernel_cpu_share=kshare,
        kernel_seconds=sum(kcpu.values()),
        kernel_kthread_seconds=t.kthread_ns / NS,
        app_cpu=app_cpu, app_cpu_share=ashare, app_seconds=sum(acpu.values()),
        app_nested_seconds=t.app_nested_ns / NS,
        app_bytes=t.app_bytes,
        app_calls=t.app_calls if caps.app_calls.available else None,
        app_pid=reader.app_pid if reader else None, app_comm=reader.app_comm if reader else None,
        app_cgroup_id=reader.app_cgroup or None if reader else None,
        llc_misses_kernel=t.llc_kernel if llc else None,
        llc_misses_app=t.llc_app if llc else None,
        placement=placement,
        kernel_cpus={c: s for c, s in kcpu.items() if s},
        app_cpus={c: s for c, s in acpu.items() if s},
        stack_cpu=stack_cpu, stack_cpu_share=stack_share, rx_path=(rx := RxPath.of(parts)),
        rx_poll_cpus=poll_cpus(napi, rx) if napi else ({} if rx else None),
        rx_drops=t.rx_drops, last_drop_reason=_last_drop(parts) if t.rx_drops else None,
        kernel_samples=t.kernel_samples if sampled else None,
        app_samples=t.app_samples if sampled else None,
        **(side_events([t]) if per_flow_events else {}))


def _cpu_reports(before: TraceSample | None, after: TraceSample, topo: Topology,
                 caps: Capabilities, napi) -> list[CpuReport]:
    """Each present CPU's interval."""
    llc = caps.llc.available
    per_flow_events = caps.counters_per_flow.available
    sampled = caps.mode == "sampled"
    cpus = []
    before_cpus = {c.cpu: c for c in before.cpus} if before else {}
    for c in after.cpus:
        b = before_cpus.get(c.cpu, CpuSample(c.cpu))
        if c.cpu not in topo.cpus:
            continue   # possible but never present
        cpus.append(CpuReport(
            cpu=c.cpu, net_rx_events=c.net_rx_events - b.net_rx_events,
            net_rx_seconds=(c.net_rx_ns - b.net_rx_ns) / NS,
            net_rx_unattributed_seconds=(c.net_rx_unattributed_ns - b.net_rx_unattributed_ns) / NS,
            kthread_seconds=(c.kthread_ns - b.kthread_ns) / NS,
            kthread_unattributed_seconds=(c.kthread_unattributed_ns
                                          - b.kthread_unattributed_ns) / NS,
            app_seconds=(c.app_ns - b.app_ns) / NS,
            llc_misses_kernel=c.llc_kernel - b.llc_kernel if llc else None,
            llc_misses_app=c.llc_app - b.llc_app if llc else None,
            rx_drops=c.rx_drops - b.rx_drops,
            napi_thread_seconds=(c.napi_thread_ns - b.napi_thread_ns) / NS,
            kthread_softirq_seconds=(c.kthread_softirq_ns - b.kthread_softirq_ns) / NS,
            kthread_net_rx_seconds=(c.kthread_net_rx_ns - b.kthread_net_rx_ns) / NS,
            hardirq_seconds=(c.hardirq_ns - b.hardirq_ns) / NS,
            hardirqs=c.hardirqs - b.hardirqs,
            samples=c.samples - b.samples if sampled else None,
            samples_withheld=c.samples_withheld - b.samples_withheld if sampled else None,
            samples_withheld_unknown=(c.samples_withheld_unknown - b.samples_withheld_unknown
                                      if sampled else None),
            net_rx_samples=c.net_rx_samples - b.net_rx_samples if sampled else None,
            napi=cpu_polls(napi, c.cpu),
            events=by_side(side_events([c], [b])) if per_flow_events else None,
            whole_cpu=_whole_cpu(before.cpu_events.get(c.cpu, {}) if before else {},
                                 after.cpu_events.get(c.cpu))))
    return cpus

class Intervals:
    """Successive snapshots of a tracer, each covering the time since the previous one (the
    live view, the auto loop); total() covers them all. SMOOTH: each flow's CPUs and class from
    its recent past (PlacementMemory), as the live view shows them, so that a flow with a few
    samples a second does not change class from one second to the next."""

    def __init__(self, tracer: TraceSource, topo: Topology, smooth: bool = False, devices=None,
                 workloads=None):
        self.tracer, self.topo, self.devices, self.workloads = tracer, topo, devices, workloads
        self.memory = PlacementMemory(topo) if smooth else None
        self.first = self.last = tracer.sample()
        # --latency: the kernel's running totals of each flow's delays at the last snapshot
        self.latency = getattr(tracer, "latency", False)
        self.delays_last = tracer.latency_totals() if self.latency else None

    def __call__(self) -> Snapshot:
        now = self.tracer.sample()
        snap = build_snapshot(self.last, now, self.topo, self.tracer.capabilities)
        self.last = now
        if self.latency:
            totals = self.tracer.latency_totals()
            snap = attach_delays(snap, interval_delays(self.delays_last, totals))
            self.delays_last = totals
        snap = self.memory.update(snap) if self.memory else snap
        # DEVICES: attach_devices' lookup, for consumers that weigh the NIC's place (policies);
        # WORKLOADS: attach_workloads', for those that show or match readers by workload
        if self.workloads:
            snap = attach_workloads(snap, self.workloads)
        return attach_devices(snap, self.topo, self.devices) if self.devices else snap

    def total(self) -> Snapshot:
        return build_snapshot(self.first, self.last, self.topo, self.tracer.capabilities)

