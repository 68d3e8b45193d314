"""--latency's pure parts: the histogram's buckets as the kernel fills them (lat_bucket() in
bpf/flowtrace/latency.bpf.h, mirrored by steer.model.latency), its quantiles, an interval of
the kernel's running totals, and the plan and figure the option adds."""
import random

import pytest

from steer.abi.flowtrace import FT_LAT_BUCKETS, FT_LAT_SUB
from steer.model.latency import (BUCKETS, SUB, Delays, Totals, bucket_bounds, bucket_of,
                                 delays, quantile, since)
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


def test_quantile_is_the_first_bucket_whose_running_count_reaches_it():
    """The array form against the plain reading of the rule, on sparse histograms and at the
    ends (q = 0: the first bucket with counts; q = 1: the last)."""
    def reference(hist, q):
        rank, seen = q * sum(hist), 0
        for b, n in enumerate(hist):
            if n and seen + n >= rank:
                lo, hi = bucket_bounds(b)
                return lo + (hi - lo) * max(rank - seen, 0) / n
            seen += n
    rng = random.Random(7)
    for _ in range(200):
        hist = [0] * BUCKETS
        for _ in range(rng.randint(1, 6)):
            hist[rng.randrange(BUCKETS)] += rng.randint(1, 50)
        for q in (0.0, 0.01, 0.5, 0.9, 0.99, 1.0, rng.random()):
            assert quantile(hist, q) == pytest.approx(reference(hist, q)), (hist, q)


def test_an_interval_of_the_kernels_totals():
    before = Totals([1] * BUCKETS, BUCKETS, 2, 10_000, 3, [1] * BUCKETS, [2] * BUCKETS)
    now = Totals([3] * BUCKETS, 3 * BUCKETS, 5, 40_000, 7, [2] * BUCKETS, [5] * BUCKETS)
    t = since(now, before)
    assert list(t.hist) == [2] * BUCKETS and t.samples == 2 * BUCKETS and t.lost == 3
    assert t.sum_ns == 30_000 and t.staged == 4
    assert list(t.hist_stack) == [1] * BUCKETS and list(t.hist_queue) == [3] * BUCKETS
    assert since(now, None) == now
    # the flow forgotten by the kernel (LRU) and met again: its counts start over
    assert since(before, now) == before
    # the kernel's four running counts alone: no stages
    assert since(([2] * BUCKETS, 4, 0, 8), ([1] * BUCKETS, 2, 0, 4)).hist_stack is None


def test_delays_in_json_with_the_stages_where_the_enqueue_was_seen():
    hist, stack, queue = [0] * BUCKETS, [0] * BUCKETS, [0] * BUCKETS
    hist[bucket_of(1_000_000)] = 10
    stack[bucket_of(5_000)] = 8
    queue[bucket_of(990_000)] = 8
    j = delays(Totals(hist, 10, 1, 10_000_000, 8, stack, queue)).as_json()
    r = j["arrival_to_read"]
    assert r["samples"] == 10 and r["lost"] == 1 and r["mean_us"] == 1000.0
    assert 937 <= r["p50_us"] <= 1063 and r["p99_us"] >= r["p90_us"] >= r["p50_us"]
    assert j["arrival_to_queue"]["samples"] == 8 and 4.6 <= j["arrival_to_queue"]["p50_us"] <= 5.4
    assert 920 <= j["queue_to_read"]["p50_us"] <= 1060
    empty = delays(([0] * BUCKETS, 0, 4, 0)).as_json()
    assert empty["arrival_to_read"] == {"samples": 0, "lost": 4, "mean_us": None, "p50_us": None,
                                        "p90_us": None, "p99_us": None}
    assert empty["queue_to_read"] == {"samples": 0, "p50_us": None, "p90_us": None,
                                      "p99_us": None}
    assert empty["reader_wakeup"] == {"wakeups": 0, "cross_core": 0, "mean_us": None,
                                      "p50_us": None, "p90_us": None, "p99_us": None}
    wake = [0] * BUCKETS
    wake[bucket_of(30_000)] = 6
    w = delays(Totals([0] * BUCKETS, 0, 0, 0, 0, None, None, 6, 2, 180_000, wake)).as_json()
    assert w["reader_wakeup"]["wakeups"] == 6 and w["reader_wakeup"]["cross_core"] == 2
    assert w["reader_wakeup"]["mean_us"] == 30.0 and 28 <= w["reader_wakeup"]["p50_us"] <= 32
    assert Delays(0, 0, None, {}).as_json()["arrival_to_read"]["p50_us"] is None


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
     "not UDP reads, the wait's two stages, the reader's wake-ups"),
    ({"ft_lat_read": "the kernel refused x (EPERM: Operation not permitted)"}, "degraded",
     "not TCP reads"),
    ({"ft_lat_switch": "the kernel refused x (EPERM: Operation not permitted)"}, "degraded",
     "not the reader's wake-ups"),
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
        "tp_btf/sock_recv_length", "tp_btf/sched_waking", "tp_btf/sched_switch"}


