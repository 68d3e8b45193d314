"""A flow's CPUs and class from its recent past, for readers of many short intervals."""
from __future__ import annotations

from dataclasses import replace

from steer.model.classify import classify
from steer.model.interval import dominant
from steer.model.reports import Snapshot
from steer.model.samples import FlowId
from steer.model.topology import Topology

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
            kernel_cpu, kshare = dominant(kernel)
            app_cpu, ashare = dominant(app)
            stack_cpu, sshare = dominant(stack)
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
