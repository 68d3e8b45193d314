"""The odds model every statistical bound of the live tests and bench.accuracy rests on
(bench/odds.py): how many standard deviations a bound allows for the odds it aims at, and that a
bound so made still catches a 1.4x error where its figure rests on enough samples."""
import random

import pytest

from bench.odds import DISPERSION, ODDS, chance_of, sampled_spread, z_for


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