def test_each_flow_gets_its_delays_in_json_the_table_and_the_live_views_column():
    from rich.console import Console
    from steer.model.latency import NO_DELAYS, interval_delays
    from steer.model.reports import attach_delays
    from steer.present.latency_view import delays_table
    from steer.present.view import ViewState, duration_text, render
    from test_view import A, B, DATA, VM, _snapshot
    from steer.model.topology import read_topology
    hist = [0] * BUCKETS
    hist[bucket_of(50_000)] = 4
    d = interval_delays({A: ([0] * BUCKETS, 0, 0, 0)},
                        {A: (hist, 4, 0, 200_000), B: ([0] * BUCKETS, 0, 1, 0)})
    snap = _snapshot(DATA)
    assert attach_delays(snap, None) is snap   # not asked for: untouched
    snap = attach_delays(snap, d)
    rows = {(f["sport"], f["dport"]): f for f in snap.as_json()["flows"]}
    assert rows[(40000, 5201)]["latency"]["arrival_to_read"]["samples"] == 4
    assert rows[(40001, 9000)]["latency"]["arrival_to_read"] == {
        "samples": 0, "lost": 1, "mean_us": None, "p50_us": None, "p90_us": None, "p99_us": None}
    assert set(rows[(40000, 5201)]["latency"]) == {"arrival_to_read", "arrival_to_queue",
                                                   "queue_to_read", "reader_wakeup"}
    assert all("latency" in f for f in rows.values())   # the ACKs too: not in the kernel's map
    assert next(f for f in snap.flows if f.flow not in d).delays is NO_DELAYS
    text = delays_table(d, 10)
    assert str(A) in text and str(B) not in text and " 51us " in text   # in 49.2..53.2 us
    assert "no sampled skb" in delays_table({}, 10)
    console = Console(width=200, record=True, color_system=None)
    console.print(render(snap, read_topology(VM), width=200, state=ViewState(show_idle=True)))
    view = console.export_text()
    assert "wait p50/p99" in view
    (a,) = [line for line in view.splitlines() if "40000 ->" in line]
    assert "51us/53us" in a
    assert [duration_text(n) for n in (850, 12_345, 3_400_000, 1.2e9)] == \
        ["850ns", "12us", "3.4ms", "1.2s"]


