"""Flows' counts since they began, and summed by the service or the workload that receives them:
the exporter's counters, whose series outlive the connections they count."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from steer.model.interval import kernel_time
from steer.model.samples import FlowCpuSample
from steer.model.workloads import Workload


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
        self.kernel_ns += kernel_time(e.__getattribute__)
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


class ServiceTotals:
    """Flows' totals summed by (proto, dst, dport): the receiving service, without the peer's
    address and port, whose series would come and go with every connection. The replies this
    host receives as a client arrive on a local port that changes with every connection too: a
    flow to a port of the ephemeral range from one outside it is summed under dport "ephemeral".
    A flow that is gone leaves its counts in its service's total; a service with no flow left is
    forgotten after SERVICE_RETENTION seconds (its counters then start again from zero, which
    rate() reads as a reset)."""

    def __init__(self, ephemeral: range, max_retired: int | None = None):
        self.ephemeral = ephemeral   # the ports connect() picks local ports from
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
