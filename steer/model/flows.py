"""Snapshots: what each flow did between two tracer samples, with its dominant CPUs and class."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, fields, replace
from operator import attrgetter

from steer.model.classify import Placement, classify
from steer.model.irqs import DeviceIrq, queue_irq
from steer.model.topology import Topology, nic_local, nic_sockets
from steer.model.capabilities import Capabilities
from steer.model.samples import (CpuSample, FlowCpuSample, FlowId, NapiCounts, TraceSample,
                                 TraceSource)
from steer.model.units import hit_ratio, per_gb
from steer.model.workloads import Workload

NS = 1e9


def _restarted(a: FlowCpuSample, b: FlowCpuSample) -> bool:
    """B, a later read of A's (flow, CPU) entry, counts from zero again: the entry was evicted or
    deleted and re-created in between (a cumulative counter can only go down that way)."""
    return (b.rx_bytes < a.rx_bytes or b.app_calls < a.app_calls or b.app_ns < a.app_ns
            or b.kernel_ns + b.kthread_ns < a.kernel_ns + a.kthread_ns)


# the cumulative counters of a FlowCpuSample: what an interval subtracts, and a flow's entries sum
COUNTERS = ("rx_bytes", "rx_packets", "rx_skbs", "redirected_skbs", "kernel_ns", "kthread_ns",
             "app_bytes", "app_calls", "app_ns", "app_nested_ns", "llc_kernel", "llc_app",
             "rx_drops", "refs_kernel", "refs_app", "instructions_kernel", "instructions_app",
             "cycles_kernel", "cycles_app", "kernel_samples", "app_samples")
# a delta in any of these makes a flow part of an interval (build_snapshot's test; the arrays of
# steer.model.ledger and steer.model.busyflows apply the same)
ACTIVITY = ("rx_bytes", "rx_skbs", "app_calls", "kernel_ns", "kthread_ns", "app_ns", "rx_drops")
_ACTIVE = attrgetter(*ACTIVITY)   # a delta's ACTIVITY figures at once, per changed entry


# FlowCpuSample's fields in order, all read at once, and where its counters are among them
_FIELDS = attrgetter(*(f.name for f in fields(FlowCpuSample)))
_COUNTER_AT = [i for i, f in enumerate(fields(FlowCpuSample)) if f.name in COUNTERS]


def _delta(a: FlowCpuSample | None, b: FlowCpuSample) -> FlowCpuSample:
    if a is None or _restarted(a, b):
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


def _dominant(weights: dict[int, float]) -> tuple[int | None, float | None]:
    total = sum(weights.values())
    if total <= 0:
        return None, None
    cpu = max(weights, key=lambda c: (weights[c], -c))
    return cpu, weights[cpu] / total


@dataclass(frozen=True, slots=True)
class RxPath:
    """The device a flow's packets arrive on: its index in the network namespace whose inode is
    netns, the RX queue (None: not recorded by the driver) and the NAPI instance (None: none)."""
    ifindex: int
    netns: int
    queue: int | None
    napi_id: int | None

    @classmethod
    def of(cls, parts: list[FlowCpuSample]) -> "RxPath | None":
        """From the entry with the most bytes among those that saw the device."""
        seen = [p for p in parts if p.rx_ifindex]
        if not seen:
            return None
        p = max(seen, key=lambda p: (p.rx_bytes, p.cpu))
        return cls(p.rx_ifindex, p.rx_netns, p.rx_queue - 1 if p.rx_queue else None,
                   p.rx_napi_id or None)


@dataclass(frozen=True, slots=True)
class FlowReport:
    flow: FlowId
    duration: float
    rx_bytes: int
    rx_packets: int
    kernel_cpu: int | None
    kernel_cpu_share: float | None
    kernel_seconds: float          # NET_RX softirq + cpumap kthread
    kernel_kthread_seconds: float
    app_cpu: int | None
    app_cpu_share: float | None
    app_seconds: float
    app_nested_seconds: float
    app_bytes: int
    app_calls: int | None          # None: not counted (--app-hook counters runs nothing per read)
    app_pid: int | None
    app_comm: str | None
    llc_misses_kernel: int | None
    llc_misses_app: int | None
    placement: Placement
    kernel_cpus: dict[int, float]  # CPU -> seconds
    app_cpus: dict[int, float]
    # where most of the flow's skbs went up the stack, the CPU its class is of: with generic XDP
    # steering the arrival CPU can spend more time (XDP, linearising) than the target spends on
    # the stack itself
    stack_cpu: int | None = None
    stack_cpu_share: float | None = None
    rx_path: RxPath | None = None          # where its packets come in, as the tracer saw it
    rx_drops: int = 0                      # its received skbs the kernel dropped
    last_drop_reason: str | None = None    # the reason of the latest of them
    rx_device: dict | None = None          # that device resolved (attach_devices): name, NIC, ...
    nic_local: dict | None = None          # {"kernel", "app"}: each side on the NIC's socket
    # the other PMU events per side (None: not counted per flow, Capabilities.counters_per_flow)
    llc_references_kernel: int | None = None
    llc_references_app: int | None = None
    instructions_kernel: int | None = None
    instructions_app: int | None = None
    cycles_kernel: int | None = None
    cycles_app: int | None = None
    # CPU -> NAPI polls of the instance that took its packets in (its napi_id; else every one of
    # its device's): the arrival CPU. None: no device known; empty: its device did not poll (the
    # packets came through the backlog: netif_rx, RPS, loopback)
    rx_poll_cpus: dict[int, int] | None = None
    # skbs that went up the stack: rx_packets / rx_skbs is what GRO (or LRO) aggregated
    rx_skbs: int = 0
    # sampled timing: the samples kernel_seconds and app_seconds rest on (None: not sampled)
    kernel_samples: int | None = None
    app_samples: int | None = None
    # the reader's cgroup: its v2 id (None: no reader seen, or not known), and its path in the
    # cgroup2 hierarchy where attach_workloads resolved it ("/system.slice/nginx.service"), with
    # the unit, container and pod that path names
    app_cgroup_id: int | None = None
    app_cgroup: str | None = None
    app_workload: Workload | None = None

    @property
    def rate_bps(self) -> float:
        return self.rx_bytes * 8 / self.duration if self.duration > 0 else 0.0

    def _per_gb(self, value: float | None) -> float | None:
        return per_gb(value, self.rx_bytes or self.app_bytes)

    @property
    def kernel_seconds_stderr(self) -> float | None:
        return stderr(self.kernel_seconds, self.kernel_samples)

    @property
    def app_seconds_stderr(self) -> float | None:
        return stderr(self.app_seconds, self.app_samples)

    @property
    def kernel_seconds_per_gb(self) -> float | None:
        return self._per_gb(self.kernel_seconds)

    @property
    def app_seconds_per_gb(self) -> float | None:
        return self._per_gb(self.app_seconds)

    @property
    def llc_hit_ratio_kernel(self) -> float | None:
        return hit_ratio(self.llc_misses_kernel, self.llc_references_kernel)

    @property
    def llc_hit_ratio_app(self) -> float | None:
        return hit_ratio(self.llc_misses_app, self.llc_references_app)

    def as_json(self, caps: Capabilities | None = None) -> dict:
        """The flow as JSON; with CAPS, the fields of the figures this kernel does not measure
        are null (CAPS' figures say why)."""
        f = self.flow
        out = {
            "proto": f.proto, "src": f.src, "sport": f.sport, "dst": f.dst, "dport": f.dport,
            "rx_bytes": self.rx_bytes, "rx_packets": self.rx_packets, "rx_skbs": self.rx_skbs,
            "rx_drops": self.rx_drops, "last_drop_reason": self.last_drop_reason,
            "rate_bps": round(self.rate_bps, 1),
            "kernel_cpu": self.kernel_cpu, "kernel_cpu_share": _r(self.kernel_cpu_share),
            "kernel_seconds": _r(self.kernel_seconds),
            "kernel_kthread_seconds": _r(self.kernel_kthread_seconds),
            "app_cpu": self.app_cpu, "app_cpu_share": _r(self.app_cpu_share),
            "app_seconds": _r(self.app_seconds),
            "app_nested_softirq_seconds": _r(self.app_nested_seconds),
            "kernel_samples": self.kernel_samples,
            "kernel_seconds_stderr": _r(self.kernel_seconds_stderr),
            "app_samples": self.app_samples, "app_seconds_stderr": _r(self.app_seconds_stderr),
            "app_bytes": self.app_bytes, "app_calls": self.app_calls,
            "app_pid": self.app_pid, "app_comm": self.app_comm,
            "app_cgroup": self.app_cgroup, "app_cgroup_id": self.app_cgroup_id,
            **_workload_json(self.app_workload),
            "class": self.placement.cls, "shared_llc": self.placement.shared_llc,
            "smt_sibling": self.placement.smt_sibling,
            "kernel_seconds_per_gb": _r(self.kernel_seconds_per_gb),
            "app_seconds_per_gb": _r(self.app_seconds_per_gb),
            "llc_misses_kernel": self.llc_misses_kernel, "llc_misses_app": self.llc_misses_app,
            **{f"{name}_{side}": getattr(self, f"{name}_{side}")
               for name in SIDE_EVENTS for side in SIDES},
            "llc_hit_ratio_kernel": _r(self.llc_hit_ratio_kernel, 4),
            "llc_hit_ratio_app": _r(self.llc_hit_ratio_app, 4),
            "stack_cpu": self.stack_cpu, "stack_cpu_share": _r(self.stack_cpu_share),
            "kernel_cpus": {str(c): _r(s) for c, s in sorted(self.kernel_cpus.items())},
            "app_cpus": {str(c): _r(s) for c, s in sorted(self.app_cpus.items())},
            "rx": None if self.rx_path is None else {
                "ifindex": self.rx_path.ifindex, "netns_inode": self.rx_path.netns,
                "queue": self.rx_path.queue, "napi_id": self.rx_path.napi_id,
                "poll_cpus": None if self.rx_poll_cpus is None else
                {str(c): n for c, n in sorted(self.rx_poll_cpus.items())},
                **(self.rx_device or {})},
            "nic_local": self.nic_local,
        }
        return _null_missing(out, caps, f"{f.proto}_", FLOW_FIELDS) if caps else out


# a reader's workload in the JSON: what its cgroup path names (steer.model.workloads)
WORKLOAD_FIELDS = ("app_workload", "app_unit", "app_container", "app_container_id",
                   "app_container_runtime", "app_pod", "app_namespace", "app_pod_uid")


def _workload_json(w: Workload | None) -> dict:
    if w is None:
        return dict.fromkeys(WORKLOAD_FIELDS)
    return {"app_workload": w.label, "app_unit": w.unit, "app_container": w.container,
            "app_container_id": w.container_id, "app_container_runtime": w.runtime,
            "app_pod": w.pod, "app_namespace": w.namespace, "app_pod_uid": w.pod_uid}


# the JSON fields that each figure (steer.trace.programs.FIGURES) stands behind, for a flow and for a
# CPU: null where the kernel refused what measures it, so that no one reads a 0 as a measurement
# ("{proto}_": the figure of the flow's own transport)
FLOW_FIELDS = {
    "kernel_time": ("kernel_seconds", "kernel_seconds_per_gb", "kernel_cpus", "kernel_samples",
                    "kernel_seconds_stderr"),
    "kthread_time": ("kernel_kthread_seconds",),
    "{proto}_app_bytes": ("app_bytes",),
    "reader": ("app_cpu", "app_cpu_share", "app_pid", "app_comm", "app_cgroup", "app_cgroup_id",
               *WORKLOAD_FIELDS),
    "app_time": ("app_seconds", "app_nested_softirq_seconds", "app_seconds_per_gb", "app_cpus",
                 "app_samples", "app_seconds_stderr"),
    "drops": ("rx_drops", "last_drop_reason"),
}
CPU_FIELDS = {
    "kernel_time": ("net_rx_seconds", "net_rx_unattributed_seconds", "napi_thread_seconds"),
    "kthread_time": ("kthread_seconds",),
    "app_time": ("app_seconds",),
    "drops": ("rx_drops",),
    "hardirqs": ("hardirq_seconds", "hardirqs"),
    "napi_polls": ("napi_polls", "napi_packets", "napi_full_polls"),
}


def _null_missing(out: dict, caps: Capabilities, proto: str, fields: dict) -> dict:
    for figure, names in fields.items():
        if caps.missing(figure.replace("{proto}_", proto)):
            out.update(dict.fromkeys(names))
    if "rx" in out and out["rx"] and caps.missing("napi_polls"):
        out["rx"]["poll_cpus"] = None
    return out


# fewer samples than this and a sampled time is marked rough (~): one standard error is then
# over a third of it (1/sqrt(n)), and more where tasks share a CPU (up to 1.8x, tests/support/helpers.py)
FEW_SAMPLES = 10


def stderr(seconds: float, samples: int | None) -> float | None:
    """One standard error of a sampled time: samples land as a Poisson process on the time they
    stand for, so SECONDS / sqrt(SAMPLES). None where the time was not sampled, or no sample
    landed (then it is below one period, not known to be 0), or fewer than none (an entry
    re-created between two reads with more time but fewer samples than it had)."""
    if not samples or samples < 0:
        return None
    return seconds / samples ** 0.5


def _r(v, digits=9):
    return None if v is None else round(v, digits)


@dataclass(frozen=True, slots=True)
class CpuReport:
    cpu: int
    net_rx_events: int
    net_rx_seconds: float
    net_rx_unattributed_seconds: float
    kthread_seconds: float
    app_seconds: float
    llc_misses_kernel: int | None
    llc_misses_app: int | None
    rx_drops: int = 0
    # side -> event -> count charged to receive work ("kernel", "app"; None: not per flow)
    events: dict | None = None
    napi_thread_seconds: float = 0.0   # of net_rx_seconds: in threaded NAPI kthreads
    hardirq_seconds: float = 0.0       # device interrupt handlers: the arrival CPU's share
    hardirqs: int = 0
    napi: NapiCounts = NapiCounts()    # NAPI polls on this CPU, of every instance
    # event -> count of all the CPU ran (every task, user and kernel, idle), as PCM counts a
    # core; with llc_hit_ratio where both LLC events are counted (None: no PMU events)
    whole_cpu: dict | None = None

    def as_json(self, caps: Capabilities | None = None) -> dict:
        out = {"cpu": self.cpu, "net_rx_events": self.net_rx_events, "rx_drops": self.rx_drops,
                "net_rx_seconds": _r(self.net_rx_seconds),
                "net_rx_unattributed_seconds": _r(self.net_rx_unattributed_seconds),
                "napi_thread_seconds": _r(self.napi_thread_seconds),
                "kthread_seconds": _r(self.kthread_seconds), "app_seconds": _r(self.app_seconds),
                "hardirq_seconds": _r(self.hardirq_seconds), "hardirqs": self.hardirqs,
                "napi_polls": self.napi.polls, "napi_packets": self.napi.packets,
                "napi_full_polls": self.napi.full_polls,
                "llc_misses_kernel": self.llc_misses_kernel, "llc_misses_app": self.llc_misses_app,
                "events": self.events, "whole_cpu": self.whole_cpu}
        return _null_missing(out, caps, "", CPU_FIELDS) if caps else out


@dataclass(frozen=True)
class Snapshot:
    duration: float
    flows: list[FlowReport]        # by rate, highest first
    cpus: list[CpuReport]
    capabilities: Capabilities
    live_entries: int
    max_entries: int
    evictions: int
    flow_failures: int
    untimed_skbs: int
    lost: dict[str, int] = field(default_factory=dict)   # counts full maps and queues dropped
    napi: dict | None = None   # NapiId -> CPU -> NapiCounts in the interval (instances that polled)

    def as_json(self) -> dict:
        return {
            "duration": round(self.duration, 3),
            "capabilities": self.capabilities.as_dict(),
            "flows": [f.as_json(self.capabilities) for f in self.flows],
            "cpus": [c.as_json(self.capabilities) for c in self.cpus],
            "napi": [{"netns_inode": k.netns, "ifindex": k.ifindex, "napi_id": k.napi_id,
                      "backlog": not k.ifindex,
                      **{f: {str(c): getattr(n, f) for c, n in sorted(cpus.items())}
                         for f in NapiCounts._fields}}
                     for k, cpus in sorted((self.napi or {}).items())],
            "tracer": {"live_entries": self.live_entries, "max_entries": self.max_entries,
                       "evictions": self.evictions, "map_update_failures": self.flow_failures,
                       "untimed_skbs": self.untimed_skbs, **self.lost},
        }


def attach_devices(snap: Snapshot, topo: Topology, lookup) -> Snapshot:
    """SNAP with each flow's receiving device resolved by LOOKUP(netns inode, ifindex) -> a dict
    ({"dev", "netns", "nic", "numa_node", "local_cpus", ...}, or None), and nic_local: whether
    its kernel side and its reader run on a socket the NIC is attached to (None where unknown:
    no NIC under the device, or no NUMA information)."""
    flows = []
    for f in snap.flows:
        if f.rx_path is None:
            flows.append(f)
            continue
        dev = lookup(f.rx_path.netns, f.rx_path.ifindex)
        socks = nic_sockets(topo, dev.get("numa_node"), dev.get("local_cpus")) if dev else None
        if dev and "rx_irqs" in dev:
            dev = with_queue_irq(dev, f.rx_path.queue)
        flows.append(replace(f, rx_device=dev, nic_local={
            "kernel": nic_local(topo, socks, f.kernel_cpu), "app": nic_local(topo, socks, f.app_cpu)}))
    return replace(snap, flows=flows)


def attach_workloads(snap: Snapshot, lookup) -> Snapshot:
    """SNAP with each reader's cgroup path and workload, from LOOKUP(cgroup id) -> (path,
    Workload), (None, None) where not known (steer.trace.workloads.WorkloadResolver)."""
    flows = []
    for f in snap.flows:
        if f.app_cgroup_id:
            path, w = lookup(f.app_cgroup_id)
            f = replace(f, app_cgroup=path, app_workload=w)
        flows.append(f)
    return replace(snap, flows=flows)


def with_queue_irq(dev: dict, queue: int | None) -> dict:
    """DEV (a DeviceResolver answer) with the IRQ of RX QUEUE and the CPUs it may run on, in
    place of its NIC's whole lists: "irq" None where no IRQ is known to serve the queue."""
    found = queue_irq([DeviceIrq(i["irq"], "", i["queue"], True) for i in dev.get("rx_irqs") or []],
                      queue)
    out = {k: v for k, v in dev.items() if k not in ("rx_irqs", "irq_cpus")}
    out["irq"] = found.irq if found else None
    out["irq_cpus"] = (dev.get("irq_cpus") or {}).get(str(found.irq)) if found else None
    return out


SIDES = ("kernel", "app")
# the PMU events besides LLC misses, as reports name them -> the samples' field prefix
SIDE_EVENTS = {"llc_references": "refs", "instructions": "instructions", "cycles": "cycles"}


def side_events(parts, minus=()) -> dict[str, int]:
    """FlowReport's llc_references_kernel ... cycles_app: the sums over PARTS (FlowCpuSamples or
    CpuSamples) less those over MINUS."""
    return {f"{name}_{side}": sum(getattr(p, f"{field}_{side}") for p in parts)
            - sum(getattr(p, f"{field}_{side}") for p in minus)
            for name, field in SIDE_EVENTS.items() for side in SIDES}


def by_side(events: dict[str, int]) -> dict[str, dict[str, int]]:
    """{"llc_references_kernel": n, ...} as {"kernel": {"llc_references": n, ...}, "app": ...}."""
    return {side: {name: events[f"{name}_{side}"] for name in SIDE_EVENTS} for side in SIDES}


def _whole_cpu(before: dict, after: dict | None) -> dict | None:
    """A CPU's whole counts between two reads of its events, with the LLC hit ratio."""
    if not after:
        return None
    d = {e: v - before.get(e, 0) for e, v in after.items()}
    if "llc_misses" in d and "llc_references" in d:
        d["llc_hit_ratio"] = _r(hit_ratio(d["llc_misses"], d["llc_references"]), 4)
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


def _is_wildcard(f: FlowId) -> bool:
    return f.sport == 0 and f.src in ("0.0.0.0", "::")


# what the tracer could not count, and counted (since it started): flows --json's tracer block
LOST_COUNTS = ("napi_map_full", "profile_map_full", "cpumap_enqueue_drops", "cpumap_kthread_drops",
               "recv_calls_lost")


def _dominant_cpus(parts: list[FlowCpuSample]) -> tuple:
    """A flow's kernel, stack and app CPUs with their shares, and its kernel and app seconds by
    CPU, from its entries on several CPUs."""
    kcpu: dict[int, float] = defaultdict(float)
    acpu: dict[int, float] = defaultdict(float)
    kskb: dict[int, float] = defaultdict(float)
    acalls: dict[int, float] = defaultdict(float)
    for p in parts:
        kcpu[p.cpu] += (p.kernel_ns + p.kthread_ns) / NS
        kskb[p.cpu] += p.rx_skbs
        acpu[p.cpu] += p.app_ns / NS
        acalls[p.cpu] += p.app_calls
    kernel_cpu, kshare = _dominant(kcpu)
    stack_cpu, stack_share = _dominant({c: max(0.0, n) for c, n in kskb.items()})
    if stack_cpu is None:
        # no skb of the flow counted (sampled timing counts TCP's by its sockets): the stack
        # ran where its kernel time did, in its cpumap kthread where it was steered (the
        # arrival CPU then runs XDP and, with generic XDP, the skb's linearising)
        kth = {p.cpu: p.kthread_ns for p in parts if p.kthread_ns}
        stack_cpu, stack_share = _dominant(kth) if kth else (kernel_cpu, kshare)
    if kernel_cpu is None:
        kernel_cpu, kshare = stack_cpu, stack_share
    app_cpu, ashare = _dominant(acpu)
    if app_cpu is None:
        app_cpu, ashare = _dominant(acalls)
    return kernel_cpu, kshare, stack_cpu, stack_share, app_cpu, ashare, kcpu, acpu


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
                                     for c in after.cpus))


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
    for fid in [f for f in per_flow if _is_wildcard(f)]:
        peers = [f for f in per_flow if not _is_wildcard(f) and
                 (f.proto, f.dst, f.dport) == (fid.proto, fid.dst, fid.dport)]
        if len(peers) == 1:
            per_flow[peers[0]].extend(replace(s, flow=peers[0], rx_bytes=0, rx_packets=0, rx_skbs=0,
                                              kernel_ns=0, kthread_ns=0, llc_kernel=0)
                                      for s in per_flow.pop(fid))
    return per_flow


