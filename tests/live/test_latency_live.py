"""--latency against a truth steer does not compute: a sender that writes its send time into each
message and a reader that sleeps in a known pattern between reads, recording each message's
send-to-read delay by its own clock (tests/support/stamped.py), TCP and UDP, with the reader on
the CPU of the sender and its softirq (same core) and apart from them. steer's arrival-to-read
delays of the same window are a subsample of the same messages, each shorter than the reader's
by the sender's own path to the stack (the send, the stack up to netif_receive_skb) and, for
TCP, by the rest of its read after the copy: so a quantile of steer's lies between the truth's
quantiles around it (the subsample's chance) and less that path below."""
import contextlib
import json
import subprocess
import sys
import time

import pytest

from bench.odds import DISPERSION, z_for
from helpers import ROOT, live
from steer.experiment.lab import RECEIVER_ADDR, Lab, usable_cpus
from steer.model.latency import BUCKETS, bucket_of, delays, quantile, since
from steer.trace.tracer import Tracer

pytestmark = live

STAMPED = f"{ROOT}/tests/support/stamped.py"
# ms the reader sleeps before each burst of reads: one length, whose delays spread evenly from
# the path to it, the steepest distribution around its median a sleeping reader gives (a mix of
# 0.5, 1, 2 and 4 ms spread the median's bounds to +-13%)
PATTERN = "2"
SEND_EVERY_US = 250        # paced: at least half that apart, above the tracer's first gate
SETTLE, WINDOW = 0.5, 4.0
QUANTILES = (0.5, 0.9)


def _pairs(a: int, b: int):
    """(proto, port, sender CPU = its softirq's, reader CPU): each transport same-core and apart"""
    return [("tcp", 6101, a, a), ("udp", 6102, b, b), ("tcp", 6103, a, b), ("udp", 6104, b, a)]


def _histogram(values) -> list[int]:
    h = [0] * BUCKETS
    for v in values:
        h[bucket_of(v)] += 1
    return h


MODES = ("sampled", "exact")


def _reader_counts(pid: int) -> tuple[int, int]:
    """(run_delay ns, voluntary switches) of a task: the scheduler's own account of its waits
    on a run queue (schedstat's second field) and of the times it slept"""
    with open(f"/proc/{pid}/schedstat") as f:
        run_delay = int(f.read().split()[1])
    with open(f"/proc/{pid}/status") as f:
        status = dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)
    return run_delay, int(status["voluntary_ctxt_switches"])


def _run(tmp_path, pattern: str, window: float, modes=MODES):
    """The four pairs in one lab, a tracer of each of MODES with --latency on it: (pairs,
    {mode: latency totals} before and after the window, the window's (t0, t1) in
    CLOCK_MONOTONIC ns, {port: the reader's (run_delay, voluntary switches) over it}); each
    reader's messages in tmp_path/PORT.json."""
    cpus = usable_cpus()
    if len(cpus) < 2:
        pytest.skip("needs two CPUs: the apart placement")
    pairs = _pairs(cpus[0], cpus[1])
    seconds = SETTLE + window + 2
    procs, readers = [], {}
    tracers = {}
    with contextlib.ExitStack() as stack:
        for mode in modes:
            tracers[mode] = stack.enter_context(Tracer(timing=mode, latency=True))
        lab = stack.enter_context(Lab([], seconds=seconds))
        # a message an skb: TCP would otherwise cork a small write behind one not yet gone
        subprocess.run(["ip", "netns", "exec", lab.tx, "sysctl", "-qw",
                        "net.ipv4.tcp_autocorking=0"], check=True)
        try:
            for proto, port, _, reader in pairs:
                # ip netns exec and taskset exec what they run: the pid is the reader's
                p = subprocess.Popen(["ip", "netns", "exec", lab.rx, "taskset", "-c", str(reader),
                                      sys.executable, STAMPED, "read", proto, RECEIVER_ADDR,
                                      str(port), str(seconds), pattern,
                                      str(tmp_path / f"{port}.json")],
                                     stdout=subprocess.PIPE, text=True)
                procs.append(p)
                readers[port] = p.pid
                assert p.stdout.readline().strip() == "listening"
            for proto, port, sender, _ in pairs:
                procs.append(subprocess.Popen(
                    ["ip", "netns", "exec", lab.tx, "taskset", "-c", str(sender), sys.executable,
                     STAMPED, "send", proto, RECEIVER_ADDR, str(port), str(seconds + 1),
                     str(SEND_EVERY_US)]))
            time.sleep(SETTLE)
            t0 = time.monotonic_ns()
            counts0 = {port: _reader_counts(pid) for port, pid in readers.items()}
            before = {m: t.latency_totals() for m, t in tracers.items()}
            time.sleep(window)
            after = {m: t.latency_totals() for m, t in tracers.items()}
            counts1 = {port: _reader_counts(pid) for port, pid in readers.items()}
            t1 = time.monotonic_ns()
            for p in procs:
                p.wait(timeout=seconds + 30)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    assert all(p.returncode == 0 for p in procs), [p.returncode for p in procs]
    counts = {port: tuple(b - a for a, b in zip(counts0[port], counts1[port])) for port in readers}
    return pairs, before, after, (t0, t1), counts


