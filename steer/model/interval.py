"""The rules of an interval between two reads of the flow map, each written once.

Three readers apply them: build_snapshot (steer.model.flows: objects, for `steer flows`, `top`,
`watch` and the sweep), the exporter's FlowLedger (steer.model.ledger: arrays, a map full of new
connections at every scrape) and the auto loop's BusyIntervals (steer.model.busyflows: arrays, to
pick the flows a policy may move). Each rule is stated here once, as names of the map's counters
and as a function that takes either form: a field of one entry (a number) or a column of many
(an array) answers the same comparisons and sums.

- A flow is part of an interval when one of ACTIVITY changed in one of its entries.
- An entry restarted (it was evicted or deleted and made again between the reads, and counts
  from zero) when a cumulative counter went down: restarted().
- An unconnected UDP socket knows no peer, so its reads are kept under a wildcard flow (no
  source address or port); they go to the one flow of the interval to the same address and port,
  without the receive side's counters (WILDCARD_DROPS), and to no flow where there are several.
- A side's CPU is the one with the largest positive weight, the lowest of equal ones; the
  weights and their fallbacks are those of interval_cpus().
"""
from __future__ import annotations

from typing import Callable, TypeVar

# the cumulative counters of a (flow, CPU) entry: what an interval subtracts, and a flow's
# entries sum
COUNTERS = ("rx_bytes", "rx_packets", "rx_skbs", "redirected_skbs", "kernel_ns", "kthread_ns",
            "app_bytes", "app_calls", "app_ns", "app_nested_ns", "llc_kernel", "llc_app",
            "rx_drops", "refs_kernel", "refs_app", "instructions_kernel", "instructions_app",
            "cycles_kernel", "cycles_app", "kernel_samples", "app_samples")
# a delta in any of these makes a flow part of an interval
ACTIVITY = ("rx_bytes", "rx_skbs", "app_calls", "kernel_ns", "kthread_ns", "app_ns", "rx_drops")
# what a restart is seen by: any of these lower, or the kernel side's time (softirq + kthread)
RESTART_EACH = ("rx_bytes", "app_calls", "app_ns")
KERNEL_TIME = ("kernel_ns", "kthread_ns")
# what a wildcard socket's reads leave behind when they go to their flow: the receive side,
# which the socket's own flow counted already
WILDCARD_DROPS = ("rx_bytes", "rx_packets", "rx_skbs", "kernel_ns", "kthread_ns", "llc_kernel")

T = TypeVar("T")
Field = Callable[[str], T]   # a counter by name: of one entry, or a column of entries


def kernel_time(of: Field):
    """The kernel side's time of an entry (or of each): NET_RX softirq plus cpumap kthread."""
    return of(KERNEL_TIME[0]) + of(KERNEL_TIME[1])


def restarted(now: Field, was: Field):
    """Whether NOW, a later read of WAS's entry (or of each), counts from zero again: a
    cumulative counter can only go down that way. A bool, or an array of them."""
    out = kernel_time(now) < kernel_time(was)
    for name in RESTART_EACH:
        out = out | (now(name) < was(name))
    return out


def is_wildcard(src: str, sport: int) -> bool:
    """A flow keyed by an unconnected socket: no source port, the any-address."""
    return sport == 0 and src in ("0.0.0.0", "::")


def wildcard_rows(fields) -> "object":
    """is_wildcard over FlowKey records (steer.model.flowarrays.flow_fields): a bool array."""
    return (fields["sport"] == 0) & ~fields["saddr"].any(axis=1)


# A side's CPU by its weights: DOMINANT(weight name) gives the CPU of the largest positive
# weight (a number and its share, or an array of CPUs, -1 for none), PICK(a, b) takes a where it
# names a CPU, else b. The weight "kernel_time" is kernel_time()'s.
def interval_cpus(dominant: Callable[[str], T], pick: Callable[[T, T], T]) -> tuple[T, T, T]:
    """An interval's (kernel CPU, stack CPU, app CPU) of a flow.

    The kernel CPU weighs kernel time; the stack CPU (where skbs went up the stack, the class's
    kernel side) weighs skbs, else cpumap kthread time (a steered flow counted by its socket),
    else takes the kernel CPU; a flow with skbs but no time (sampled timing) takes the stack CPU
    as its kernel CPU. The app CPU weighs the reader's time, else its calls."""
    kernel = dominant("kernel_time")
    stack = pick(pick(dominant("rx_skbs"), dominant("kthread_ns")), kernel)
    kernel = pick(kernel, stack)
    app = pick(dominant("app_ns"), dominant("app_calls"))
    return kernel, stack, app


def dominant(weights: dict[int, float]) -> tuple[int | None, float | None]:
    """The CPU of the largest positive weight (the lowest of equal ones) and its share."""
    total = sum(w for w in weights.values() if w > 0)
    if total <= 0:
        return None, None
    cpu = max(weights, key=lambda c: (weights[c], -c))
    return cpu, weights[cpu] / total


def first_named(a: tuple, b: tuple) -> tuple:
    """interval_cpus' PICK for (CPU, share) pairs."""
    return a if a[0] is not None else b


def dominant_rows(group, cpu, weight, n: int):
    """dominant() of many at once: per group 0 .. N-1, the CPU of its largest positive weight
    (the lowest of equal ones), -1 where it has none. One row per (group, CPU)."""
    from steer.model.numeric import np
    out = np.full(n, -1, np.int64)
    pos = weight > 0
    g, c, w = group[pos], cpu[pos], weight[pos]
    if len(g):
        order = np.lexsort((c, -w, g))
        g = g[order]
        first = np.r_[True, g[1:] != g[:-1]]
        out[g[first]] = c[order][first]
    return out


def first_named_rows(a, b):
    """interval_cpus' PICK for arrays of CPUs (-1: none)."""
    from steer.model.numeric import np
    return np.where(a >= 0, a, b)