def _flow_report(fid: FlowId, parts: list[FlowCpuSample], duration: float, topo: Topology,
                 caps: Capabilities, napi, placements: dict[tuple, Placement]) -> FlowReport:
    """One flow's report from its per-CPU deltas PARTS; PLACEMENTS caches each pair's class."""
    llc = caps.llc.available
    per_flow_events = caps.counters_per_flow.available
    sampled = caps.mode == "sampled"
    t = _summed(parts)
    if len(parts) == 1:
        # one CPU for everything: its shares are whole (the loop below, without its dicts)
        p, cpu = t, t.cpu
        ks, as_ = (p.kernel_ns + p.kthread_ns) / NS, p.app_ns / NS
        kcpu, acpu = ({cpu: ks} if ks else {}), ({cpu: as_} if as_ else {})
        kernel_cpu = cpu if ks > 0 else None
        stack_cpu = cpu if p.rx_skbs > 0 or p.kthread_ns > 0 else kernel_cpu
        app_cpu = cpu if as_ > 0 or p.app_calls > 0 else None
        kshare, stack_share, ashare = (None if c is None else 1.0
                                       for c in (kernel_cpu, stack_cpu, app_cpu))
        if kernel_cpu is None:
            kernel_cpu, kshare = stack_cpu, stack_share
        reader = p if p.app_pid else None
    else:
        kernel_cpu, kshare, stack_cpu, stack_share, app_cpu, ashare, kcpu, acpu = \
            _dominant_cpus(parts)
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
            app_seconds=(c.app_ns - b.app_ns) / NS,
            llc_misses_kernel=c.llc_kernel - b.llc_kernel if llc else None,
            llc_misses_app=c.llc_app - b.llc_app if llc else None,
            rx_drops=c.rx_drops - b.rx_drops,
            napi_thread_seconds=(c.napi_thread_ns - b.napi_thread_ns) / NS,
            hardirq_seconds=(c.hardirq_ns - b.hardirq_ns) / NS,
            hardirqs=c.hardirqs - b.hardirqs,
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

    def __call__(self) -> Snapshot:
        now = self.tracer.sample()
        snap = build_snapshot(self.last, now, self.topo, self.tracer.capabilities)
        self.last = now
        snap = self.memory.update(snap) if self.memory else snap
        # DEVICES: attach_devices' lookup, for consumers that weigh the NIC's place (policies);
        # WORKLOADS: attach_workloads', for those that show or match readers by workload
        if self.workloads:
            snap = attach_workloads(snap, self.workloads)
        return attach_devices(snap, self.topo, self.devices) if self.devices else snap

    def total(self) -> Snapshot:
        return build_snapshot(self.first, self.last, self.topo, self.tracer.capabilities)


