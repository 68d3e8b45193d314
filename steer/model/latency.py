"""A flow's arrival-to-read delays (--latency): the kernel's histogram of them (bpf/flowtrace.h,
struct ft_lat_flow) read as quantiles. Pure: the buckets' bounds mirror lat_bucket() in
bpf/flowtrace/latency.bpf.h, and a quantile is placed inside its bucket by linear interpolation,
so it is within a bucket's width (an eighth of its power of two) of the kernel's own delays."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import NamedTuple

from steer.abi import flowtrace as abi

SUB = 8          # FT_LAT_SUB: buckets per power of two
BUCKETS = 256    # FT_LAT_BUCKETS
QUANTILES = (0.5, 0.9, 0.99)


@cache
def lat_flow_dtype():
    """struct ft_lat_flow, as the kernel's map holds it (numpy is imported where delays are
    read, not by every command that imports this module)."""
    from steer.model.numeric import np
    return np.dtype(abi.LatFlow)


def bucket_of(ns: int) -> int:
    """The bucket a delay of NS nanoseconds goes to, as the kernel's lat_bucket() puts it."""
    if ns < SUB:
        return ns
    p = ns.bit_length() - 1
    return min(SUB * (p - 2) + ((ns >> (p - 3)) & (SUB - 1)), BUCKETS - 1)


def bucket_bounds(b: int) -> tuple[int, int]:
    """[low, high) in nanoseconds of bucket B (the last one also holds everything above it)."""
    if b < SUB:
        return b, b + 1
    p, j = b // SUB + 2, b % SUB
    width = 1 << (p - 3)
    return (SUB + j) * width, (SUB + j + 1) * width


class Totals(NamedTuple):
    """The kernel's running counts of one flow (struct ft_lat_flow): the arrival-to-read
    histogram, its samples, the samples lost, their sum; and of the samples whose enqueue on the
    socket was seen (STAGED), the histograms of the two stages, arrival to the queue and the
    queue to the read (None: none kept)."""
    hist: list[int]
    samples: int
    lost: int
    sum_ns: int
    staged: int = 0
    hist_stack: list[int] | None = None
    hist_queue: list[int] | None = None
    wakes: int = 0                     # the reader's wake-ups by the flow's data
    cross_wakes: int = 0               # of those, from another CPU than it then ran on
    wake_sum_ns: int = 0
    hist_wake: list[int] | None = None


@dataclass(frozen=True)
class Delays:
    """One flow's arrival-to-read delays over an interval, and its stages'."""
    samples: int
    lost: int            # sampled skbs whose slot was taken before a read took them
    mean_ns: float | None
    quantiles_ns: dict[float, float]   # q -> delay, for QUANTILES, where there are samples
    staged: int = 0                    # samples whose enqueue was seen: the stages rest on them
    stack_ns: dict[float, float] = field(default_factory=dict)   # arrival to the receive queue
    queue_ns: dict[float, float] = field(default_factory=dict)   # the receive queue to the read
    wakes: int = 0                     # the reader's wake-ups by the flow's data (every one)
    cross_wakes: int = 0               # of those, by another CPU than the reader then ran on
    wake_mean_ns: float | None = None
    wake_ns: dict[float, float] = field(default_factory=dict)    # wake-up to running

    def as_json(self) -> dict:
        """"arrival_to_read", "arrival_to_queue", "queue_to_read" (each with its samples) and
        "reader_wakeup" (its wake-ups), with their quantiles in us (null where there is none)."""
        return {"arrival_to_read": {"samples": self.samples, "lost": self.lost,
                                    "mean_us": _us(self.mean_ns), **_quantiles(self.quantiles_ns)},
                "arrival_to_queue": {"samples": self.staged, **_quantiles(self.stack_ns)},
                "queue_to_read": {"samples": self.staged, **_quantiles(self.queue_ns)},
                "reader_wakeup": {"wakeups": self.wakes, "cross_core": self.cross_wakes,
                                  "mean_us": _us(self.wake_mean_ns), **_quantiles(self.wake_ns)}}


def _us(ns: float | None) -> float | None:
    return None if ns is None else round(ns / 1e3, 3)


def _quantiles(by_q: dict[float, float]) -> dict:
    return {f"p{round(q * 100)}_us": _us(by_q.get(q)) for q in QUANTILES}


NO_DELAYS = Delays(0, 0, None, {})   # a flow none of whose sampled skbs was read


