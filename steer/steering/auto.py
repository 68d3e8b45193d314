"""The automatic steering loop (run): each interval, ask the policy, damp its answers (AutoSteer),
apply the changes.

Hysteresis: a flow moves only after the policy has asked for the same new CPU in CONFIRM
consecutive intervals, and not within HOLD seconds of its previous move, so flows do not flap
between CPUs whose load the moves themselves change. A policy that raises keeps every flow where it
is. Rules of flows gone for EXPIRE intervals are removed. A rule whose CPU goes offline is removed
at once, with a warning: its flow falls back to the CPU it arrives on until the policy, which
only places flows on online CPUs, moves it again.

Every move is an experiment (steer.steering.verdict): the WINDOW intervals before it are set against
the WINDOW after it (less the one that straddles it), for the moved flow and the flows already on
the CPUs it touched. A move that made things worse in that window and in the next WINDOW again is
reverted (the rule before it is put back) and that CPU is not tried again for that flow for
REVERT_HOLD seconds; one too noisy to judge is kept or reverted as ON_INCONCLUSIVE says. A flow
moves only once it has a before window (its first interval left out: it began somewhere in it), and
not while a trial on any of the CPUs its move would touch is running, so that no two moves are
judged on the same CPU's figures.
"""
from __future__ import annotations

import math
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable, Protocol

from steer.model.flowspec import FlowSpec
from steer.model.flows import Intervals
from steer.model.reports import FlowReport, Snapshot
from steer.steering.policies import Decision, Policy, stack_cpu_of
from steer.steering.expectations import Expectation, SweepExpectations
from steer.steering.verdict import (CONFIDENCE, INCONCLUSIVE, REVERTED, TOLERANCE, Figures,
                                    Trial, confirm, figures_of, judge, spans)
from steer.model.topology import Topology, online_cpus, read_topology
from steer.model.samples import FlowId


class Steerer(Protocol):
    def pin(self, spec: FlowSpec, cpu: int) -> tuple[int | None, int]: ...
    def unpin(self, spec: FlowSpec) -> int: ...


class QueueMover(Protocol):
    """Moves by RX queue on the steered device (steer.steering.methods.QueueSteering)."""
    method: str | None     # the per-queue method the device allows (None: none)

    def queue_of(self, f: FlowReport) -> int | None: ...
    def move(self, queue: int, cpu: int, napi_id: int | None = None) -> str: ...
    def restore(self, queue: int) -> None: ...


