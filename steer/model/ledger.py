"""What the exporter keeps of the flow map from one scrape to the next, as arrays.

Each scrape folds a read of the map (FlowArrays) into: every flow's totals since its first entry
(what FlowTotal counts), and for the flows with traffic since the previous read, their counts in
that interval, their kernel and app CPUs from their decayed recent past, and their class. The
figures are those of build_snapshot and PlacementMemory (steer.model.flows and .placement, which
`steer flows`, `top` and `auto` use), by the rules of steer.model.interval;
tests/unit/test_ledger.py holds the two to the same numbers. Numpy over
rows, not an object per entry: a map full of new connections (16,384 entries) folds in tens of
milliseconds and keeps ~400 bytes an entry between reads (steer.model.flowarrays says why).
"""
from __future__ import annotations

from dataclasses import dataclass

from steer.model.classify import CLASSES, Placement, classify
from steer.model.flowarrays import (FLOW, KEY, FlowArrays, cpus_of, flow_fields, flows_of)
from steer.model.interval import (ACTIVITY, COUNTERS, WILDCARD_DROPS, dominant_rows,
                                  first_named_rows, interval_cpus, kernel_time, restarted, wildcard_rows)
from steer.model.placement import PLACEMENT_HALF_LIFE
from steer.model.numeric import np
from steer.model.topology import Topology

NS = 1e9
AT = {name: i for i, name in enumerate(COUNTERS)}   # a counter's column in the counts matrices
RX, SKBS, KT = AT["rx_bytes"], AT["rx_skbs"], AT["kthread_ns"]
CALLS, ANS, DROPS = AT["app_calls"], AT["app_ns"], AT["rx_drops"]
_ACTIVITY = [AT[name] for name in ACTIVITY]
_RX_SIDE = [AT[name] for name in WILDCARD_DROPS]
# FlowTotal's fields, in its order
TOTALS = ("rx_bytes", "kernel_ns", "app_ns", "rx_drops", "kernel_samples", "app_samples")
_CLASS_INDEX = {cls: i for i, cls in enumerate(CLASSES)}


def _totals(counts: np.ndarray) -> np.ndarray:
    """(n, len(TOTALS)) of (n, len(COUNTERS)) counts: kernel time is softirq + kthread."""
    c = counts
    return np.stack([c[:, RX], kernel_time(lambda name: c[:, AT[name]]), c[:, ANS], c[:, DROPS],
                     c[:, AT["kernel_samples"]], c[:, AT["app_samples"]]], axis=1)