def quantile(hist, q: float) -> float | None:
    """The Q quantile (0..1) of the delays counted in HIST (one count per bucket): in the first
    bucket with counts whose running total reaches Q of them, placed by linear interpolation."""
    from steer.model.numeric import np
    h = np.asarray(hist, np.float64)
    cum = np.cumsum(h)
    if not len(h) or not cum[-1]:
        return None
    rank = q * cum[-1]
    b = int(np.searchsorted(cum, rank)) if rank > 0 else int(np.flatnonzero(h)[0])
    if b >= len(h):
        return float(bucket_bounds(len(h) - 1)[0])
    lo, hi = bucket_bounds(b)
    return lo + (hi - lo) * max(rank - (cum[b] - h[b]), 0) / h[b]


def _at_quantiles(hist: list[int] | None, n: int) -> dict[float, float]:
    """HIST's QUANTILES, where it holds N > 0 counts (else none)."""
    return {q: quantile(hist, q) for q in QUANTILES} if n else {}


def delays(t: Totals | tuple) -> Delays:
    """What the kernel's histograms say; nothing where nothing was read (or woken)."""
    t = Totals(*t)
    wakes = t.wakes if t.hist_wake is not None else 0
    woken = dict(wakes=wakes, cross_wakes=t.cross_wakes if wakes else 0,
                 wake_mean_ns=t.wake_sum_ns / wakes if wakes else None,
                 wake_ns=_at_quantiles(t.hist_wake, wakes))
    if not t.samples:
        return Delays(0, t.lost, None, {}, **woken)
    staged = t.staged if t.hist_stack is not None and t.hist_queue is not None else 0
    return Delays(t.samples, t.lost, t.sum_ns / t.samples, _at_quantiles(t.hist, t.samples),
                  staged, _at_quantiles(t.hist_stack, staged), _at_quantiles(t.hist_queue, staged),
                  **woken)


def since(now: Totals | tuple, before: Totals | tuple | None) -> Totals:
    """An interval's counts, from the kernel's running totals NOW and BEFORE (None: the flow's
    first read); a flow the kernel forgot and met again counts anew."""
    now = Totals(*now)
    if before is None:
        return now
    before = Totals(*before)
    if now.samples < before.samples or now.lost < before.lost or now.staged < before.staged \
            or now.wakes < before.wakes:
        return now

    from steer.model.numeric import np

    def minus(a, b):
        return None if a is None or b is None else \
            np.asarray(a, np.int64) - np.asarray(b, np.int64)
    return Totals(minus(now.hist, before.hist), now.samples - before.samples,
                  now.lost - before.lost, now.sum_ns - before.sum_ns, now.staged - before.staged,
                  minus(now.hist_stack, before.hist_stack),
                  minus(now.hist_queue, before.hist_queue), now.wakes - before.wakes,
                  now.cross_wakes - before.cross_wakes, now.wake_sum_ns - before.wake_sum_ns,
                  minus(now.hist_wake, before.hist_wake))


def summed(parts: list) -> Totals | None:
    """The counts of several flows' intervals (Totals) as one: a sweep cell's flows, whose
    delays are one distribution. None where there are no parts."""
    parts = [Totals(*t) for t in parts]
    if not parts:
        return None

    from steer.model.numeric import np

    def add(hists):
        return None if any(h is None for h in hists) else \
            np.sum([np.asarray(h, np.int64) for h in hists], axis=0)
    return Totals(add([t.hist for t in parts]), *(sum(getattr(t, k) for t in parts) for k in
                                                   ("samples", "lost", "sum_ns", "staged")),
                  add([t.hist_stack for t in parts]), add([t.hist_queue for t in parts]),
                  *(sum(getattr(t, k) for t in parts) for k in
                    ("wakes", "cross_wakes", "wake_sum_ns")),
                  add([t.hist_wake for t in parts]))


def wait_figures(t: Totals | None) -> dict:
    """A sweep run's latency figures from its flows' summed counts T (None: none of them had
    latency counts): the arrival-to-read samples and quantiles in microseconds, and the
    reader's wake-ups by the data, those from another core and their quantiles."""
    d = delays(t) if t is not None else NO_DELAYS
    return {"wait_samples": d.samples, "wait_lost": d.lost,
            **{f"wait_{k}": v for k, v in _quantiles(d.quantiles_ns).items()},
            "wakeups": d.wakes, "cross_core_wakeups": d.cross_wakes,
            **{f"wakeup_{k}": v for k, v in _quantiles(d.wake_ns).items()}}


