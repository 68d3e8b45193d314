"""The odds model every statistical bound of the live tests and bench.accuracy rests on
(bench/odds.py): how many standard deviations a bound allows for the odds it aims at, and that a
bound so made still catches a 1.4x error where its figure rests on enough samples."""
import bisect
import random

import pytest

from bench.odds import (DISPERSION, ODDS, SAMPLE_WEIGHT_CPU_PERIODS, chance_of, sampled_spread,
                        whole_task_spread, z_for)
from tests.support.helpers import ROOT


def test_one_figure_at_one_in_ten_thousand_allows_3_89_deviations():
    assert z_for() == pytest.approx(3.8906, abs=1e-3)
    assert chance_of(3.8906 * DISPERSION / 100, 100 ** 2) == pytest.approx(ODDS, rel=1e-3)


def test_the_odds_are_shared_among_the_figures_held_at_once():
    assert z_for(9) == pytest.approx(4.3943, abs=1e-3)      # bench.accuracy's sampled times
    assert z_for(4) > z_for(2) > z_for(1)
    with pytest.raises(ValueError):
        z_for(0)


def test_the_spread_falls_with_the_square_root_of_the_samples():
    assert sampled_spread(400) == pytest.approx(2 * sampled_spread(1600))
    assert sampled_spread(0) == sampled_spread(1)    # no sample: the widest, not a division by 0


def test_counts_stay_inside_the_bound_as_often_as_it_says():
    """Simulated: a count of about n=900 samples (where a Poisson count is near normal), 20,000
    draws at odds of 1 in 100 (so that the count of failures says something): the failures
    are within what a binomial of those odds allows (5 standard deviations)."""
    rng = random.Random(1)
    n, odds, draws = 900, 0.01, 20_000
    spread = sampled_spread(n, odds=odds, dispersion=1.0)
    failures = 0
    for _ in range(draws):
        # a Poisson count by its normal limit plus the discreteness of a count
        count = round(rng.gauss(n, n ** 0.5))
        failures += abs(count / n - 1) > spread
    expected = draws * odds
    assert failures < expected + 5 * expected ** 0.5, failures


def test_a_bound_on_enough_samples_still_catches_a_1_4x_error():
    """The live tests' systematic 10% plus chance at the suite's odds, for four figures at once,
    stays under +40% from 1,200 samples on: a 1.4x scaling of such a figure fails its test."""
    assert 0.10 + sampled_spread(1200, figures=4) < 0.40
    assert 0.10 + sampled_spread(400, figures=4) > 0.40     # and not on a handful


def test_the_weight_cap_is_the_samplers():
    """whole_task_spread's ends are the sampler's cap on one weight, as sampling.bpf.h has it."""
    src = open(f"{ROOT}/bpf/flowtrace/sampling.bpf.h").read()
    assert f"#define SAMPLE_WEIGHT_CPU_PERIODS\t{SAMPLE_WEIGHT_CPU_PERIODS}\n" in src


def test_a_whole_tasks_time_spreads_only_at_the_ends_and_by_what_else_it_holds():
    n = 10_000
    assert whole_task_spread(n, 0) == pytest.approx(2 * SAMPLE_WEIGHT_CPU_PERIODS / n)
    assert whole_task_spread(n, n) == pytest.approx(sampled_spread(n) + 2 * SAMPLE_WEIGHT_CPU_PERIODS / n)
    assert whole_task_spread(n, 100) < sampled_spread(n) / 5
    assert whole_task_spread(0, 0) == whole_task_spread(1, 0)   # no sample: no division by 0


def test_a_tasks_sample_weights_add_up_to_its_run_time_but_at_the_ends():
    """Simulated, the sampler's weights (sampling.bpf.h: a sample in a task stands for the task's
    run time since its own previous sample, never more than SAMPLE_WEIGHT_CPU_PERIODS times the
    CPU's time since its previous one): a kthread running in slices of random length between
    other tasks on one CPU, sampled every period from a random phase, read over a window that
    opens and closes at random moments. In each of 200 draws its samples' weights inside the
    window differ from its run time there by less than the ends' allowance, where the same
    figure as a count (samples times the period) strays by several times that."""
    rng = random.Random(2)
    worst_weights = worst_count = 0.0      # the worst error of each, in the draw's allowances
    for _ in range(200):
        # the CPU's timeline in periods: slices of 0.05 to 3, each the kthread's or not
        starts, ran_before, kthread, t, ran = [], [], [], 0.0, 0.0
        while t < 3000:
            d, mine = rng.uniform(0.05, 3.0), rng.random() < 0.5
            starts.append(t)
            ran_before.append(ran)
            kthread.append(mine)
            t, ran = t + d, ran + d * mine
        starts.append(t)

        def run_time(at: float) -> float:    # the kthread's run time up to AT
            i = bisect.bisect_right(starts, at) - 1
            return ran_before[i] + (at - starts[i]) * kthread[i]

        opens, closes = rng.uniform(400, 600), rng.uniform(2400, 2600)
        phase, last, weights, count = rng.random(), None, 0.0, 0
        for k in range(2999):
            at = k + phase
            if not kthread[bisect.bisect_right(starts, at) - 1]:
                continue
            now = run_time(at)
            w = 1.0 if last is None else min(now - last, SAMPLE_WEIGHT_CPU_PERIODS * 1.0)
            last = now
            if opens < at <= closes:
                weights, count = weights + w, count + 1
        truth = run_time(closes) - run_time(opens)
        allowance = whole_task_spread(truth, 0)     # the truth in periods: its samples
        worst_weights = max(worst_weights, abs(weights - truth) / truth / allowance)
        worst_count = max(worst_count, abs(count - truth) / truth / allowance)
    assert worst_weights < 1 < worst_count / 3, (worst_weights, worst_count)
