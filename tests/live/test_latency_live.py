"""--latency against a truth steer does not compute: a sender that writes its send time into each
message and a reader that sleeps in a known pattern between reads, recording each message's
send-to-read delay by its own clock (tests/support/stamped.py), TCP and UDP, with the reader on
the CPU of the sender and its softirq (same core) and apart from them; over IPv6 (apart, on the
receiving namespace's loopback); and a TCP flow steered (steer pin: generic XDP, a cpumap to its
reader's CPU), whose wait runs from its skb's first pass up the stack, on its sender's CPU
before the redirect, and whose reader its cpumap kthread wakes on the reader's own CPU. steer's arrival-to-read
delays of the same window are a subsample of the same messages, each shorter than the reader's
by the sender's own path to the stack (the send, the stack up to netif_receive_skb) and, for
TCP, by the rest of its read after the copy: so a quantile of steer's lies between the truth's
quantiles around it (the subsample's chance) and less that path below."""
import contextlib
import json
import subprocess
import sys
import time
from typing import NamedTuple

import pytest

from bench.odds import DISPERSION, z_for
from bench.peer import steal_seconds
from helpers import ROOT, alone, live, steer
from steer.experiment.lab import RECEIVER_ADDR, Lab, usable_cpus
from steer.model.latency import BUCKETS, bucket_of, delays, quantile, since
from steer.trace.tracer import Tracer

pytestmark = [live, alone]

STAMPED = f"{ROOT}/tests/support/stamped.py"
# ms the reader sleeps before each burst of reads: one length, whose delays spread evenly from
# the path to it, the steepest distribution around its median a sleeping reader gives (a mix of
# 0.5, 1, 2 and 4 ms spread the median's bounds to +-13%)
PATTERN = "2"
SEND_EVERY_US = 250        # paced: at least half that apart, above the tracer's first gate
# the seven pairs of the delays' test at 250 us made a reader late by more than a flow's 16
# slots now and then (lost samples: each doubles the gate, so the late messages, the tail,
# were sampled thinly: p90 -19% against the truth once); at 500 us over 6 s, as many messages
# as the first four pairs had at 250 us over 4 s, and none lost
ARRIVAL_EVERY_US, WINDOW = 500, 6.0
SETTLE = 0.5
QUANTILES = (0.5, 0.9)


class Pair(NamedTuple):
    """A sender and its reader: the sender's CPU is its softirq's (the veth's and the loopback's
    receive work runs where they send) but where STEERED (steer pin: generic XDP and a cpumap
    to the reader's CPU); over the lab's veth, or over IPv6 on the receiving namespace's
    loopback (the lab's veth has IPv4's benchmarking range alone)."""
    proto: str
    port: int
    sender: int
    reader: int
    ipv6: bool = False
    steered: bool = False

    @property
    def stack(self) -> int:
        """The CPU that takes its data up the stack and wakes its reader."""
        return self.reader if self.steered else self.sender

    @property
    def place(self) -> str:
        return (("same core" if self.sender == self.reader else "apart")
                + (" IPv6" if self.ipv6 else "") + (" steered" if self.steered else ""))


def _pairs(a: int, b: int) -> list[Pair]:
    """Each transport same-core and apart (the first four); IPv6 apart, each transport; TCP
    steered to its reader's CPU, away from its sender's"""
    return [Pair("tcp", 6101, a, a), Pair("udp", 6102, b, b), Pair("tcp", 6103, a, b),
            Pair("udp", 6104, b, a), Pair("tcp", 6105, b, a, ipv6=True),
            Pair("udp", 6106, a, b, ipv6=True), Pair("tcp", 6107, a, b, steered=True)]


FIRST_FOUR = (6101, 6102, 6103, 6104)


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
    return run_delay, int(status["voluntary_ctxt_switches"]), \
        int(status["nonvoluntary_ctxt_switches"])