WAIT_KEYS = ("wait_p50_us", "wait_p90_us", "wait_p99_us", "wakeup_p50_us", "wakeup_p99_us",
             "cross_core_wakeup_share")


def interval_delays(before: dict, after: dict) -> dict:
    """FlowId -> Delays over an interval, from two reads of the kernel's running totals
    (Tracer.latency_totals)."""
    return {fid: delays(since(now, before.get(fid))) for fid, now in after.items()}


# the exporter's histogram buckets (le, seconds): Prometheus' classic ones from 10 us to 2.5 s
EXPORT_BOUNDS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2,
                 0.1, 0.25, 0.5, 1.0, 2.5)


@cache
def _le_of():
    """Each kernel bucket's index into EXPORT_BOUNDS (len(EXPORT_BOUNDS): +Inf), by its
    midpoint in seconds: a bucket goes to the first le at or above it, so a cumulative count is
    off by at most the share of one kernel bucket (1/8 of its power of two)."""
    from steer.model.numeric import np
    midpoints = np.array([sum(bucket_bounds(b)) / 2e9 for b in range(BUCKETS)])
    return np.searchsorted(np.array(EXPORT_BOUNDS), midpoints)


def export_buckets(hist, sum_ns: int) -> tuple[list[tuple[str, float]], float]:
    """A kernel histogram HIST (BUCKETS counts) as a Prometheus histogram's cumulative (le,
    count) pairs on EXPORT_BOUNDS, +Inf last, and SUM_NS in seconds."""
    from steer.model.numeric import np
    per_le = np.bincount(_le_of(), weights=np.asarray(hist, float),
                         minlength=len(EXPORT_BOUNDS) + 1)
    cum = np.cumsum(per_le)
    return ([(f"{le:g}", float(c)) for le, c in zip(EXPORT_BOUNDS, cum)]
            + [("+Inf", float(cum[-1]))], sum_ns / 1e9)


class LabelWaits:
    """Per label, the running histogram of its flows' arrival-to-read delays, for a Prometheus
    histogram that only goes up: each read's interval of each flow (since(), against the flow's
    previous read) goes to the label the flow has in that interval (a workload:
    WorkloadTotals.key; a class: ClassWaits); a flow with none yet waits, its delays counted
    under the label it has at its next read. keep() forgets labels no longer shown."""

    def __init__(self):
        self.hist: dict = {}
        self.sum_ns: dict = {}
        self._last: dict = {}

    def fold(self, totals: dict, labels: list) -> None:
        """TOTALS: flow -> the kernel's running Totals; LABELS: each flow's label in this
        interval, in TOTALS' order, or None."""
        from steer.model.numeric import np
        last = {}
        for (key, now), label in zip(totals.items(), labels):
            if label is None:
                if key in self._last:
                    last[key] = self._last[key]
                continue
            t = since(now, self._last.get(key))
            last[key] = now
            if t.samples:
                if label not in self.hist:
                    self.hist[label] = np.zeros(BUCKETS, np.uint64)
                    self.sum_ns[label] = 0
                self.hist[label] += np.asarray(t.hist, np.uint64)
                self.sum_ns[label] += t.sum_ns
        self._last = last

    def keep(self, labels) -> None:
        """Forget every label not in LABELS (a workload forgotten: its series ends)."""
        for label in set(self.hist) - set(labels):
            del self.hist[label], self.sum_ns[label]

    def buckets(self, label) -> tuple[list[tuple[str, float]], float] | None:
        """LABEL's histogram as export_buckets() gives it; None where none of its flows' data
        has been sampled yet."""
        return export_buckets(self.hist[label], self.sum_ns[label]) if label in self.hist else None


class ClassWaits(LabelWaits):
    """LabelWaits by placement class (an index into CLASSES), each class's series there from
    the start."""

    def fold(self, totals: dict, class_of) -> None:
        """CLASS_OF(flows) -> each flow's class index in this interval, or -1 (no traffic seen:
        its delays wait for a read where it has one)."""
        keys = list(totals)
        super().fold(totals, [None if c < 0 else int(c) for c in (class_of(keys) if keys else [])])

    def buckets(self, i: int) -> tuple[list[tuple[str, float]], float]:
        """Class I's cumulative (le, count) pairs, +Inf last, and its sum in seconds."""
        return super().buckets(i) or export_buckets([0] * BUCKETS, 0)


