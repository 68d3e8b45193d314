"""Whether a move helped: the figures of the flows a move touched over a window of intervals before
it and one of equal length after it, and the verdict they give (kept, reverted, inconclusive).

The objective is what the move could change. Goodput first (the bytes the readers of the moved
flow and of its neighbours took, per second, summed): a flow limited by a CPU it shares gains or
loses rate with its placement, and a move that helps one flow but costs its new neighbours more is
a loss. Where goodput does not change beyond the tolerance (a flow that is not CPU-bound, whose
rate no placement can raise), the moved flow's receive CPU per GB decides: a move that surely
costs more CPU for the same bytes is a loss too.

Each figure's change carries an interval: the per-interval values of each window give a mean and its
standard error, and the difference of the two means is held to a Student t quantile for its
Welch-Satterthwaite degrees of freedom (CONFIDENCE two-sided). A move is reverted only when its loss
is beyond TOLERANCE with that confidence in the first after window, and the next window confirms it
(the caller's Trial keeps the first verdict): the host's own slowdowns, which a move only coincides
with, last seconds, and one window of a few seconds can fall inside one. The second window
confirms a loss of goodput when its estimate is again a loss beyond TOLERANCE and its interval
excludes a gain beyond it, not only when the interval excludes no loss: asking the full confidence
twice would miss a real loss as often as either window misses it (on the lab, where single seconds
dip by a third, the first window found a 20-39% loss in about 4 runs of 5), while a slowdown that merely coincided with the
first window has to last into the second to be taken for a loss. Inconclusive, for the caller's
policy to settle, when the estimate is such a loss that the interval cannot confirm, or the interval
reaches a loss of UNTOLD tolerances (too noisy to tell a harmless move from a harmful one); kept
otherwise."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from statistics import NormalDist

from steer.defaults import TOLERANCE
from steer.model.reports import FlowReport, Snapshot
from steer.model.samples import FlowId

CONFIDENCE = 0.95          # of each change's interval, two-sided
# an interval that reaches a loss of this many tolerances cannot tell a harmless move
UNTOLD = 4
KEPT, REVERTED, INCONCLUSIVE = "kept", "reverted", "inconclusive"


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile at P (> 0.5) for DF degrees of freedom: Hill's expansion around the
    normal quantile from 3 degrees of freedom up (within 1% of the exact value there); below 3,
    the exact value for the whole degrees below DF (1 or 2), which is larger, so an interval
    is never too narrow."""
    if df < 2:
        return math.tan(math.pi * (p - 0.5))
    if df < 3:
        return (2 * p - 1) / (2 * p * (1 - p)) ** 0.5
    z = NormalDist().inv_cdf(p)
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    g4 = (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160
    return z + g1 / df + g2 / df ** 2 + g3 / df ** 3 + g4 / df ** 4


@dataclass(frozen=True)
class Difference:
    """A figure before and after a move: its means, and the relative change with its interval
    (low, high), as shares of the before mean."""
    before: float
    after: float
    change: float
    low: float
    high: float
    values: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())   # per interval, each side

    def as_json(self) -> dict:
        return {"before": self.before, "after": self.after, "change": round(self.change, 4),
                "interval": [round(self.low, 4), round(self.high, 4)],
                "per_interval": [[float(f"{v:.4g}") for v in side] for side in self.values]}


def compare(before: list[float], after: list[float],
            confidence: float = CONFIDENCE) -> Difference | None:
    """The change from the values of BEFORE to those of AFTER (one per interval), or None when
    either has fewer than two values or the before mean is not positive."""
    if len(before) < 2 or len(after) < 2:
        return None
    mb, ma = statistics.fmean(before), statistics.fmean(after)
    if mb <= 0:
        return None
    vb, va = statistics.variance(before) / len(before), statistics.variance(after) / len(after)
    se = (vb + va) ** 0.5
    if se == 0:
        df = float(len(before) + len(after) - 2)
    else:   # Welch-Satterthwaite
        df = (vb + va) ** 2 / ((vb ** 2 / (len(before) - 1) if vb else 0.0)
                               + (va ** 2 / (len(after) - 1) if va else 0.0))
    half = t_quantile(1 - (1 - confidence) / 2, df) * se
    d = ma - mb
    return Difference(mb, ma, d / mb, (d - half) / mb, (d + half) / mb,
                      (tuple(before), tuple(after)))