def _run(tmp_path, pattern: str, window: float, modes=MODES, every_us: int = SEND_EVERY_US,
         ports=None):
    """The four pairs in one lab, a tracer of each of MODES with --latency on it: (pairs,
    {mode: latency totals} before and after the window, the window's (t0, t1) in
    CLOCK_MONOTONIC ns, {port: the reader's (run_delay, voluntary switches) over it}); each
    reader's messages in tmp_path/PORT.json."""
    cpus = usable_cpus()
    if len(cpus) < 2:
        pytest.skip("needs two CPUs: the apart placement")
    pairs = [x for x in _pairs(cpus[0], cpus[1]) if ports is None or x.port in ports]
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
            for x in pairs:
                if x.steered:
                    r = steer("pin", f"proto={x.proto},dport={x.port}", "--cpu", str(x.reader),
                              "--dev", "veth-rx", "--netns", lab.rx)
                    assert r.returncode == 0, r.stderr
                # ip netns exec and taskset exec what they run: the pid is the reader's
                p = subprocess.Popen(["ip", "netns", "exec", lab.rx, "taskset", "-c",
                                      str(x.reader), sys.executable, STAMPED, "read", x.proto,
                                      "::1" if x.ipv6 else RECEIVER_ADDR, str(x.port),
                                      str(seconds), pattern, str(tmp_path / f"{x.port}.json")],
                                     stdout=subprocess.PIPE, text=True)
                procs.append(p)
                readers[x.port] = p.pid
                assert p.stdout.readline().strip() == "listening"
            for x in pairs:
                procs.append(subprocess.Popen(
                    ["ip", "netns", "exec", lab.rx if x.ipv6 else lab.tx, "taskset", "-c",
                     str(x.sender), sys.executable, STAMPED, "send", x.proto,
                     "::1" if x.ipv6 else RECEIVER_ADDR, str(x.port), str(seconds + 1),
                     str(every_us)]))
            time.sleep(SETTLE)
            t0, stolen = time.monotonic_ns(), steal_seconds(cpus[:2])
            # the readers' counts just before and just after each of steer's reads: what they
            # slept while steer read is the truth's own spread (a read takes tens of ms, longer
            # when the host steals, and each reader sleeps ~3,000 times a second)
            def reader_counts():
                return {port: _reader_counts(pid) for port, pid in readers.items()}
            counts0 = reader_counts()
            before = {m: t.latency_totals() for m, t in tracers.items()}
            counts0_after = reader_counts()
            time.sleep(window)
            counts1_before = reader_counts()
            after = {m: t.latency_totals() for m, t in tracers.items()}
            counts1 = reader_counts()
            t1, stolen = time.monotonic_ns(), steal_seconds(cpus[:2]) - stolen
            for p in procs:
                p.wait(timeout=seconds + 30)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            if any(x.steered for x in pairs):
                steer("reset")
    assert all(p.returncode == 0 for p in procs), [p.returncode for p in procs]
    # the window's counts from the reads around it, and the sleeps it surely holds (between the
    # reads just after steer's first and just before its second)
    counts = {port: (*(b - a for a, b in zip(counts0[port], counts1[port])),
                     counts1_before[port][1] - counts0_after[port][1]) for port in readers}
    return pairs, before, after, (t0, t1, stolen), counts


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
    -5%..+2%, so a figure 0.85x or 1.15x the truth's falls outside them but where the truth's
    own tail is long that run (a p90 bound of +21% once, the reader late on a busy VM); too few
    samples for bounds within 10 quantile points (q -+ 0.10: about +-20% at p50) fail the test
    rather than pass a gross error. The two stages, arrival
    to the queue and the queue to the read, are held to the total and the path (below): their
    split has no truth of its own here (the stack's part is 1-2 us at p50, 5-8 us at p99)."""
    pairs, before, after, (t0, t1, _), _ = _run(tmp_path, PATTERN, WINDOW, every_us=ARRIVAL_EVERY_US)
    modes = tuple(before)
    z = z_for(len(modes) * len(pairs) * len(QUANTILES))
    for x in pairs:
        proto, port, place = x.proto, x.port, x.place
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
                assert ranks < 0.10, (name, ours.samples, ranks)   # enough samples
            # the stages: every sample's enqueue seen (TCP: its sequence number below rcv_nxt at
            # a readable socket; UDP: its socket found there); the stack's part is a part of the
            # path, which the reader's quickest messages bound; and the queue's part is the
            # rest of each delay: its median within the total's, less the stack's p99, and a
            # bucket's width (1/8) either way for the two quantiles' interpolation
            stack, queue, total = ours.stack_ns, ours.queue_ns, ours.quantiles_ns
            assert ours.staged >= 0.99 * ours.samples, ours
            # each sample's part is within its whole, so each quantile of the part is within the
            # whole's (and a bucket's width); and the stack's median within the quickest
            # messages' whole path (its p99 too with four pairs, not with seven: 40 us against
            # a path of 38; steered, its cpumap hop to the reader's CPU waits behind the reader
            # now and then, p99 ~2 ms)
            for q in (0.5, 0.99):
                assert stack[q] <= total[q] * 9 / 8, (q, stack, total)
            assert stack[0.5] < path, (stack, path)
            assert total[0.5] - stack[0.99] - total[0.5] / 8 <= queue[0.5] <= total[0.5] * 9 / 8, \
                (queue, total, stack)


def test_the_readers_wakeups_by_its_data_against_the_schedulers_account(tmp_path, held):
    """Readers that block in each read (pattern 0): every read that finds no message sleeps and
    is woken by the next one's arrival. The scheduler counts each sleep (voluntary switches in
    /proc/PID/status) and each wait on a run queue (schedstat's run_delay). steer counts the
    wake-ups of a socket's last reader that a flow's data made (sock:sk_data_ready, then
    sched_waking of that reader on that CPU) and times each from sched_waking to the reader's
    switch in. One tracer, the default mode's (the wake-up programs are the same in every mode):

    - the count, per pair, against the reader's voluntary switches (the reader sleeps nowhere
      else while it reads; its end, the JSON written after the window, is outside), read just
      before and just after each of steer's reads: at most those around both reads, to the
      switch or two that straddle them (+5), and at least 95% of those surely between them.
      Each reader sleeps ~3,000 times a second and a read of its counts and steer's takes tens
      of ms (longer when the host steals), so the two counts are 150-450 apart: held to the
      sleeps around the reads, steer read 89.6% once (a clean clone whose host stole 138 CPU-s)
      and 95-98% in calm runs, and every figure since lies between the two (16 of 16, 1.1-5.0%
      above the inner count). Below it by chance: the wake-ups not made by data (the kernel's
      event tracing: 0.5-1.1% of the readers' wakings came with no sk_data_ready on that CPU
      within 20 us: the poll's timeout and the like), and steer's own misses (a reader woken
      over 20 us after its data's sk_data_ready, or with none noted: 0.2-0.3%, counted by a
      trial build), which a host's steal between the two stretches;
    - cross-core: the reader on its sender's CPU is woken there (none counted cross-core), and
      so is the steered flow's by its cpumap kthread on the reader's CPU; apart it is woken from
      the sender's (all of them, but 1%);
    - the time, where the reader shares the CPU that wakes it: the scheduler's run_delay is the same
      waits from the enqueue, which follows sched_waking by the wake-up's own path (the
      programs on sched_waking among it: ~1.6 us a wake-up here), plus the waits after
      preemptions, which steer does not count: measured -2.6%..+5.6% against it, held to
      -10%..+5% plus 3 us a wake-up (the steered reader's from above only: its waker, the
      cpumap kthread, preempts it on its CPU). The low bound is widened by the CPU-seconds the
      host took from the two CPUs over the window against run_delay, as bench.accuracy widens
      its peer's: the host's steal stretches the readers' runs, so the senders' timers preempt
      them more (-10% to -14% in three runs that lost 2-4 CPU-s to the host in 15 s; -2% to -5%
      in three that lost under 1). Apart, steer's wait also holds the wake-up's trip to the
      other CPU (an IPI, a vCPU out of its halt: +25 us a wake-up here), which run_delay does
      not: held above 0.9x it.
    Exact: no chance term (counts, and sums of the same intervals)."""
    # the first four pairs alone, as the time's bounds were measured (with all seven, their
    # readers were preempted more and the same-core time read -5% to -13%); then the others,
    # with an IPv4 TCP reader beside the IPv6 ones on their CPUs (a wake-up's flow key once
    # kept an IPv6 flow's address bytes: no IPv4 TCP wake-up was counted after one)
    quiet = _run(tmp_path, "0", 2.0, modes=("sampled",), ports=FIRST_FOUR)
    busy = _run(tmp_path, "0", 2.0, modes=("sampled",), ports=(6101, 6105, 6106, 6107))
    for (pairs, before, after, (_, _, stolen), counts), timed in ((quiet, True), (busy, False)):
        _hold_wakeups(pairs, before, after, counts, timed, stolen, held)


def _hold_wakeups(pairs, before, after, counts, timed: bool, stolen: float, held) -> None:
    for x in pairs:
        proto, port, place = x.proto, x.port, x.place
        run_delay, slept, preempted, surely_slept = counts[port]
        for mode in before:
            (fid,) = [f for f in after[mode] if f.proto == proto and f.dport == port]
            d = delays(since(after[mode][fid], before[mode].get(fid)))
            wake_sum = (d.wake_mean_ns or 0) * d.wakes
            print(f"{mode} {proto} {place}: {d.wakes} wake-ups ({d.cross_wakes} cross-core), "
                  f"{wake_sum / 1e6:.1f} ms; the scheduler: {slept} sleeps, {preempted} "
                  f"preemptions, run_delay {run_delay / 1e6:.1f} ms; {surely_slept} sleeps "
                  f"between steer's reads")
            assert slept > 1000, slept
            held(f"{mode} {proto} {place} wake-ups / the sleeps between steer's reads",
                 d.wakes / surely_slept, 0.95, (slept + 5) / surely_slept)
            cross = d.cross_wakes / d.wakes
            assert (cross <= 0.01) if x.stack == x.reader else (cross >= 0.99), d
            if not timed and not x.steered:
                continue
            if x.stack == x.reader:
                # steered, the cpumap kthread that woke the reader shares its CPU and preempts
                # it as packets come (-11% once): run_delay's waits after those have no part in
                # a wake-up's, so only the upper bound holds there
                where = "steered" if x.steered else "same core"
                low = -1.0 if x.steered else -0.10 - min(1.0, stolen / (run_delay / 1e9))
                held(f"{mode} {proto} {where} wake-up time vs run_delay",
                     wake_sum / run_delay - 1, low, 0.05 + 3e3 * d.wakes / run_delay)
            else:
                assert wake_sum > 0.9 * run_delay, (wake_sum, run_delay)
