"""--latency's pure parts: the histogram's buckets as the kernel fills them (lat_bucket() in
bpf/flowtrace/latency.bpf.h, mirrored by steer.model.latency), its quantiles, an interval of
the kernel's running totals, and the plan and figure the option adds."""
import random

import pytest

from steer.abi.flowtrace import FT_LAT_BUCKETS, FT_LAT_SUB
from steer.model.latency import (BUCKETS, SUB, Delays, bucket_bounds, bucket_of, delays,
                                 quantile, since)
from steer.trace.programs import LATENCY_PROGRAMS, SECTIONS, plan


def test_the_mirror_has_the_headers_sizes():
    assert (BUCKETS, SUB) == (FT_LAT_BUCKETS, FT_LAT_SUB)


@pytest.mark.parametrize("ns", [0, 1, 7, 8, 9, 15, 16, 17, 1000, 1023, 1024, 123_456,
                                999_999_999, 2**34 - 1])
def test_each_delay_lies_in_its_buckets_bounds(ns):
    lo, hi = bucket_bounds(bucket_of(ns))
    assert lo <= ns < hi


def test_buckets_tile_the_line_and_are_an_eighth_of_their_power_of_two_wide():
    for b in range(BUCKETS - 1):
        lo, hi = bucket_bounds(b)
        assert bucket_bounds(b + 1)[0] == hi
        assert bucket_of(lo) == b and bucket_of(hi - 1) == b
        if lo >= SUB:
            assert (hi - lo) * SUB <= lo
    assert bucket_of(2**40) == BUCKETS - 1   # everything above 17 s in the last


def test_quantiles_of_a_histogram_are_within_a_bucket_of_the_values():
    rng = random.Random(7)
    values = sorted(rng.uniform(20_000, 2_000_000) for _ in range(20_000))
    hist = [0] * BUCKETS
    for v in values:
        hist[bucket_of(int(v))] += 1
    for q in (0.01, 0.5, 0.9, 0.99):
        exact = values[int(q * (len(values) - 1))]
        lo, hi = bucket_bounds(bucket_of(int(exact)))
        assert abs(quantile(hist, q) - exact) <= hi - lo
    assert quantile([0] * BUCKETS, 0.5) is None


def test_an_interval_of_the_kernels_totals():
    before = ([1] * BUCKETS, BUCKETS, 2, 10_000)
    now = ([3] * BUCKETS, 2 * BUCKETS + BUCKETS, 5, 40_000)
    hist, n, lost, total = since(now, before)
    assert hist == [2] * BUCKETS and n == 2 * BUCKETS and lost == 3 and total == 30_000
    assert since(now, None) == now
    # the flow forgotten by the kernel (LRU) and met again: its counts start over
    assert since(before, now) == before


def test_delays_in_json():
    hist = [0] * BUCKETS
    hist[bucket_of(1_000_000)] = 10
    d = delays(hist, 10, 1, 10_000_000)
    j = d.as_json()
    assert j["samples"] == 10 and j["lost"] == 1 and j["mean_us"] == 1000.0
    assert 937 <= j["p50_us"] <= 1063 and j["p99_us"] >= j["p90_us"] >= j["p50_us"]
    empty = delays([0] * BUCKETS, 0, 4, 0).as_json()
    assert empty == {"samples": 0, "lost": 4, "mean_us": None, "p50_us": None, "p90_us": None,
                     "p99_us": None}
    assert Delays(0, 0, None, {}).as_json()["p50_us"] is None


def test_latency_adds_its_programs_and_its_figure_only_when_asked_for():
    off = plan("auto", "auto", {})
    assert not set(LATENCY_PROGRAMS) & off.programs and "latency" not in off.figures
    on = plan("auto", "auto", {}, latency=True)
    assert set(LATENCY_PROGRAMS) <= on.programs
    assert on.figures["latency"].state == "works"
    # in the exact mode too: the figure is the clock's, not the sampler's
    assert set(LATENCY_PROGRAMS) <= plan("exact", "auto", {}, latency=True).programs


@pytest.mark.parametrize("refused,state,says", [
    ({"ft_lat_queued": "this kernel has no sock:sk_data_ready (Linux 6.5+)"}, "degraded",
     "TCP reads only"),
    ({"ft_lat_read": "the kernel refused x (EPERM: Operation not permitted)"}, "degraded",
     "UDP reads only"),
    ({"ft_lat_arrival": "the kernel refused x (EPERM: Operation not permitted)"}, "missing",
     "not measured"),
])
def test_a_refused_latency_program_says_what_the_figure_lost(refused, state, says):
    f = plan("auto", "auto", refused, latency=True).figures["latency"]
    assert f.state == state and says in f.how
    assert f.why   # and why, from the refusal


def test_each_latency_program_has_its_hook():
    assert {SECTIONS[p] for p in LATENCY_PROGRAMS} == {
        "tp_btf/netif_receive_skb", "tp_btf/skb_copy_datagram_iovec", "tp_btf/sk_data_ready",
        "tp_btf/sock_recv_length"}


def test_flows_json_gets_each_flows_delays_and_the_table_its_sampled_flows():
    from steer.model.latency import interval_delays, with_delays
    from steer.model.samples import FlowId
    from steer.present.latency_view import delays_table
    a = FlowId("tcp", "198.18.0.1", 40000, "198.18.0.2", 5201)
    b = FlowId("udp", "198.18.0.1", 40001, "198.18.0.2", 5202)
    hist = [0] * BUCKETS
    hist[bucket_of(50_000)] = 4
    before = {a: ([0] * BUCKETS, 0, 0, 0)}
    after = {a: (hist, 4, 0, 200_000), b: ([0] * BUCKETS, 0, 1, 0)}
    d = interval_delays(before, after)
    data = {"flows": [{"proto": f.proto, "src": f.src, "sport": f.sport, "dst": f.dst,
                       "dport": f.dport} for f in (a, b)]
            + [{"proto": "tcp", "src": "::1", "sport": 1, "dst": "::1", "dport": 2}]}
    rows = with_delays(data, d)["flows"]
    assert rows[0]["latency"]["arrival_to_read"]["samples"] == 4
    assert rows[1]["latency"]["arrival_to_read"] == {"samples": 0, "lost": 1, "mean_us": None,
                                                      "p50_us": None, "p90_us": None,
                                                      "p99_us": None}
    assert rows[2]["latency"]["arrival_to_read"]["samples"] == 0   # not in the kernel's map
    assert with_delays({"flows": [{}]}, None) == {"flows": [{}]}   # not asked for: untouched
    text = delays_table(d, 10)
    assert str(a) in text and str(b) not in text and " 51us " in text   # in 49.2..53.2 us
    assert "no sampled skb" in delays_table({}, 10)