@dataclass(frozen=True)
class Figures:
    """What one interval says of one flow: the bytes its reader took (else those that reached its
    socket), its receive CPU seconds (kernel and reader), the interval's length and when it
    ended (CLOCK_MONOTONIC seconds of the read that ended it, where known)."""
    bytes: int
    cpu_seconds: float
    seconds: float
    ended: float | None = None

    @staticmethod
    def of(f: FlowReport, ended: float | None = None) -> "Figures":
        return Figures(f.app_bytes or f.rx_bytes, f.kernel_seconds + f.app_seconds, f.duration,
                       ended)


def figures_of(snap: Snapshot) -> dict[FlowId, Figures]:
    return {f.flow: Figures.of(f, snap.ended) for f in snap.flows if f.duration > 0}


def spans(window: list[dict[FlowId, Figures]], flow: FlowId,
          offset: float) -> list[list[float]] | None:
    """Each interval of WINDOW as [start, end] on the clock that is CLOCK_MONOTONIC + OFFSET (the
    wall clock, for a log line), from FLOW's figures; None where an interval's end is unknown.
    What a verdict compared, to be lined up with another record of the same traffic."""
    if any(i[flow].ended is None for i in window if flow in i):
        return None
    return [[round(i[flow].ended - i[flow].seconds + offset, 3), round(i[flow].ended + offset, 3)]
            for i in window if flow in i]


@dataclass(frozen=True)
class Verdict:
    outcome: str                    # KEPT, REVERTED or INCONCLUSIVE
    why: str
    goodput: Difference | None          # the flow and its neighbours, bytes a second summed
    cpu_per_gb: Difference | None       # the moved flow's receive CPU seconds per GB
    flows: int                      # how many flows the goodput sums (the moved one included)

    def as_json(self) -> dict:
        return {"verdict": self.outcome, "why": self.why, "flows": self.flows,
                "goodput_bytes_per_second": self.goodput and self.goodput.as_json(),
                "cpu_seconds_per_gb": self.cpu_per_gb and self.cpu_per_gb.as_json()}


def _whose(flows: int) -> str:
    """Whose goodput a verdict judged: the moved flow's, with its neighbours' where it has any."""
    return "the flow's goodput" if flows == 1 else \
        f"the goodput of the flow and its {flows - 1} neighbour(s)"


def _goodput(window: list[dict[FlowId, Figures]], flows: set[FlowId]) -> list[float]:
    return [sum(i[f].bytes for f in flows) / max(i[f].seconds for f in flows) for i in window]


def _cpu_per_gb(window: list[dict[FlowId, Figures]], flow: FlowId) -> list[float]:
    return [i[flow].cpu_seconds / (i[flow].bytes / 1e9) for i in window if i[flow].bytes > 0]


