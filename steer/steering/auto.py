"""The automatic steering loop (run): each interval, ask the policy, damp its answers (AutoSteer),
apply the changes.

Hysteresis: a flow moves only after the policy has asked for the same new CPU in CONFIRM
consecutive intervals, and not within HOLD seconds of its previous move, so flows do not flap
between CPUs whose load the moves themselves change. A policy that raises keeps every flow where it
is. Rules of flows gone for EXPIRE intervals are removed. A rule whose CPU goes offline is removed
at once, with a warning: its flow falls back to the CPU it arrives on until the policy, which
only places flows on online CPUs, moves it again.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

from steer.model.flowspec import FlowSpec
from steer.model.flows import Intervals, Snapshot
from steer.steering.policies import Decision, Policy, stack_cpu_of
from steer.model.topology import Topology, online_cpus, read_topology
from steer.model.samples import FlowId


class Steerer(Protocol):
    def pin(self, spec: FlowSpec, cpu: int) -> tuple[int | None, int]: ...
    def unpin(self, spec: FlowSpec) -> int: ...


@dataclass(frozen=True)
class Change:
    flow: FlowId
    old_cpu: int | None
    new_cpu: int | None
    reason: str


def exact_spec(f: FlowId) -> FlowSpec:
    return FlowSpec(proto=f.proto, src=f.src, sport=f.sport, dst=f.dst, dport=f.dport)


@dataclass
class AutoSteer:
    policy: Policy
    steerer: Steerer | None          # None: dry run
    topo: Topology
    confirm: int = 2
    hold: float = 10.0
    expire: int = 10
    # log(message, **fields): one line per event; a move also gives its fields (flow, old_cpu,
    # new_cpu, reason, dry_run) for structured logs
    log: Callable[..., None] = print
    placed: dict[FlowId, int] = field(default_factory=dict)       # the rules we installed
    moves: int = 0
    _pending: dict[FlowId, tuple[int, int]] = field(default_factory=dict)
    _moved_at: dict[FlowId, float] = field(default_factory=dict)
    _absent: dict[FlowId, int] = field(default_factory=dict)

    def step(self, snap: Snapshot, now: float | None = None) -> list[Change]:
        """One interval; self.topo must say which CPUs are online now (the caller re-reads it
        when that changes)."""
        now = time.monotonic() if now is None else now
        online = set(self.topo.online)
        changes = []
        for flow, cpu in list(self.placed.items()):
            if cpu not in online:
                self.log(f"warning: CPU {cpu} of the rule for {flow} went offline")
                changes.append(self._apply(Change(flow, cpu, None, f"CPU {cpu} is offline"), now))
        try:
            decisions = list(self.policy(snap, self.topo))
        except Exception as e:  # noqa: BLE001 - a broken policy must not stop the loop
            self.log(f"policy error: {type(e).__name__}: {e}; keeping the last good placement")
            return [c for c in changes if c is not None]
        seen = {f.flow for f in snap.flows}
        # where each flow is now: its rule, else where its packets go up the stack (stack_cpu_of)
        now_on = {f.flow: stack_cpu_of(f) for f in snap.flows}
        wanted: dict[FlowId, Decision] = {}
        for d in decisions:
            if not isinstance(d, Decision):
                self.log(f"policy returned {d!r}, not a Decision; ignored")
                continue
            if d.cpu not in online:
                self.log(f"policy asked for CPU {d.cpu} for {d.flow}, which is not online; ignored")
                continue
            wanted[d.flow] = d
        # a move needs the same answer in a row: a flow not asked for this time starts again,
        # which also keeps these to the flows of the last interval however many come and go
        self._pending = {f: p for f, p in self._pending.items() if f in wanted}
        self._moved_at = {f: t for f, t in self._moved_at.items() if now - t < self.hold}
        for flow, d in wanted.items():
            current = self.placed.get(flow, now_on.get(flow))
            if d.cpu == current:
                self._pending.pop(flow, None)
                continue
            cpu, count = self._pending.get(flow, (d.cpu, 0))
            count = count + 1 if cpu == d.cpu else 1
            self._pending[flow] = (d.cpu, count)
            if count < self.confirm:
                continue
            if now - self._moved_at.get(flow, float("-inf")) < self.hold:
                continue
            changes.append(self._apply(Change(flow, current, d.cpu, d.reason), now))
        for flow in list(self.placed):
            self._absent[flow] = 0 if flow in seen else self._absent.get(flow, 0) + 1
            if self._absent[flow] >= self.expire:
                changes.append(self._apply(Change(flow, self.placed[flow], None, "flow ended"), now))
        return [c for c in changes if c is not None]

    def _apply(self, c: Change, now: float) -> Change | None:
        spec = exact_spec(c.flow)
        try:
            if self.steerer is not None:
                if c.new_cpu is None:
                    self.steerer.unpin(spec)
                else:
                    self.steerer.pin(spec, c.new_cpu)
        except Exception as e:  # noqa: BLE001 - one failed move must not stop the others
            self.log(f"could not move {c.flow} to CPU {c.new_cpu}: {e}")
            return None
        if c.new_cpu is None:
            self.placed.pop(c.flow, None)
            self._absent.pop(c.flow, None)
        else:
            self.placed[c.flow] = c.new_cpu
            self._moved_at[c.flow] = now
            self.moves += 1
        self._pending.pop(c.flow, None)
        old = "-" if c.old_cpu is None else c.old_cpu
        new = "unsteered" if c.new_cpu is None else f"CPU {c.new_cpu}"
        dry = " (dry run)" if self.steerer is None else ""
        self.log(f"{c.flow}: kernel CPU {old} -> {new}: {c.reason}{dry}", flow=str(c.flow),
                 old_cpu=c.old_cpu, new_cpu=c.new_cpu, reason=c.reason,
                 dry_run=self.steerer is None)
        return c


class AutoStopped(Exception):
    """The loop cannot go on; str() says why, in one line."""


def run(engine: AutoSteer, intervals: Intervals, *, period: float, duration: float | None = None,
        detached: Callable[[], str | None] = lambda: None, sysfs: str = "/sys") -> None:
    """The loop of `steer auto`: every PERIOD seconds, ENGINE steps on the snapshot of the
    interval, for DURATION seconds (None: until KeyboardInterrupt, which returns). Before each
    step, DETACHED() says whether the steered device is gone (AutoStopped: nothing is left to
    steer), and the topology is read again when CPUs went on- or offline, so that the engine
    and the policy place flows only on CPUs that are online."""
    end = None if duration is None else time.monotonic() + duration
    try:
        while end is None or time.monotonic() < end:
            time.sleep(period if end is None else max(0.0, min(period, end - time.monotonic())))
            gone = detached()
            if gone:
                raise AutoStopped(f"stopping: {gone}, so there is nothing left to steer")
            if online_cpus(sysfs) != engine.topo.online:
                engine.topo = intervals.topo = read_topology(sysfs)
            engine.step(intervals())
    except KeyboardInterrupt:
        pass