def test_arrival_to_read_delays_against_the_readers_own_clock(tmp_path, held):
    """Each pair's p50 and p90 of steer's arrival-to-read delays against the reader's send-to-read
    delays of the messages it read inside the tracer's window, both put through the same
    buckets (steer.model.latency), so that only the subsample's chance and the path differ. Both
    timing modes at once, each a tracer of its own on the same traffic: the latency programs are
    the same in both, beside different programs on the same tracepoints.

    Bounds, from the model of the error: steer's N samples of a quantile q stray by chance as a
    binomial rank, sqrt(q (1 - q) / N), widened by the house's DISPERSION (2: a reader's burst
    holds several samples whose delays move together) and held at z for the 8 figures at once
    (bench.odds: 1 in 10,000 for the test); the truth's own quantiles at q -+ that many ranks are
    the bounds, and the low one less the path, taken as the truth's own 1st percentile (a
    message read at once: the send, the stack and the wake-up, which steer counts in part).
    Measured: -3.6%..-0.4% at p50 and -2.1%..-0.4% at p90 against bounds of about -11%..+7% and
    -5%..+2%, so a figure 0.85x or 1.15x the truth's falls outside them; bounds wider than
    +-20% (too few samples) fail the test rather than pass a gross error. The two stages, arrival
    to the queue and the queue to the read, are held to the total and the path (below): their
    split has no truth of its own here (the stack's part is 1-2 us at p50, 5-8 us at p99)."""
    pairs, before, after, (t0, t1), _ = _run(tmp_path, PATTERN, WINDOW)
    modes = tuple(before)
    z = z_for(len(modes) * len(pairs) * len(QUANTILES))
    for proto, port, sender, reader in pairs:
        place = "same core" if sender == reader else "apart"
        with open(tmp_path / f"{port}.json") as f:
            read = [d for when, d in json.load(f) if t0 <= when <= t1]
        truth = _histogram(read)
        path = quantile(truth, 0.01)
        print(f"{proto} {place}: the reader's {len(read)} messages: "
              + ", ".join(f"p{round(q * 100)} {quantile(truth, q) / 1e3:.0f} us"
                          for q in (0.01, *QUANTILES)))
        assert len(read) > 5000, len(read)
        for mode in modes:
            (fid,) = [f for f in after[mode] if f.proto == proto and f.dport == port]
            ours = delays(since(after[mode][fid], before[mode].get(fid)))
            print(f"  {mode}: {ours.as_json()}")
            assert ours.samples > 1000, ours
            for q in QUANTILES:
                ranks = z * DISPERSION * (q * (1 - q) / ours.samples) ** 0.5
                want = quantile(truth, q)
                low = (quantile(truth, max(q - ranks, 0.0)) - path) / want - 1
                high = quantile(truth, min(q + ranks, 1.0)) / want - 1
                name = f"{mode} {proto} {place} p{round(q * 100)} vs the reader's clock"
                held(name, ours.quantiles_ns[q] / want - 1, low, high)
                assert -0.20 < low and high < 0.20, (name, low, high)
            # the stages: every sample's enqueue seen (TCP: its sequence number below rcv_nxt at
            # a readable socket; UDP: its socket found there); the stack's part is a part of the
            # path, which the reader's quickest messages bound; and the queue's part is the
            # rest of each delay: its median within the total's, less the stack's p99, and a
            # bucket's width (1/8) either way for the two quantiles' interpolation
            stack, queue, total = ours.stack_ns, ours.queue_ns, ours.quantiles_ns
            assert ours.staged >= 0.99 * ours.samples, ours
            assert stack[0.99] < path, (stack, path)
            assert total[0.5] - stack[0.99] - total[0.5] / 8 <= queue[0.5] <= total[0.5] * 9 / 8, \
                (queue, total, stack)