@dataclass(frozen=True)
class Change:
    flow: FlowId
    old_cpu: int | None
    new_cpu: int | None
    reason: str
    queue: int | None = None       # moved by its RX queue (QueueMover), not by an XDP rule
    napi_id: int | None = None     # that queue's NAPI, as the flow's packets showed it


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
    window: int = 5                  # intervals before and after a move that judge it
    tolerance: float = TOLERANCE
    confidence: float = CONFIDENCE
    on_inconclusive: str = "keep"    # or "revert"
    revert_hold: float = 300.0       # seconds a reverted target is not tried again for its flow
    # moves by RX queue, for a flow alone (among those the policy sees) on its queue: nothing
    # per packet, where the device allows it (None: every move is an XDP rule)
    queues: QueueMover | None = None
    # what a sweep of this host measured for each move's placements (steer auto --expect-from)
    expect: SweepExpectations | None = None
    placed: dict[FlowId, int] = field(default_factory=dict)       # the rules we installed
    by_queue: dict[FlowId, int] = field(default_factory=dict)     # those moved by their queue
    moves: int = 0
    outcomes: Counter = field(default_factory=Counter)            # verdict -> moves judged so
    judged: deque = field(default_factory=lambda: deque(maxlen=100))   # the last moves' records
    trials: dict[FlowId, Trial] = field(default_factory=dict)
    _pending: dict[FlowId, tuple[int, int]] = field(default_factory=dict)
    _moved_at: dict[FlowId, float] = field(default_factory=dict)
    _absent: dict[FlowId, int] = field(default_factory=dict)
    _history: deque = field(default_factory=deque)                # the last WINDOW + 1 intervals
    _banned: dict[tuple[FlowId, int], float] = field(default_factory=dict)
    _last_flows: list[FlowReport] = field(default_factory=list)

    def __post_init__(self):
        if self.window < 2:
            raise ValueError(f"window of {self.window} interval(s): a move is judged on at least 2")
        if self.on_inconclusive not in ("keep", "revert"):
            raise ValueError(f"on_inconclusive {self.on_inconclusive!r}: keep or revert")
        self._history = deque(maxlen=self.window + 1)

    def step(self, snap: Snapshot, now: float | None = None) -> list[Change]:
        """One interval; self.topo must say which CPUs are online now (the caller re-reads it
        when that changes)."""
        now = time.monotonic() if now is None else now
        online = set(self.topo.online)
        changes = []
        figs = figures_of(snap)
        changes += self._advance_trials(figs, now)
        self._history.append(figs)
        self._last_flows = snap.flows
        for flow, cpu in list(self.placed.items()):
            if cpu not in online:
                self.log(f"warning: CPU {cpu} of the rule for {flow} went offline")
                self.trials.pop(flow, None)
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
        self._banned = {k: t for k, t in self._banned.items() if t > now}
        by_flow = {f.flow: f for f in snap.flows}
        for flow, d in wanted.items():
            current = self.placed.get(flow, now_on.get(flow))
            if d.cpu == current or (flow, d.cpu) in self._banned:
                self._pending.pop(flow, None)
                continue
            cpu, count = self._pending.get(flow, (d.cpu, 0))
            count = count + 1 if cpu == d.cpu else 1
            self._pending[flow] = (d.cpu, count)
            if count < self.confirm or flow in self.trials:
                continue
            if now - self._moved_at.get(flow, float("-inf")) < self.hold:
                continue
            trial = self._trial_for(by_flow[flow], current, d) if flow in by_flow else None
            if self.steerer is not None and trial is None:
                continue   # no before window yet, or a trial runs on one of its CPUs
            queue = self._queue_for(by_flow[flow], snap.flows) if flow in by_flow else None
            napi = by_flow[flow].rx_path.napi_id if queue is not None and by_flow[flow].rx_path \
                else None
            change = self._apply(Change(flow, current, d.cpu, d.reason, queue, napi), now)
            if change is not None and trial is not None and self.steerer is not None:
                self.trials[flow] = trial
            changes.append(change)
        for flow in list(self.placed):
            self._absent[flow] = 0 if flow in seen else self._absent.get(flow, 0) + 1
            if self._absent[flow] >= self.expire:
                if self.trials.pop(flow, None):
                    self.outcomes["ended"] += 1
                changes.append(self._apply(Change(flow, self.placed[flow], None, "flow ended"), now))
        return [c for c in changes if c is not None]

    def _queue_for(self, f: FlowReport, flows: list[FlowReport]) -> int | None:
        """The RX queue to move F by: its own where it already moved by it, else where F is the
        only flow on its queue that the policy sees (a flow under --min-rate moves with it) and
        has no XDP rule; None for an XDP rule."""
        if f.flow in self.by_queue:
            return self.by_queue[f.flow]
        if self.queues is None or self.queues.method is None or f.flow in self.placed:
            return None
        q = self.queues.queue_of(f)
        if q is None or any(g.flow != f.flow and self.queues.queue_of(g) == q for g in flows) \
                or q in self.by_queue.values():
            return None
        return q

    def actions(self) -> dict:
        """What the exporter shows of this engine: its moves, their verdicts so far, and the
        goodput change of the last one judged (None before the first)."""
        last = self.judged[-1]["goodput_bytes_per_second"] if self.judged else None
        return {"moves": self.moves, "verdicts": dict(self.outcomes),
                "last_change": last["change"] if last else None}

    def summary(self) -> list[str]:
        """The moves judged, one line each, and the count by verdict: what steer auto says of
        its own work when it ends."""
        if not self.moves:
            return ["no flow was moved"]
        lines = []
        for r in self.judged:
            g = r["goodput_bytes_per_second"]
            gain = "" if g is None else \
                f", goodput {g['before'] * 8 / 1e9:.2f} -> {g['after'] * 8 / 1e9:.2f} Gbit/s " \
                f"({g['change']:+.1%}, {g['interval'][0]:+.1%} to {g['interval'][1]:+.1%})"
            lines.append(f"{r['flow']}: CPU {r['from_cpu']} -> {r['to_cpu']}: {r['verdict']}"
                         f"{' and put back' if r['undone'] else ''}{gain}")
        running = len(self.trials)
        counts = ", ".join(f"{n} {o}" for o, n in sorted(self.outcomes.items()))
        lines.append(f"{self.moves} move(s): {counts or 'none judged'}"
                     + (f", {running} still being measured" if running else ""))
        return lines

    def _trial_for(self, f: FlowReport, current: int | None, d: Decision) -> Trial | None:
        """The experiment moving F to D.cpu would start: None while F lacks a before window (it
        was not in each of the last WINDOW intervals) or a trial runs on a CPU the move touches
        (where F's stack runs, the target, its reader's CPU)."""
        # a flow's first interval is left out: it began somewhere in it, and its rate there is
        # not its rate
        if len(self._history) <= self.window or any(f.flow not in i for i in self._history):
            return None
        cpus = frozenset(c for c in (current, d.cpu, f.app_cpu) if c is not None)
        if any(cpus & t.cpus for t in self.trials.values()):
            return None
        neighbours = {g.flow for g in self._last_flows if g.flow != f.flow
                      and ({stack_cpu_of(g), g.app_cpu} & cpus)}
        # a trial keeps the figures of its flows only: a host's busy flows are many, and as many
        # trials may run as the moves' CPUs allow
        keep = neighbours | {f.flow}
        return Trial(f.flow, current, d.cpu, self.placed.get(f.flow), d.reason, cpus, neighbours,
                     before=[_only(i, keep) for i in list(self._history)[1:]])

    def _advance_trials(self, figs: dict[FlowId, Figures], now: float) -> list[Change]:
        """Each running trial takes this interval's figures; one whose after window is full is
        judged, and reverted if it lost."""
        changes = []
        for flow, t in list(self.trials.items()):
            if t.settle > 0:
                t.settle -= 1
                continue
            t.after.append(_only(figs, t.neighbours | {flow}))
            if len(t.after) < self.window:
                continue
            v = judge(flow, t.before, t.after, t.neighbours, self.tolerance, self.confidence)
            if v.outcome == REVERTED and t.first is None:
                # a loss: measured again over a second window before anything is undone
                t.first, t.after = v, []
                self.log(f"{flow}: the move to CPU {t.to_cpu} looks like a loss ({v.why}); "
                         "measuring a second window to confirm it", event="confirming",
                         flow=str(flow))
                continue
            del self.trials[flow]
            if t.first is not None:
                v = confirm(t.first, v, self.tolerance)
            revert = v.outcome == REVERTED or (v.outcome == INCONCLUSIVE
                                                and self.on_inconclusive == "revert")
            self.outcomes[v.outcome] += 1
            # the intervals compared, on the wall clock (as `steer flows --json`'s window)
            wall = time.time() - time.monotonic()
            record = {"flow": str(flow), "from_cpu": t.from_cpu, "to_cpu": t.to_cpu,
                      "reason": t.reason, **v.as_json(), "undone": revert,
                      "intervals": {"before": spans(t.before, flow, wall),
                                    "after": spans(t.after, flow, wall)}}
            self.judged.append(record)
            undo = (f"; putting it back, CPU {t.to_cpu} not tried again for it for "
                    f"{self.revert_hold:g} s") if revert else ""
            self.log(f"{flow}: the move to CPU {t.to_cpu} is {v.outcome}: {v.why}{undo}",
                     event="verdict", **record)
            if revert:
                self._banned[(flow, t.to_cpu)] = now + self.revert_hold
                back = Change(flow, t.to_cpu, t.rule_before,
                              f"undoing the move to CPU {t.to_cpu}: {v.why}")
                done = self._apply(back, now, counted=False)
                if done is not None:
                    changes.append(done)
        return changes

    def _apply(self, c: Change, now: float, counted: bool = True) -> Change | None:
        spec = exact_spec(c.flow)
        queue = c.queue if c.queue is not None else self.by_queue.get(c.flow)
        method = "cpumap" if queue is None else self.queues.method
        try:
            if self.steerer is not None and queue is None:
                if c.new_cpu is None:
                    self.steerer.unpin(spec)
                else:
                    self.steerer.pin(spec, c.new_cpu)
            elif self.steerer is not None:
                if c.new_cpu is None:
                    self.queues.restore(queue)
                else:
                    self.queues.move(queue, c.new_cpu, c.napi_id)
        except Exception as e:  # noqa: BLE001 - one failed move must not stop the others
            self.log(f"could not move {c.flow} to CPU {c.new_cpu}: {e}")
            return None
        if c.new_cpu is None:
            self.placed.pop(c.flow, None)
            self.by_queue.pop(c.flow, None)
            self._absent.pop(c.flow, None)
        else:
            self.placed[c.flow] = c.new_cpu
            if queue is not None:
                self.by_queue[c.flow] = queue
            self._moved_at[c.flow] = now
            self.moves += counted
        self._pending.pop(c.flow, None)
        old = "-" if c.old_cpu is None else c.old_cpu
        new = "unsteered" if c.new_cpu is None else f"CPU {c.new_cpu}"
        by = "" if queue is None else f" by {method} (RX queue {queue})"
        dry = " (dry run)" if self.steerer is None else ""
        expected = self._expectation(c) if counted else None
        self.log(f"{c.flow}: kernel CPU {old} -> {new}{by}: {c.reason}{dry}"
                 + (f"; {expected.text()}" if expected else ""), flow=str(c.flow),
                 old_cpu=c.old_cpu, new_cpu=c.new_cpu, reason=c.reason, method=method,
                 queue=queue, dry_run=self.steerer is None, event="move" if counted else "undo",
                 **(expected.fields() if expected else {}))
        return c

    def _expectation(self, c: Change) -> Expectation | None:
        """What the sweep measured for the placement C leaves (the flow's stack CPU and reader
        now) and the one it makes."""
        if self.expect is None or c.new_cpu is None:
            return None
        f = next((f for f in self._last_flows if f.flow == c.flow), None)
        if f is None:
            return None
        return self.expect.of(stack_cpu_of(f), c.new_cpu, f.app_cpu)


