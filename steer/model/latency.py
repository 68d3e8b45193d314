"""A flow's arrival-to-read delays (--latency): the kernel's histogram of them (bpf/flowtrace.h,
struct ft_lat_flow) read as quantiles. Pure: the buckets' bounds mirror lat_bucket() in
bpf/flowtrace/latency.bpf.h, and a quantile is placed inside its bucket by linear interpolation,
so it is within a bucket's width (an eighth of its power of two) of the kernel's own delays."""
from __future__ import annotations

from dataclasses import dataclass

from steer.model.numeric import np

SUB = 8          # FT_LAT_SUB: buckets per power of two
BUCKETS = 256    # FT_LAT_BUCKETS
QUANTILES = (0.5, 0.9, 0.99)


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


@dataclass(frozen=True)
class Delays:
    """One flow's arrival-to-read delays over an interval."""
    samples: int
    lost: int            # sampled skbs whose slot was taken before a read took them
    mean_ns: float | None
    quantiles_ns: dict[float, float]   # q -> delay, for QUANTILES, where there are samples

    def as_json(self) -> dict:
        q = {f"p{round(k * 100)}_us": round(v / 1e3, 3) for k, v in self.quantiles_ns.items()}
        return {"samples": self.samples, "lost": self.lost,
                "mean_us": None if self.mean_ns is None else round(self.mean_ns / 1e3, 3),
                **({f"p{round(k * 100)}_us": None for k in QUANTILES} if not q else q)}


NO_DELAYS = Delays(0, 0, None, {})   # a flow none of whose sampled skbs was read


def quantile(hist: list[int], q: float) -> float | None:
    """The Q quantile (0..1) of the delays counted in HIST (one count per bucket)."""
    total = sum(hist)
    if not total:
        return None
    rank = q * total
    seen = 0
    for b, n in enumerate(hist):
        if n and seen + n >= rank:
            lo, hi = bucket_bounds(b)
            return lo + (hi - lo) * max(rank - seen, 0) / n
        seen += n
    lo, hi = bucket_bounds(len(hist) - 1)
    return float(lo)


def delays(hist: list[int], samples: int, lost: int, sum_ns: int) -> Delays:
    """What the kernel's histogram says, or an empty Delays where nothing was read."""
    if not samples:
        return Delays(0, lost, None, {})
    return Delays(samples, lost, sum_ns / samples, {q: quantile(hist, q) for q in QUANTILES})


def since(now: tuple, before: tuple | None) -> tuple:
    """(hist, samples, lost, sum_ns) of an interval, from the kernel's running totals NOW and
    BEFORE (None: the flow's first read); a flow the kernel forgot and met again counts anew."""
    if before is None or now[1] < before[1] or now[2] < before[2]:
        return now
    return ([a - b for a, b in zip(now[0], before[0])], now[1] - before[1], now[2] - before[2],
            now[3] - before[3])


def interval_delays(before: dict, after: dict) -> dict:
    """FlowId -> Delays over an interval, from two reads of the kernel's running totals
    (Tracer.latency_totals)."""
    return {fid: delays(*since(now, before.get(fid))) for fid, now in after.items()}


# the exporter's histogram buckets (le, seconds): Prometheus' classic ones from 10 us to 2.5 s
EXPORT_BOUNDS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2,
                 0.1, 0.25, 0.5, 1.0, 2.5)
# each kernel bucket's midpoint in seconds: a bucket goes to the first le at or above it, so a
# cumulative count is off by at most the share of one kernel bucket (1/8 of its power of two)
_MIDPOINTS = np.array([sum(bucket_bounds(b)) / 2e9 for b in range(BUCKETS)])
_LE_OF = np.searchsorted(np.array(EXPORT_BOUNDS), _MIDPOINTS)   # len(EXPORT_BOUNDS): +Inf


class ClassWaits:
    """Per placement class, the running histogram of its flows' arrival-to-read delays, for a
    Prometheus histogram that only goes up: each read's interval of each flow (since(), against
    the flow's previous read) goes to the class the flow had in that interval."""

    def __init__(self, classes):
        self.classes = list(classes)
        self.hist = np.zeros((len(self.classes), BUCKETS), np.uint64)
        self.sum_ns = [0] * len(self.classes)
        self._last: dict = {}

    def fold(self, totals: dict, class_of) -> None:
        """TOTALS: flow -> the kernel's running (hist, samples, lost, sum_ns); CLASS_OF(flows) ->
        each flow's class index in this interval, or -1 (no traffic seen: its delays wait for a
        read where it has one)."""
        keys = list(totals)
        cls = class_of(keys) if keys else []
        last = {}
        for key, c in zip(keys, cls):
            if c < 0:
                if key in self._last:
                    last[key] = self._last[key]
                continue
            hist, n, _, total = since(totals[key], self._last.get(key))
            last[key] = totals[key]
            if n:
                self.hist[c] += np.asarray(hist, np.uint64)
                self.sum_ns[c] += total
        self._last = last

    def buckets(self, i: int) -> tuple[list[tuple[str, float]], float]:
        """Class I's cumulative (le, count) pairs, +Inf last, and its sum in seconds."""
        per_le = np.bincount(_LE_OF, weights=self.hist[i].astype(float),
                             minlength=len(EXPORT_BOUNDS) + 1)
        cum = np.cumsum(per_le)
        return ([(f"{le:g}", float(c)) for le, c in zip(EXPORT_BOUNDS, cum)]
                + [("+Inf", float(cum[-1]))], self.sum_ns[i] / 1e9)
