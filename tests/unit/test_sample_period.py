"""Each CPU's sampling period (steer.trace.tracer.sample_period): near 1/hz, and no two CPUs of a
big host at the same rate, so that no two sampling timers keep their phase (the tracer's comment
says what a shared phase did to the sender CPU's NET_RX)."""
import itertools

from steer.trace.tracer import SAMPLE_SPREAD, sample_period


def test_every_cpu_samples_near_the_asked_rate_and_no_two_at_the_same():
    for hz in (99, 997, 4999, 9973):
        periods = [sample_period(hz, cpu) for cpu in range(256)]
        nominal = 1e9 / hz
        assert all(abs(p / nominal - 1) <= SAMPLE_SPREAD + 1 / nominal for p in periods)
        # the rates of any two of 256 CPUs differ (the golden-ratio sequence's closest pair is
        # ~1/(256 * 2.6) of the spread apart: at 4,999 Hz their phases drift through a period in
        # under 3 s), and those of CPUs 0 and 1, the lab's, by 2.5% (a period in 8 ms)
        closest = min(abs(a - b) for a, b in itertools.combinations(periods, 2)) / nominal
        assert closest >= 2 * SAMPLE_SPREAD / 256 / 3, (hz, closest)
    assert abs(sample_period(4999, 0) - sample_period(4999, 1)) / (1e9 / 4999) > 0.02
    # the mean rate stays the one asked for
    periods = [sample_period(4999, cpu) for cpu in range(200)]
    assert abs(sum(periods) / len(periods) / (1e9 / 4999) - 1) < 0.002