def test_the_readers_wakeups_by_its_data_against_the_schedulers_account(tmp_path, held):
    """Readers that block in each read (pattern 0): every read that finds no message sleeps and
    is woken by the next one's arrival. The scheduler counts each sleep (voluntary switches in
    /proc/PID/status) and each wait on a run queue (schedstat's run_delay). steer counts the
    wake-ups of a socket's last reader that a flow's data made (sock:sk_data_ready, then
    sched_waking of that reader on that CPU) and times each from sched_waking to the reader's
    switch in. One tracer, the default mode's (the wake-up programs are the same in every mode):

    - the count, per pair, is at most the reader's voluntary switches (the reader sleeps
      nowhere else while it reads; its end, the JSON written after the window, is outside), to
      the switch or two that straddle the window's reads (+5), and at least 95% of them: 0.02%
      to 0.2% fewer in some runs, 1.3% to 1.8% fewer in others (bpftrace saw the reader woken
      through sock_def_readable with no sk_data_ready on that CPU left to match; the cause is
      not found yet, so the figure is "at least");
    - cross-core: the reader on its sender's CPU is woken there (none counted cross-core),
      apart it is woken from the sender's (all of them, but 1%);
    - the time, where the reader shares the sender's CPU: the scheduler's run_delay is the same
      waits from the enqueue, which follows sched_waking by the wake-up's own path (the
      programs on sched_waking among it: ~1.6 us a wake-up here), plus the waits after
      preemptions, which steer does not count: measured -2.6%..+5.6% against it, held to
      -10%..+5% plus 3 us a wake-up. Apart, steer's wait also holds the wake-up's trip to the
      other CPU (an IPI, a vCPU out of its halt: +25 us a wake-up here), which run_delay does
      not: held above 0.9x it.
    Exact: no chance term (counts, and sums of the same intervals)."""
    pairs, before, after, _, counts = _run(tmp_path, "0", 2.0, modes=("sampled",))
    for proto, port, sender, reader in pairs:
        place = "same core" if sender == reader else "apart"
        run_delay, slept = counts[port]
        for mode in before:
            (fid,) = [f for f in after[mode] if f.proto == proto and f.dport == port]
            d = delays(since(after[mode][fid], before[mode].get(fid)))
            wake_sum = (d.wake_mean_ns or 0) * d.wakes
            print(f"{mode} {proto} {place}: {d.wakes} wake-ups ({d.cross_wakes} cross-core), "
                  f"{wake_sum / 1e6:.1f} ms; the scheduler: {slept} sleeps, run_delay "
                  f"{run_delay / 1e6:.1f} ms")
            assert slept > 1000, slept
            assert 0.95 * slept <= d.wakes <= slept + 5, (d.wakes, slept)
            cross = d.cross_wakes / d.wakes
            assert (cross <= 0.01) if sender == reader else (cross >= 0.99), d
            if sender == reader:
                held(f"{mode} {proto} same core wake-up time vs run_delay",
                     wake_sum / run_delay - 1, -0.10, 0.05 + 3e3 * d.wakes / run_delay)
            else:
                assert wake_sum > 0.9 * run_delay, (wake_sum, run_delay)