def judge(flow: FlowId, before: list[dict[FlowId, Figures]], after: list[dict[FlowId, Figures]],
          neighbours: set[FlowId], tolerance: float = TOLERANCE,
          confidence: float = CONFIDENCE) -> Verdict:
    """The verdict on moving FLOW, from the per-interval figures of the windows BEFORE and AFTER
    the move. Its NEIGHBOURS (the flows on the CPUs the move touched) count where they are in
    every interval of both windows: a flow that began or ended in between would read as a loss
    or a gain of the move."""
    windows = before + after
    if not before or not after or any(flow not in i for i in windows):
        return Verdict(INCONCLUSIVE, "the flow was not seen in every interval of both windows",
                       None, None, 0)
    flows = {flow} | {n for n in neighbours if all(n in i for i in windows)}
    goodput = compare(_goodput(before, flows), _goodput(after, flows), confidence)
    cost = compare(_cpu_per_gb(before, flow), _cpu_per_gb(after, flow), confidence)
    if goodput is None:
        return Verdict(INCONCLUSIVE, "too few intervals with traffic", None, cost, len(flows))
    whose = _whose(len(flows))
    lost = _loss(goodput, -1, tolerance)
    if lost == REVERTED:
        return Verdict(REVERTED, f"{whose} fell {-goodput.change:.1%}", goodput, cost, len(flows))
    if goodput.low > tolerance:
        return Verdict(KEPT, f"{whose} rose {goodput.change:.1%}", goodput, cost, len(flows))
    if lost == INCONCLUSIVE:
        return Verdict(INCONCLUSIVE, f"{whose} changed {goodput.change:+.1%} "
                       f"({goodput.low:+.1%} to {goodput.high:+.1%}): too noisy to tell",
                       goodput, cost, len(flows))
    # goodput did not fall: a cost the move surely added decides, a noisy one does not
    held = f"{whose} did not fall ({goodput.change:+.1%})"
    if cost is not None and _loss(cost, +1, tolerance) == REVERTED:
        return Verdict(REVERTED, f"{held} but the flow's receive CPU per GB rose "
                       f"{cost.change:.1%}", goodput, cost, len(flows))
    return Verdict(KEPT, held + ("" if cost is None else
                                 f", the flow's receive CPU per GB {cost.change:+.1%}"),
                   goodput, cost, len(flows))


def _loss(c: Difference, worse: int, tolerance: float) -> str:
    """Whether change C (WORSE: -1 where a fall is a loss, +1 where a rise is) is a loss beyond
    TOLERANCE with the interval's confidence (REVERTED), may be one that the interval is too
    wide to tell (INCONCLUSIVE: the estimate itself is such a loss, or the interval reaches a
    loss of UNTOLD tolerances), or is not one (KEPT)."""
    near, far = (c.high, c.low) if worse < 0 else (-c.low, -c.high)
    if near < -tolerance:
        return REVERTED
    if worse * c.change > tolerance or far < -UNTOLD * tolerance:
        return INCONCLUSIVE
    return KEPT


def confirm(first: Verdict, second: Verdict, tolerance: float = TOLERANCE) -> Verdict:
    """The verdict on a move whose FIRST after window found a loss (REVERTED), given the SECOND
    one's: reverted when the second finds it too (a goodput loss: its estimate beyond TOLERANCE
    and its interval short of a gain beyond it; a CPU per GB loss: by its interval, as the first
    asked); else the second's verdict, saying that the first window's loss did not last."""
    g = second.goodput
    goodput_lost = first.goodput is not None and first.goodput.high < -tolerance
    if second.outcome == REVERTED or (goodput_lost and g is not None and g.change < -tolerance
                                      and g.high < tolerance):
        why = second.why if second.outcome == REVERTED else \
            f"{_whose(second.flows)} fell {-g.change:.1%}"
        return replace(second, outcome=REVERTED, why=f"{why}, as in the window before")
    return replace(second, why=f"{second.why}; the loss of the first window after the move "
                                f"({first.why}) did not last")


@dataclass
class Trial:
    """A move under test: the windows of per-interval figures before and after it, and what to
    put back if it is reverted (RULE_BEFORE: the flow's rule then, None for none)."""
    flow: FlowId
    from_cpu: int | None
    to_cpu: int
    rule_before: int | None
    reason: str
    cpus: frozenset[int]               # the CPUs the move touched
    neighbours: set[FlowId]
    before: list[dict[FlowId, Figures]]
    after: list[dict[FlowId, Figures]] = field(default_factory=list)
    settle: int = 1                    # intervals after the move left out: they straddle it
    # the verdict of a first after window that found a loss, which a second one must confirm
    first: Verdict | None = None
