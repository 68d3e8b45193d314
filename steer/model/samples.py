"""What the tracer hands out: flows, their per-CPU counters, per-CPU totals and what the kernel
allowed. Plain data, no BPF: the modules that read samples (flows, report, policies, auto, the
exporter's collector) import this, not the loader."""
from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from steer.model.capabilities import Capabilities

PROTO_NUMBERS = {"tcp": 6, "udp": 17}   # the transports steer traces and steers
PROTO_NAMES = {number: name for name, number in PROTO_NUMBERS.items()}


def proto_name(number: int) -> str:
    return PROTO_NAMES.get(number, str(number))


def address_text(raw, family: int) -> str:
    """An address as the BPF maps hold it (16 bytes, an IPv4 one in the first 4), as text."""
    b = bytes(raw)
    if family == 4:   # the same text as ipaddress gives, at a twentieth of its cost
        return socket.inet_ntop(socket.AF_INET, b[:4])
    return str(ipaddress.IPv6Address(b))


class FlowId(NamedTuple):
    """Receive-direction 5-tuple: src is the remote peer, dst this host. A named tuple, not a
    dataclass: it keys every per-flow dict, and tuples of interned strings hash fast."""
    proto: str
    src: str
    sport: int
    dst: str
    dport: int

    def __str__(self):
        fmt = lambda a, p: f"[{a}]:{p}" if ":" in a else f"{a}:{p}"  # noqa: E731
        return f"{self.proto} {fmt(self.src, self.sport)} -> {fmt(self.dst, self.dport)}"


@dataclass(frozen=True, slots=True)
class FlowCpuSample:
    """Cumulative counters of one flow on one CPU since the tracer started."""
    flow: FlowId
    cpu: int
    rx_bytes: int = 0
    rx_packets: int = 0
    rx_skbs: int = 0
    redirected_skbs: int = 0
    kernel_ns: int = 0
    kthread_ns: int = 0
    app_bytes: int = 0
    app_calls: int = 0
    app_ns: int = 0
    app_nested_ns: int = 0
    llc_kernel: int = 0
    llc_app: int = 0
    rx_drops: int = 0
    # the other PMU events per side (sampled timing): LLC references, instructions, cycles
    refs_kernel: int = 0
    refs_app: int = 0
    instructions_kernel: int = 0
    instructions_app: int = 0
    cycles_kernel: int = 0
    cycles_app: int = 0
    # sampled timing: the samples its kernel (with kthread) and app time rest on
    kernel_samples: int = 0
    app_samples: int = 0
    last_seen_ns: int = 0
    app_pid: int = 0
    app_comm: str = ""
    # where the flow's packets come in (0: not known): device index in the network namespace
    # whose inode is rx_netns, the device's RX queue + 1, the NAPI instance
    rx_ifindex: int = 0
    rx_netns: int = 0
    rx_queue: int = 0
    rx_napi_id: int = 0
    last_drop_reason: str = ""  # why the kernel dropped the flow's latest dropped skb on this CPU
    app_cgroup: int = 0         # the reader's cgroup v2 id (0: not known)


class NapiId(NamedTuple):
    """A NAPI instance: its device (index in the network namespace whose inode is netns) and its
    napi_id (0: not hashed for busy polling); all zero: the backlog (RPS, netif_rx, loopback)."""
    netns: int
    ifindex: int
    napi_id: int


class NapiCounts(NamedTuple):
    polls: int = 0
    packets: int = 0
    full_polls: int = 0   # polls that used their whole budget


@dataclass(frozen=True, slots=True)
class CpuSample:
    cpu: int
    net_rx_events: int = 0
    net_rx_ns: int = 0
    net_rx_unattributed_ns: int = 0
    kthread_ns: int = 0
    kthread_unattributed_ns: int = 0
    softirq_ns: int = 0
    softirq_llc: int = 0
    app_ns: int = 0
    app_nested_ns: int = 0
    llc_kernel: int = 0
    llc_app: int = 0
    flow_inserts: int = 0
    flow_failures: int = 0
    untimed_skbs: int = 0
    samples: int = 0
    samples_kernel_mode: int = 0
    rx_drops: int = 0
    refs_kernel: int = 0
    refs_app: int = 0
    instructions_kernel: int = 0
    instructions_app: int = 0
    cycles_kernel: int = 0
    cycles_app: int = 0
    napi_thread_ns: int = 0   # of net_rx_ns: threaded NAPI kthreads
    hardirq_ns: int = 0
    hardirqs: int = 0
    backlog_polls: int = 0       # also in TraceSample.napi, as the all-zero NapiId
    backlog_packets: int = 0
    backlog_full_polls: int = 0
    napi_map_full: int = 0           # lost, and counted: polls beyond napi_polls' entries,
    profile_map_full: int = 0        # samples beyond profile's,
    cpumap_enqueue_drops: int = 0    # frames a cpumap's full queue dropped (redirecting CPU),
    cpumap_kthread_drops: int = 0    # frames a cpumap kthread dropped (target CPU),
    recv_calls_lost: int = 0         # receive calls the kprobe fallback could not count
    kthread_softirq_ns: int = 0  # of softirq_ns: vectors but NET_RX inside receive kthreads
    kthread_net_rx_ns: int = 0   # of net_rx_ns: NET_RX softirqs inside receive kthreads
    samples_withheld: int = 0    # of samples: expiries the kernel ran no program for, counted
    samples_withheld_unknown: int = 0   # from the timer; those not charged (not in samples)
    net_rx_samples: int = 0      # of samples: those net_rx_ns rests on


@dataclass(frozen=True)
class TraceSample:
    """One read of all maps: cumulative counters, and when they were read."""
    monotonic_ns: int
    entries: dict[tuple[FlowId, int], FlowCpuSample]
    cpus: tuple[CpuSample, ...]
    live_entries: int
    max_entries: int
    expired: int = 0   # entries steer removed for being idle, since the tracer started
    seq: int = 0       # this tracer's read number
    changed: tuple = ()   # keys new or updated since read seq - 1; the others are the same objects
    # CPU -> PMU event -> count since start of all the CPU ran (steer.trace.counters.EVENTS; only
    # those counted)
    cpu_events: dict = field(default_factory=dict)
    # NapiId -> CPU -> NapiCounts since start (CPUs with polls only)
    napi: dict = field(default_factory=dict)
    # the flow map's entries as arrays (steer.model.flowarrays.FlowArrays) in place of
    # entries, from Tracer.sample_arrays()
    arrays: object = None

    @property
    def evictions(self) -> int:
        """Entries the LRU pushed out: every insert that is neither there nor expired by us."""
        return max(0, sum(c.flow_inserts for c in self.cpus) - self.live_entries - self.expired)


class TraceSource(Protocol):
    """What the readers of samples (the exporter's collector, the auto loop) need of a tracer:
    tracer.Tracer is one, and the unit tests give fakes."""
    capabilities: Capabilities

    def sample(self) -> TraceSample:
        """Cumulative counters since the start; may be called from several threads."""

    def program_stats(self) -> dict[str, tuple[int, int]]:
        """BPF program name -> (run time ns, runs), where the kernel counts them."""