PLACEMENT_HALF_LIFE = 5.0   # seconds


class PlacementMemory:
    """A flow's dominant CPUs and class from its recent past, for readers of many short intervals
    (the exporter at every scrape). A sampled tracer gives a flow that takes 6% of a CPU about six
    samples a second at 99 Hz; when its kernel work is split between two CPUs (an ACK-clocked
    sender on the reader's CPU sends, and so receives, part of it there), one second's dominant
    CPU can flip on a sample or two, and the flow's bytes would move to another class with it.
    Here each flow's per-CPU seconds decay with a half-life of HALF_LIFE seconds, and each
    interval is classified by that decayed sum: a real move (steer pin) shows within a few
    half-lives, sampling noise does not. The stack CPU is remembered as votes: each interval
    gives its stack CPU the flow's kernel seconds of that interval (its share is then that of
    the decayed votes). A flow absent from an interval (idle, or gone) loses its past: the memory
    holds no more flows than the last snapshot, however many connections a second come and go."""

    def __init__(self, topo: Topology, half_life: float = PLACEMENT_HALF_LIFE):
        self.topo, self.half_life = topo, half_life
        # flow -> (kernel seconds by CPU, app seconds by CPU, stack votes by CPU), decayed to
        # the last snapshot
        self._past: dict[FlowId, tuple[dict[int, float], ...]] = {}

    @staticmethod
    def _decayed(weights: dict[int, float], factor: float) -> dict[int, float]:
        return {c: s * factor for c, s in weights.items() if s * factor > 1e-9}

    def update(self, snap: Snapshot) -> Snapshot:
        """SNAP with each flow's kernel/app CPU, shares and class taken from its decayed past
        plus this interval; the memory moves on by SNAP's duration."""
        factor = 0.5 ** (snap.duration / self.half_life)
        flows, past = [], {}
        for f in snap.flows:
            votes = {f.stack_cpu: f.kernel_seconds} \
                if f.stack_cpu is not None and f.kernel_seconds > 0 else {}
            known = self._past.get(f.flow)
            if known is None:
                # no past: the interval's own CPUs and class stand (most flows, under
                # connection churn, are new at every read)
                past[f.flow] = (f.kernel_cpus, f.app_cpus, votes)   # read, never changed
                flows.append(f)
                continue
            kernel, app, stack = (self._decayed(d, factor) for d in known)
            for mine, now in ((kernel, f.kernel_cpus), (app, f.app_cpus), (stack, votes)):
                for c, s in now.items():
                    mine[c] = mine.get(c, 0.0) + s
            past[f.flow] = (kernel, app, stack)
            kernel_cpu, kshare = _dominant(kernel)
            app_cpu, ashare = _dominant(app)
            stack_cpu, sshare = _dominant(stack)
            if kernel_cpu is None:   # no time yet: the interval's own guess (its stack CPU)
                kernel_cpu, kshare = f.kernel_cpu, f.kernel_cpu_share
            if app_cpu is None:      # no time yet: where the interval's reads were
                app_cpu, ashare = f.app_cpu, f.app_cpu_share
            if stack_cpu is None:    # no kernel time yet: the interval's own
                stack_cpu, sshare = f.stack_cpu, f.stack_cpu_share
            flows.append(replace(f, kernel_cpu=kernel_cpu, kernel_cpu_share=kshare,
                                 app_cpu=app_cpu, app_cpu_share=ashare,
                                 stack_cpu=stack_cpu, stack_cpu_share=sshare,
                                 placement=classify(stack_cpu, app_cpu, self.topo)))
        self._past = past
        return replace(snap, flows=flows)