def _only(figs: dict[FlowId, Figures], flows: set[FlowId]) -> dict[FlowId, Figures]:
    return {f: figs[f] for f in flows if f in figs}


class AutoStopped(Exception):
    """The loop cannot go on; str() says why, in one line."""


def run(engine: AutoSteer, intervals: Intervals, *, period: float, duration: float | None = None,
        detached: Callable[[], str | None] = lambda: None, sysfs: str = "/sys") -> None:
    """The loop of `steer auto`: every PERIOD seconds, ENGINE steps on the snapshot of the
    interval, for DURATION seconds (None: until KeyboardInterrupt, which returns). Before each
    step, DETACHED() says whether the steered device is gone (AutoStopped: nothing is left to
    steer), and the topology is read again when CPUs went on- or offline, so that the engine
    and the policy place flows only on CPUs that are online."""
    start = time.monotonic()
    end = None if duration is None else start + duration
    n = 0   # steps taken; the next is due at start + (n + 1) * period
    try:
        while end is None or time.monotonic() < end:
            # on a fixed schedule, so that N intervals take N periods whatever each step took
            # (a read waits for the gap between the tracer's windows, a busy host slows it);
            # a step that ran past its slot is followed at the next slot, not at once
            n = max(n + 1, math.floor((time.monotonic() - start) / period) + 1)
            due = start + n * period
            time.sleep(max(0.0, (due if end is None else min(due, end)) - time.monotonic()))
            gone = detached()
            if gone:
                raise AutoStopped(f"stopping: {gone}, so there is nothing left to steer")
            if online_cpus(sysfs) != engine.topo.online:
                engine.topo = intervals.topo = read_topology(sysfs)
            engine.step(intervals())
    except KeyboardInterrupt:
        pass
