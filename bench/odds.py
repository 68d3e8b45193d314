"""The odds a statistical bound fails by chance, and the bound that gives stated odds.

A sampled time rests on n samples that land as a Poisson process on the time they stand for: it
spreads by 1/sqrt(n) of itself, widened by DISPERSION because a sample stands for its task's run
time since that task's previous sample, not one fixed period, so where tasks share a CPU the
weights vary. Over 9 to 11 runs of the two-flow agreement test (tests/live/test_timing_live.py)
the spread was 1.24x a Poisson count's for the kernel side of a flow whose reader has a CPU of
its own, 1.76x where sender, reader and softirq share one CPU: DISPERSION is 2. A check that holds such a figure
to a truth allows its systematic error plus z of those spreads, with z chosen so that the check
fails by chance at most ODDS of the time: two-sided, and with the odds shared out equally among
the FIGURES a check holds at once (a union bound: the figures need not be independent).

ODDS is the suite's aim, 1 in 10,000 per test: at ~20 such tests a run, a run fails by chance
about once in 500, and a flaky bound shows as a failure in the test history, not a retry.

A time that is all of a task's runs (a cpumap or threaded-NAPI kthread's own time, with the
softirqs it runs; a reader's time in the kernel, all of it but what its samples in user mode
stand for) is not a count: its samples' weights, each the task's run time since its own
previous sample, add up to its run time between its first and its last sample in the window, so
chance moves it only at the window's two ends, by at most one weight each: no more than
SAMPLE_WEIGHT_CPU_PERIODS periods (bpf/flowtrace/sampling.bpf.h caps a weight there). What the
figure holds beyond that task, or leaves out of it (NET_RX on top of other tasks on its CPU, the
reader's user time), spreads as a count."""
from __future__ import annotations

from statistics import NormalDist

ODDS = 1e-4
DISPERSION = 2.0
SAMPLE_WEIGHT_CPU_PERIODS = 4   # sampling.bpf.h's cap on one sample's weight, in CPU periods


def z_for(figures: int = 1, odds: float = ODDS) -> float:
    """Standard deviations either way inside which FIGURES normal errors all stay, but for ODDS."""
    if figures < 1 or not 0 < odds < 1:
        raise ValueError(f"z_for: {figures} figures at odds {odds}")
    return NormalDist().inv_cdf(1 - odds / (2 * figures))


def sampled_spread(samples: float, figures: int = 1, odds: float = ODDS,
                   dispersion: float = DISPERSION) -> float:
    """What a sampled figure resting on SAMPLES samples may stray by chance (relative), for
    FIGURES of them held at once at ODDS."""
    return z_for(figures, odds) * dispersion / max(samples, 1.0) ** 0.5


def classified_spread(expiries: float, share: float, figures: int = 1, odds: float = ODDS,
                      dispersion: float = DISPERSION) -> float:
    """What the share of EXPIRIES of a sampling clock that a classification leaves out (SHARE of
    them, each its own draw) may stray by chance (relative to the expiries), for FIGURES such
    shares held at once at ODDS: a binomial count's spread, DISPERSION times over."""
    return z_for(figures, odds) * dispersion * (share * (1 - share) / max(expiries, 1.0)) ** 0.5


def chance_of(deviation: float, samples: float, dispersion: float = DISPERSION) -> float:
    """The two-sided chance that a figure on SAMPLES samples strays by DEVIATION (relative) or
    more, by the model: what a measured error says about the bound it was held to."""
    sd = dispersion / max(samples, 1.0) ** 0.5
    return 2 * (1 - NormalDist().cdf(abs(deviation) / sd))


def whole_task_spread(samples: float, partial: float, figures: int = 1, odds: float = ODDS,
                      dispersion: float = DISPERSION) -> float:
    """What a sampled figure resting on SAMPLES samples may stray by (relative), where all but
    PARTIAL of them are the whole of a task's run time (the module's docstring): the window's
    two ends, and the count's chance on the PARTIAL samples alone, for FIGURES held at ODDS."""
    samples = max(samples, 1.0)
    partial = min(max(partial, 0.0), samples)
    count = z_for(figures, odds) * dispersion * partial ** 0.5 / samples
    return 2 * SAMPLE_WEIGHT_CPU_PERIODS / samples + count