@dataclass(slots=True)
class FlowTotal:
    """A flow's counts since its first entry in the tracer's map."""
    rx_bytes: int = 0
    kernel_ns: int = 0   # NET_RX softirq and cpumap kthread
    app_ns: int = 0
    rx_drops: int = 0
    kernel_samples: int = 0
    app_samples: int = 0

    def add(self, e: FlowCpuSample) -> None:
        self.rx_bytes += e.rx_bytes
        self.kernel_ns += e.kernel_ns + e.kthread_ns
        self.app_ns += e.app_ns
        self.rx_drops += e.rx_drops
        self.kernel_samples += e.kernel_samples
        self.app_samples += e.app_samples

    def absorb(self, other: "FlowTotal") -> None:
        self.rx_bytes += other.rx_bytes
        self.kernel_ns += other.kernel_ns
        self.app_ns += other.app_ns
        self.rx_drops += other.rx_drops
        self.kernel_samples += other.kernel_samples
        self.app_samples += other.app_samples


SERVICE_RETENTION = 600.0   # seconds a service with no flow left keeps its totals
MAX_RETIRED_SERVICES = 4096  # and at most this many of them


EPHEMERAL = "ephemeral"   # the dport of a service series that sums this host's client flows


def ephemeral_ports(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> range:
    """The ports connect() picks local ports from (the kernel's default where unreadable)."""
    try:
        low, high = (int(v) for v in open(path).read().split())
        return range(low, high + 1)
    except (OSError, ValueError):
        return range(32768, 61000)


class ServiceTotals:
    """Flows' totals summed by (proto, dst, dport): the receiving service, without the peer's
    address and port, whose series would come and go with every connection. The replies this
    host receives as a client arrive on a local port that changes with every connection too: a
    flow to a port of the ephemeral range from one outside it is summed under dport "ephemeral".
    A flow that is gone leaves its counts in its service's total; a service with no flow left is
    forgotten after SERVICE_RETENTION seconds (its counters then start again from zero, which
    rate() reads as a reset)."""

    def __init__(self, ephemeral: range | None = None, max_retired: int | None = None):
        self.ephemeral = ephemeral_ports() if ephemeral is None else ephemeral
        self.max_retired = MAX_RETIRED_SERVICES if max_retired is None else max_retired
        self.evicted = 0   # retired services forgotten early: more of them than max_retired
        self._retired: dict[tuple, FlowTotal] = {}
        self._seen: dict[tuple, float] = {}

    def fold(self, current: dict[tuple, FlowTotal], gone: dict[tuple, FlowTotal],
             now: float) -> dict[tuple, FlowTotal]:
        """Each series' total as of NOW: CURRENT, its flows' totals, plus what its flows that
        went away had counted (GONE: those gone since the last call, with their last totals)."""
        for k, t in gone.items():
            self._retired.setdefault(k, FlowTotal()).absorb(t)
        out: dict[tuple, FlowTotal] = defaultdict(FlowTotal, current)
        for k in list(self._retired):
            if k in current:
                self._seen[k] = now
            elif now - self._seen.setdefault(k, now) > SERVICE_RETENTION:
                del self._retired[k], self._seen[k]
                continue
            out[k].absorb(self._retired[k])   # CURRENT's own: the caller's to give
        if len(self._retired) > self.max_retired:
            # a port scan makes a service of every port it touched: the longest unseen go first
            old = sorted(self._retired, key=lambda k: self._seen.get(k, now))
            for k in old[:len(self._retired) - self.max_retired]:
                del self._retired[k]
                self._seen.pop(k, None)
                self.evicted += 1
        return dict(out)


def workload_key(path: str | None, w: Workload | None) -> tuple[str, str, str, str] | None:
    """The series key of a reader's workload: (workload, namespace, pod, container), the first
    its label (steer.model.workloads) or, where the path names nothing known, the cgroup path;
    None where the cgroup is not known."""
    if not path:
        return None
    if w is None:
        return path, "", "", ""
    return w.label or path, w.namespace or "", w.pod or "", w.container or ""


class WorkloadTotals(ServiceTotals):
    """Flows' totals summed by the reader's workload (workload_key): the flows of a pod, a
    container or a unit, whose series last as long as it does. A flow counts from the first
    read in which its reader's cgroup is known, whole, and under that workload for good (a
    counter that moved between series would read as a reset); a flow whose reader was never
    seen (the ACKs of what this host sends, a socket nobody reads) is in no workload's series.
    Workloads with no flow left are kept and forgotten as services are."""

    def __init__(self, max_retired: int | None = None):
        super().__init__(ephemeral=range(0), max_retired=max_retired)
        self._keys: dict[bytes, tuple] = {}   # a flow (its key's bytes) -> its workload

    def learn(self, flow: bytes, key: tuple | None) -> None:
        if key is not None and flow not in self._keys:
            self._keys[flow] = key

    def knows(self, flow: bytes) -> bool:
        return flow in self._keys

    def key(self, flow: bytes) -> tuple | None:
        return self._keys.get(flow)

    def forget(self, flow: bytes) -> tuple | None:
        """FLOW is gone: its workload (its counts stay in that workload's retired total)."""
        return self._keys.pop(flow, None)