def test_class_waits_only_go_up_and_fold_each_interval_into_its_flows_class():
    from steer.model.latency import EXPORT_BOUNDS, ClassWaits
    w = ClassWaits()
    h1 = [0] * BUCKETS
    h1[bucket_of(40_000)] = 3          # 40 us: le 5e-05
    h2 = list(h1)
    h2[bucket_of(2_000_000)] = 2       # and 2 ms: le 0.0025
    w.fold({b"a": (h1, 3, 0, 120_000)}, lambda keys: [0])
    w.fold({b"a": (h2, 5, 0, 4_120_000)}, lambda keys: [1])   # the flow changed class
    same_core, total = w.buckets(0)
    assert dict(same_core)["5e-05"] == 3 and dict(same_core)["+Inf"] == 3
    assert total == pytest.approx(120e-6)
    socket, total = w.buckets(1)
    assert dict(socket)["5e-05"] == 0 and dict(socket)["0.0025"] == 2 and dict(socket)["+Inf"] == 2
    assert [le for le, _ in socket] == [f"{b:g}" for b in EXPORT_BOUNDS] + ["+Inf"]
    assert total == pytest.approx(4e-3)
    counts = [c for _, c in socket]
    assert counts == sorted(counts)    # cumulative
    # a flow with no traffic in an interval waits for one; the kernel forgetting it starts anew
    w.fold({b"a": (h2, 5, 0, 4_120_000)}, lambda keys: [-1])
    w.fold({b"a": (h1, 3, 0, 120_000)}, lambda keys: [2])
    assert dict(w.buckets(2)[0])["+Inf"] == 3
    assert dict(w.buckets(1)[0])["+Inf"] == 2   # nothing taken back


def test_the_exporter_finds_each_flows_class_by_its_key():
    from steer.model.flowarrays import FLOW, flow_hashes
    from steer.model.numeric import np
    from steer.present.exporter import _classes_of
    keys = [bytes([i]) * 40 for i in range(1, 5)]
    hashes = flow_hashes(np.frombuffer(b"".join(keys), FLOW))
    active = np.array(sorted([hashes[0], hashes[2]]), np.uint64)
    cls = np.array([1 if h == hashes[0] else 2 for h in active])
    assert list(_classes_of(keys, active, cls)) == [1, -1, 2, -1]
    assert list(_classes_of(keys, np.empty(0, np.uint64), np.empty(0, int))) == [-1] * 4


def test_a_cells_flows_sum_to_one_distribution_and_its_figures():
    """summed() adds flows' interval counts bucket by bucket (a stage's histogram missing in one
    leaves it missing in the sum); wait_figures() reads the sum as a sweep run keeps it, and a
    run with no counts as no samples."""
    from steer.model.latency import summed, wait_figures
    def flow(delay_ns, n, wakes, cross):
        hist = [0] * BUCKETS
        hist[bucket_of(delay_ns)] = n
        wake = [0] * BUCKETS
        wake[bucket_of(4_000)] = wakes
        return Totals(hist, n, 1, delay_ns * n, n, list(hist), list(hist), wakes, cross,
                      4_000 * wakes, wake)
    t = summed([flow(10_000, 30, 5, 1), flow(100_000, 70, 15, 15)])
    assert t.samples == 100 and t.lost == 2 and t.wakes == 20 and t.cross_wakes == 16
    assert sum(t.hist) == 100 and t.hist[bucket_of(100_000)] == 70
    f = wait_figures(t)
    lo, hi = bucket_bounds(bucket_of(100_000))
    assert lo / 1e3 <= f["wait_p50_us"] <= hi / 1e3 and f["wait_p99_us"] <= hi / 1e3
    assert f["wait_samples"] == 100 and f["wakeups"] == 20 and f["cross_core_wakeups"] == 16
    assert summed([]) is None
    assert wait_figures(None) == {"wait_samples": 0, "wait_lost": 0, "wait_p50_us": None,
                                  "wait_p90_us": None, "wait_p99_us": None, "wakeups": 0,
                                  "cross_core_wakeups": 0, "wakeup_p50_us": None,
                                  "wakeup_p90_us": None, "wakeup_p99_us": None}
    staged_once = summed([flow(10_000, 3, 0, 0), flow(10_000, 3, 0, 0)._replace(hist_stack=None)])
    assert staged_once.hist_stack is None and staged_once.hist_queue is not None
