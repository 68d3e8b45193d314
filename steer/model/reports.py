"""What `steer flows`, `top`, `watch`, the exporter and the policies read of an interval: each flow's
report, each CPU's, the snapshot that holds them, and their JSON (null where the kernel refused
what measures a figure)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from steer.model.capabilities import Capabilities
from steer.model.classify import Placement
from steer.model.irqs import DeviceIrq, queue_irq
from steer.model.latency import NO_DELAYS, Delays
from steer.model.samples import FlowCpuSample, FlowId, NapiCounts
from steer.model.topology import Topology, nic_local, nic_sockets
from steer.model.units import per_gb, hit_ratio
from steer.model.workloads import Workload


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
    # --latency: its arrival-to-read delays over the snapshot's interval (None: not asked for)
    delays: Delays | None = None

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
        if self.delays is not None:
            out["latency"] = self.delays.as_json()
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
    "kthread_time": ("kthread_seconds", "kthread_unattributed_seconds", "kthread_softirq_seconds",
                     "kthread_net_rx_seconds"),
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
    # softirqs other than NET_RX (timers, tasklets) that receive kthreads ran: the scheduler
    # counts them in the kthread's time, steer in no flow's
    kthread_softirq_seconds: float = 0.0
    # of net_rx_seconds, the NET_RX softirqs receive kthreads ran: in the kthread's time too
    kthread_net_rx_seconds: float = 0.0
    # of kthread_seconds, what no flow could be charged with: with the flows' kthread time on
    # this CPU, the whole (as net_rx_unattributed_seconds is of net_rx_seconds)
    kthread_unattributed_seconds: float = 0.0
    # sampled timing (None: not sampled): the clock samples the CPU's times rest on; of them,
    # those the kernel ran no program for (while the CPU idled, on some kernels), counted from
    # the timer itself; and such expiries where what the CPU did is not known, charged to nothing
    samples: int | None = None
    samples_withheld: int | None = None
    samples_withheld_unknown: int | None = None
    net_rx_samples: int | None = None    # of samples: those net_rx_seconds rests on

    def as_json(self, caps: Capabilities | None = None) -> dict:
        out = {"cpu": self.cpu, "net_rx_events": self.net_rx_events, "rx_drops": self.rx_drops,
                "net_rx_seconds": _r(self.net_rx_seconds),
                "net_rx_unattributed_seconds": _r(self.net_rx_unattributed_seconds),
                "napi_thread_seconds": _r(self.napi_thread_seconds),
                "kthread_seconds": _r(self.kthread_seconds),
                "kthread_unattributed_seconds": _r(self.kthread_unattributed_seconds),
                "kthread_softirq_seconds": _r(self.kthread_softirq_seconds),
                "kthread_net_rx_seconds": _r(self.kthread_net_rx_seconds),
                "app_seconds": _r(self.app_seconds),
                "hardirq_seconds": _r(self.hardirq_seconds), "hardirqs": self.hardirqs,
                "napi_polls": self.napi.polls, "napi_packets": self.napi.packets,
                "napi_full_polls": self.napi.full_polls,
                "llc_misses_kernel": self.llc_misses_kernel, "llc_misses_app": self.llc_misses_app,
                "events": self.events, "whole_cpu": self.whole_cpu,
                "samples": self.samples, "samples_withheld": self.samples_withheld,
                "samples_withheld_unknown": self.samples_withheld_unknown,
                "net_rx_samples": self.net_rx_samples}
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
    ended: float | None = None   # CLOCK_MONOTONIC seconds of the read that ended the interval

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


def attach_delays(snap: Snapshot, by_flow: dict | None) -> Snapshot:
    """SNAP with each flow's arrival-to-read delays from BY_FLOW (FlowId -> Delays, --latency;
    a flow none of whose sampled skbs was read in the interval: no samples); None: not asked."""
    if by_flow is None:
        return snap
    return replace(snap, flows=[replace(f, delays=by_flow.get(f.flow, NO_DELAYS))
                                for f in snap.flows])


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
