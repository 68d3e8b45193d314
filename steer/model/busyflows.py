"""The auto loop's snapshots: the flows a policy may move, and no object for the others.

A policy acts on flows fast enough for their placement to matter (`steer auto --min-rate`). Under
connection churn (a port scan, a frontend's short connections) nearly every entry of the flow
map is new at every read and nearly none is that fast; building a FlowReport for each took the
auto loop ~0.4 s of CPU at every 2 s interval with the map full of new flows (bench.soak,
2026-11-26). BusyIntervals reads the map as arrays, picks the flows that matter with array
operations, and gives build_snapshot the entries of those flows alone: their figures are the
ones Intervals gives them (tests/unit/test_busyflows.py holds the two to it).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterable

from steer.model.flowarrays import FLOW, FLOW_SIZE, FlowArrays, flow_fields, flows_of, pack_key
from steer.model.flows import build_snapshot
from steer.model.interval import ACTIVITY, restarted, wildcard_rows
from steer.model.ledger import find
from steer.model.numeric import np
from steer.model.reports import Snapshot, attach_devices, attach_workloads
from steer.model.samples import FlowId, TraceSample
from steer.model.topology import Topology


class BusyIntervals:
    """As steer.model.flows.Intervals (the time since the previous call, each call), for a tracer with
    sample_arrays() and entries_of(): each snapshot holds the flows of the interval that
    received FLOOR_BPS or more, those KEEP() names (the flows with a rule, whose rule is
    removed when they go), and what build_snapshot needs to give an unconnected UDP socket's
    reads to the one flow to its port, or to no flow where there are several."""

    def __init__(self, tracer, topo: Topology, floor_bps: float,
                 keep: Callable[[], Iterable[FlowId]] = lambda: (), devices=None, workloads=None):
        self.tracer, self.topo, self.floor, self.keep = tracer, topo, floor_bps, keep
        self.devices, self.workloads = devices, workloads
        self.left_out = 0   # flows of the last interval below the floor, not in its snapshot
        self._last = self._sorted(tracer.sample_arrays())

    @staticmethod
    def _sorted(sample: TraceSample) -> TraceSample:
        a = sample.arrays
        order = np.argsort(a.keys)
        return replace(sample, arrays=FlowArrays(a.keys[order], a.values[order]))

    def __call__(self) -> Snapshot:
        last, now = self._last, self._sorted(self.tracer.sample_arrays())
        self._last = now
        old, new = last.arrays, now.arrays
        at, seen = find(old.keys, new.keys)
        prev = old.values[at] if len(old) else np.zeros(len(new), new.values.dtype)
        v = new.values
        fresh = ~seen | restarted(v.__getitem__, prev.__getitem__)
        active = np.any([np.where(fresh, v[c] != 0, v[c] != prev[c]) for c in ACTIVITY], axis=0) \
            if len(new) else np.zeros(0, bool)
        rx = np.where(fresh, v["rx_bytes"], v["rx_bytes"] - prev["rx_bytes"]).astype(float)

        # by flow (keys sort by their flow's bytes first)
        flow = flows_of(new.keys)
        first = np.r_[True, flow[1:] != flow[:-1]] if len(flow) else np.empty(0, bool)
        flow_at = np.cumsum(first) - 1
        flows = flow[first]
        n = len(flows)
        duration = (now.monotonic_ns - last.monotonic_ns) / 1e9
        bits = np.bincount(flow_at, weights=rx * 8, minlength=n)
        busy = np.bincount(flow_at, weights=active, minlength=n) > 0
        wanted = busy & (bits >= self.floor * duration) if duration > 0 else busy.copy()
        kept = sorted(pack_key(f, 0)[:FLOW_SIZE] for f in self.keep())
        if kept:
            where, hit = find(flows, np.frombuffer(b"".join(kept), FLOW))
            wanted[where[hit]] |= busy[where[hit]]
        self._wildcards(flows, busy, wanted)
        self.left_out = int(busy.sum() - (wanted & busy).sum())

        rows = np.flatnonzero(wanted[flow_at] & active)
        after = self.tracer.entries_of(FlowArrays(new.keys[rows], new.values[rows]))
        had = rows[seen[rows]]   # build_snapshot takes a restarted entry's counts whole
        before = self.tracer.entries_of(FlowArrays(old.keys[at[had]], old.values[at[had]]))
        # seq 0: build_snapshot compares every entry it is given, they are few
        snap = build_snapshot(replace(last, entries=before, seq=0, changed=(), arrays=None),
                              replace(now, entries=after, seq=0, changed=(), arrays=None),
                              self.topo, self.tracer.capabilities)
        if self.workloads:
            snap = attach_workloads(snap, self.workloads)
        return attach_devices(snap, self.topo, self.devices) if self.devices else snap

    @staticmethod
    def _wildcards(flows: np.ndarray, busy: np.ndarray, wanted: np.ndarray) -> None:
        """A wildcard (unconnected UDP socket, no peer) flow with reads, and two of the busy
        flows to its port where there are two or more (then no flow gets its reads, as in
        build_snapshot), else the one. In place."""
        f = flow_fields(flows)
        wild = wildcard_rows(f)
        for w in np.flatnonzero(wild & busy):
            peers = np.flatnonzero(busy & ~wild & (f["proto"] == f["proto"][w])
                                   & (f["family"] == f["family"][w]) & (f["dport"] == f["dport"][w])
                                   & (f["daddr"] == f["daddr"][w]).all(axis=1))
            wanted[w] = True
            wanted[peers[:2]] = True