def find(sorted_keys: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of KEYS is in SORTED_KEYS, and whether it is there at all."""
    if not len(sorted_keys) or not len(keys):
        return np.zeros(len(keys), np.int64), np.zeros(len(keys), bool)
    at = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return at, sorted_keys[at] == keys


def _group_sum(group: np.ndarray, n: int, values: np.ndarray) -> np.ndarray:
    """Rows of VALUES summed by GROUP (0 .. n-1), exactly (integers stay integers)."""
    out = np.zeros((n,) + values.shape[1:], values.dtype)
    np.add.at(out, group, values)
    return out


def _per_cpu(group: np.ndarray, cpu: np.ndarray, *weights: np.ndarray):
    """Rows with the same (group, CPU) summed: group, CPU and each weight, one row a pair."""
    if not len(group):
        return (group, cpu) + weights
    width = int(cpu.max()) + 1
    code, inv = np.unique(group * width + cpu, return_inverse=True)
    inv = inv.ravel()
    return (code // width, code % width,
            *(np.bincount(inv, weights=w, minlength=len(code)) for w in weights))


@dataclass(frozen=True)
class Fold:
    """One read folded in. flows: every flow with an entry in the map (FLOW, sorted); totals:
    theirs since their first entry (TOTALS). active: the flows (indices into flows) with traffic
    in the interval, with their counts in it (COUNTERS), seconds, CPUs (-1: none), class (an
    index into CLASSES: the stack CPU's against the app CPU's) and reader (the entry of the process that read it most: pid, comm,
    cgroup id; 0 and b"" where none). gone, gone_totals: the flows of the previous read no
    longer in this one, with their last totals."""
    duration: float
    flows: np.ndarray
    totals: np.ndarray
    active: np.ndarray
    counts: np.ndarray
    kernel_seconds: np.ndarray
    app_seconds: np.ndarray
    kernel_cpu: np.ndarray
    stack_cpu: np.ndarray
    app_cpu: np.ndarray
    cls: np.ndarray
    reader_pid: np.ndarray
    reader_comm: np.ndarray
    reader_cgroup: np.ndarray
    gone: np.ndarray
    gone_totals: np.ndarray

    def rate_bps(self) -> np.ndarray:
        """The active flows' receive rates over the interval (0 for the first read)."""
        if self.duration <= 0:
            return np.zeros(len(self.active))
        return self.counts[:, RX] * 8 / self.duration


class FlowLedger:
    """Folds successive reads of the flow map (fold()): see the module's text."""

    def __init__(self, topo: Topology, half_life: float = PLACEMENT_HALF_LIFE):
        self.topo, self.half_life = topo, half_life
        # the previous read, sorted by key: its keys, their flows and counts
        self._keys = np.empty(0, KEY)
        self._flow = np.empty(0, FLOW)
        self._counts = np.empty((0, len(COUNTERS)), np.int64)
        # what entries gone from the map counted, by flow, while the flow has others
        self._retired_flows = np.empty(0, FLOW)
        self._retired = np.empty((0, len(TOTALS)), np.int64)
        # the flows of the previous read and their totals
        self._flows = np.empty(0, FLOW)
        self._flow_totals = np.empty((0, len(TOTALS)), np.int64)
        # the last interval's flows' kernel and app seconds and stack votes by CPU, decayed
        # (PlacementMemory)
        self._past_flow = np.empty(0, FLOW)
        self._past_cpu = np.empty(0, np.int64)
        self._past_kernel = np.empty(0)
        self._past_app = np.empty(0)
        self._past_stack = np.empty(0)
        self._placements: dict[tuple[int, int], Placement] = {}

    def placement(self, stack_cpu: int, app_cpu: int) -> Placement:
        """The class of a (stack CPU, app CPU) pair, -1 for none, classified once."""
        key = (stack_cpu, app_cpu)
        p = self._placements.get(key)
        if p is None:
            p = self._placements[key] = classify(None if stack_cpu < 0 else stack_cpu,
                                                 None if app_cpu < 0 else app_cpu, self.topo)
        return p

    def fold(self, read: FlowArrays, duration: float) -> Fold:
        order = np.argsort(read.keys)
        keys, values = read.keys[order], read.values
        # the counters, gathered column by column in key order: not a copy of whole values
        counts = np.empty((len(keys), len(COUNTERS)), np.int64)
        for i, name in enumerate(COUNTERS):
            counts[:, i] = values[name][order]
        flow, cpu = flows_of(keys), cpus_of(keys)
        deltas, before, restarted, gone = self._deltas(keys, counts)
        flows, flow_at, totals, gone_flows, gone_totals = self._fold_totals(
            flow, counts, before, restarted, gone)
        self._keys, self._flow, self._counts = keys, flow, counts

        # the interval: its entries with traffic, by flow
        rows = np.flatnonzero((deltas[:, _ACTIVITY] != 0).any(axis=1))
        row_flow, row_counts = flow_at[rows], deltas[rows]
        self._give_wildcards(flows, row_flow, row_counts)
        active, group = np.unique(row_flow, return_inverse=True)
        group = group.ravel()
        n = len(active)
        kernel_s = kernel_time(lambda name: row_counts[:, AT[name]]) / NS
        app_s = row_counts[:, ANS] / NS
        kernel_sum = _group_sum(group, n, kernel_s)
        kernel_cpu, stack_cpu, app_cpu = self._where(
            flows[active], group, cpu[rows], row_counts, kernel_s, app_s, kernel_sum, duration)
        cls = self._classes(stack_cpu, app_cpu)
        reader_pid, reader_comm, reader_cgroup = _readers(
            read, order[rows], row_counts, group, n)
        return Fold(duration, flows, totals, active, _group_sum(group, n, row_counts),
                    kernel_sum, _group_sum(group, n, app_s),
                    kernel_cpu, stack_cpu, app_cpu, cls, reader_pid, reader_comm, reader_cgroup,
                    gone_flows, gone_totals)

    def _deltas(self, keys: np.ndarray, counts: np.ndarray):
        """This read against the previous one: the interval's deltas, the previous counts in this
        read's order, which entries restarted and which of the previous ones are gone. An entry
        whose counts went down was deleted (evicted) and made again in between: it counts from
        zero."""
        at, seen = find(self._keys, keys)
        before = self._counts[at] if len(self._keys) else np.zeros_like(counts)
        before[~seen] = 0
        restart = seen & restarted(lambda name: counts[:, AT[name]],
                                   lambda name: before[:, AT[name]])
        deltas = counts.copy()
        deltas[seen & ~restart] -= before[seen & ~restart]
        gone = np.ones(len(self._keys), bool)
        gone[at[seen]] = False
        return deltas, before, restart, gone

    def _fold_totals(self, flow: np.ndarray, counts: np.ndarray, before: np.ndarray,
                     restarted: np.ndarray, gone: np.ndarray):
        """Each flow's totals since it began (a key is its flow's bytes, then the CPU's, so the
        flows come in key order): what entries gone or made again had counted stays with their
        flow while it lives on. Returns (flows, each entry's flow index, totals, and the flows
        gone since the last read with their last totals)."""
        first = np.r_[True, flow[1:] != flow[:-1]] if len(flow) else np.empty(0, bool)
        flow_at = np.cumsum(first) - 1
        flows = flow[first]
        totals = _group_sum(flow_at, len(flows), _totals(counts))
        retired_flows = np.concatenate([self._retired_flows, flow[restarted], self._flow[gone]])
        retired = np.concatenate([self._retired, _totals(before[restarted]),
                                  _totals(self._counts[gone])])
        where, live = find(flows, retired_flows)
        kept = _group_sum(where[live], len(flows), retired[live])
        totals += kept
        held = kept.any(axis=1)
        self._retired_flows, self._retired = flows[held], kept[held]
        _, still = find(flows, self._flows)
        gone_flows, gone_totals = self._flows[~still], self._flow_totals[~still]
        self._flows, self._flow_totals = flows, totals
        return flows, flow_at, totals, gone_flows, gone_totals

    def _where(self, active_flows: np.ndarray, group: np.ndarray, row_cpu: np.ndarray,
               row_counts: np.ndarray, kernel_s: np.ndarray, app_s: np.ndarray,
               kernel_sum: np.ndarray, duration: float):
        """(kernel CPU, stack CPU, app CPU) of each active flow: the interval's own CPUs
        (steer.model.interval.interval_cpus) weighed with their decayed past
        (PlacementMemory), which is kept for the flows of this interval only; the stack CPU's
        votes are the flow's kernel seconds, to the interval's stack CPU."""
        n = len(active_flows)
        g, c, *weights = _per_cpu(
            group, row_cpu, kernel_s, row_counts[:, SKBS].astype(float),
            row_counts[:, KT].astype(float), app_s, row_counts[:, CALLS].astype(float))
        weight = dict(zip(("kernel_time", "rx_skbs", "kthread_ns", "app_ns", "app_calls"), weights))
        kernel_guess, stack, app_guess = interval_cpus(
            lambda w: dominant_rows(g, c, weight[w], n), first_named_rows)

        factor = 0.5 ** (duration / self.half_life)
        past_group, known = find(active_flows, self._past_flow)
        pk, pa, ps = (p[known] * factor for p in (self._past_kernel, self._past_app,
                                                   self._past_stack))
        pk[pk <= 1e-9], pa[pa <= 1e-9], ps[ps <= 1e-9] = 0.0, 0.0, 0.0
        voters = np.flatnonzero((stack >= 0) & (kernel_sum > 0))
        nothing = np.zeros(len(voters))
        g, c, mk, ma, ms = _per_cpu(
            np.concatenate([past_group[known], g, voters]),
            np.concatenate([self._past_cpu[known], c, stack[voters]]),
            np.concatenate([pk, weight["kernel_time"], nothing]),
            np.concatenate([pa, weight["app_ns"], nothing]),
            np.concatenate([ps, np.zeros(len(g)), kernel_sum[voters]]))
        kernel_cpu = first_named_rows(dominant_rows(g, c, mk, n), kernel_guess)
        app_cpu = first_named_rows(dominant_rows(g, c, ma, n), app_guess)
        stack_cpu = first_named_rows(dominant_rows(g, c, ms, n), stack)
        keep = (mk > 0) | (ma > 0) | (ms > 0)
        self._past_flow, self._past_cpu = active_flows[g[keep]], c[keep]
        self._past_kernel, self._past_app, self._past_stack = mk[keep], ma[keep], ms[keep]
        return kernel_cpu, stack_cpu, app_cpu

    def _classes(self, stack_cpu: np.ndarray, app_cpu: np.ndarray) -> np.ndarray:
        """Each flow's class index, each (stack CPU, app CPU) pair classified once."""
        if not len(stack_cpu):
            return np.empty(0, np.int8)
        width = int(max(stack_cpu.max(initial=0), app_cpu.max(initial=0))) + 2
        pairs, inv = np.unique((stack_cpu + 1) * width + app_cpu + 1, return_inverse=True)
        return np.array([_CLASS_INDEX[self.placement(int(p // width) - 1, int(p % width) - 1).cls]
                         for p in pairs], np.int8)[inv.ravel()]

    @staticmethod
    def _give_wildcards(flows: np.ndarray, row_flow: np.ndarray, row_counts: np.ndarray) -> None:
        """An unconnected UDP socket knows no peer, so its reads are keyed by a wildcard flow
        (no source): they go to the one flow of the interval to that port, where there is one
        (build_snapshot does the same). In place."""
        f = flow_fields(flows)
        wild = wildcard_rows(f)
        if not wild[row_flow].any():
            return
        present = np.unique(row_flow)
        peers = present[~wild[present]]
        for w in np.unique(row_flow[wild[row_flow]]):
            same = peers[(f["proto"][peers] == f["proto"][w]) & (f["family"][peers] == f["family"][w])
                         & (f["dport"][peers] == f["dport"][w])
                         & (f["daddr"][peers] == f["daddr"][w]).all(axis=1)]
            if len(same) == 1:
                mine = row_flow == w
                row_flow[mine] = same[0]
                row_counts[np.ix_(mine, _RX_SIDE)] = 0


def _readers(read: FlowArrays, at: np.ndarray, row_counts: np.ndarray, group: np.ndarray,
             n: int):
    """(pid, comm, cgroup) of each active flow's reader: of its entries with a process (AT: the
    rows' places in the read's own order), most calls, then most time."""
    values = read.values
    pid = values["app_pid"][at]
    readers = np.flatnonzero(pid != 0)
    reader_pid = np.zeros(n, np.int64)
    reader_comm = np.zeros(n, "S16")
    reader_cgroup = np.zeros(n, np.uint64)
    if len(readers):
        o = readers[np.lexsort((-row_counts[readers, ANS], -row_counts[readers, CALLS],
                                group[readers]))]
        best = o[np.r_[True, group[o][1:] != group[o][:-1]]]
        reader_pid[group[best]] = pid[best]
        own = at[best]
        reader_comm[group[best]] = FlowArrays(read.keys[own], values[own]).comms()
        reader_cgroup[group[best]] = values["app_cgroup"][own]
    return reader_pid, reader_comm, reader_cgroup
