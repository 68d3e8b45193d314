"""How true each timing mode's figures are, scenario by scenario, against independent truths.

The truths are what steer does not compute: iperf3's received bytes, the receiving namespace's
own count of UDP datagrams (a UDP flow mid-run), libbpf-tools `softirqs` (the
NET_RX time of the host), each CPU's NET_RX softirqs bracketed less the brackets' own cost
(bench.peer.NetRxBrackets, bpf/truth.bpf.c), the scheduler's on-CPU time (/proc/PID/schedstat)
of the cpumap and threaded-NAPI kthreads and of a reader that does nothing but recv()
(bench/recv_only.c), and that reader's own byte count.

    sudo .venv/bin/python -m bench.accuracy [--seconds 4] [--modes sampled,exact]

Each scenario runs once per mode, the tracer alone (a perf-event program does not run while
another BPF program runs on its CPU, so two tracers would hide part of each other). A figure is
steer's over the truth's, for the same traffic (bytes: the whole run, and a UDP flow's also
over the window; time: rates over a window of steady traffic, as the truths' windows are not
aligned to the microsecond). BOUNDS say what
each (truth, mode) is held to; tests/live/test_bench.py runs the whole matrix and fails on a
figure outside them, and writes bench/results/accuracy.md, which the README includes.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable

from steer.experiment.lab import NETNS_DIR, RECEIVER_ADDR, Lab, LabFlow, usable_cpus
from steer.model.flows import build_snapshot
from steer.model.topology import read_topology
from steer.trace.tracer import DEFAULT_SAMPLE_HZ, Tracer, sample_period
from steer.trace.windows import DEFAULT_CYCLE, DEFAULT_WINDOW, WindowsError, parse_windows

from .bystanders import Bystanders, text as bystanders_text
from .common import RESULTS, build_c, host, parser, require_root, run, write
from .odds import (DISPERSION, ODDS, SAMPLE_WEIGHT_CPU_PERIODS, classified_spread,
                   sampled_spread, whole_task_spread, z_for)
from .peer import (NetRxBrackets, PeerStartError, runtime_between, schedstat_runtime,
                   softirqs_reading, softirqs_tool, steal_seconds, task_pids, udp_datagrams,
                   wait_attached, MID_SOFTIRQ_NS)
from .unseen import UnseenReceive, bytes_between

SETTLE = 1.0        # seconds of traffic before a window opens
# seconds of traffic after the window: the softirqs peer's window runs from its attach (~0.1-0.3 s
# after its start) for the window's length, and must end on steady traffic; 1 s leaves room for
# an attach 3 times as slow (2 s did too, at 16 s more of the live test). The lab's iperf3
# counts whole seconds (steer.experiment.lab rounds its seconds): no shorter tail is to be had
TAIL = 1.0
MODES = ("sampled", "exact")
READER_PORT = 5299

# the share of the sampler's expiries inside NET_RX that steer does not count as NET_RX, at
# most, by scenario (the brackets' own share and the rest: BOUNDS' "the clock's expiries in
# NET_RX"), for the binomial spread of a row's count
LANDING_MISSED = 0.095
# of the sampler's expiries inside NET_RX softirqs that took no packet in (RPS's IPIs sent), the
# share steer charges to a flow, at most: 2.4% to 9% in scenario 9 (3 runs, 2026-12-02), ~5% by
# bpftrace's profile
LANDING_LEAK = 0.15

# (truth, mode) -> (low, high) of steer / truth - 1. From the live tests' measurements (their
# comments say how): the exact mode brackets kthreads and readers from switch in to switch out
# and adds the head the scheduler charges before the switch in (a wake-up's): cpumap kthread and
# reader read -4.4% to -0.3% over 38 runs of this matrix and of the live tests, so -10% is over
# 5 spreads away and a figure 0.85x or 1.15x off fails either bound; with the softirqs other than
# NET_RX it runs (kthread_softirq_seconds: the sending TCP's pacing timers), the NAPI kthread reads
# +1.1% to +1.7% (exact) and -0.1% to +0.3% (sampled) over 6 runs, so the same bounds hold it;
# bytes are the socket's or the stack's own.

BOUNDS = {
    # what reached the stack (exact: retransmitted segments twice) or the socket (sampled: also
    # what iperf3's server left unread at the end); what the kernel took in where no BPF program
    # runs (bench.unseen) is measured in each run and widens the lower bound by its size
    ("iperf3 bytes", "sampled"): (-0.0005, 0.03),
    ("iperf3 bytes", "exact"): (-0.0005, 0.03),
    # the peer tool, libbpf-tools `softirqs`: its window opens when it has attached its
    # programs (bench.peer.wait_attached sees its links) and shuts when it reads them, the
    # window's length later, where the tracer's is read too; its clock counts a host preemption
    # inside a softirq as NET_RX, the run clock leaves it out, so the steal inside the brackets
    # over its window comes off its reading (before, with the window taken as opening 0.4 s
    # after its start and that steal left in, the exact mode read -2.4% on a calm host, sd
    # 1.3%, -7.7% at worst, over 175 figures of the suite's record, and -17% to -84% where the
    # host took from the CPUs). Its own cost sits inside its brackets, and a softirq under way
    # at its attach, timed from 0, comes off (bench.peer.softirqs_reading). So the exact mode
    # read -1.0% to -2.6% against it (32 figures of 5 scenarios in 7 runs, sd 0.5%, 2026-12-02;
    # UDP's 175,000 softirqs a second the lowest): -10%..+5% lies 5.7 of the old spreads from
    # the old mean, and fails a figure 0.85x or 1.15x off. The bounds widen either way by the
    # steal the host took over the tool's start and end, which may lie in its window and not in
    # the brackets' (truth_spread). What the
    # figures are held to closely is the brackets (bench.peer.NetRxBrackets), read over the
    # tracer's own window and less their own cost: the exact mode +1.8% to +4.1% (30 figures,
    # 5 scenarios, 6 runs, 2026-11-29; the truth's exit program runs inside steer's brackets,
    # as per CPU), so -5%..+12% lies 4 spreads and more away and fails a figure 0.85x or 1.15x
    # off; the sampled -16.4% to -0.5% at 9,973 Hz (10 figures, 2 runs, with no peer tool
    # beside it: IPv6 lowest, then UDP; -20% to +3% before, when `softirqs` ran in the sampled
    # runs too and its entry program's cost sat inside the brackets), as per CPU
    ("softirqs NET_RX", "exact"): (-0.10, 0.05),
    ("NET_RX brackets", "sampled"): (-0.25, 0.10),
    ("NET_RX brackets", "exact"): (-0.05, 0.12),
    ("NET_RX per CPU", "sampled"): (-0.15, 0.15),
    # against the brackets less their own cost: +2.8% to +4.2% over 8 runs (16 figures, sd 0.4%),
    # in part the truth's exit program, which runs inside the exact mode's brackets (the truth is
    # attached first; its entry programs run outside them); both bounds lie 20 spreads away and
    # fail a figure 0.85x or 1.15x off. bpftrace's brackets read 4-7% higher (its own cost)
    ("NET_RX per CPU", "exact"): (-0.05, 0.12),
    # with the NET_RX softirqs the kthread runs after each batch (kthread_net_rx_seconds: the
    # backlog its TCP filled through the veth, a fifth of its time steered to its reader's CPU,
    # which the figure left out and the sampled mode read -17% to -23% without, the exact -3% to
    # -7%): sampled -2.9% to +0.3%, exact -0.4% to +1.0% (scenarios 3 and 4, 3 runs each), so
    # +-5% beyond the samples' own allowance lies 2 spreads and more from each. That allowance is
    # the window's ends and the NET_RX on other tasks the figure holds, not the whole as a count
    # (bench.odds.whole_task_spread: 0.2-1.3% at 9,973 Hz in 3 s, where a count's was ~9%), so
    # a sampled figure 0.85x or 1.15x off fails too (2026-12-01).
    # In windows the truth is the same: the sampler runs all the time (sampling.bpf.h).
    # The exact mode over the last ~40 clean clones' matrices (bench/results/suite.json): the
    # cpumap kthread on the reader's CPU +1.2% (sd 0.4%, 0 to +1.8%), on another CPU +0.7%
    # (-1.1% to +1.5% but once +12.6%, a run the host took from), the threaded-NAPI kthread
    # +2.1% (sd 0.6%, +1.0% to +3.7%), the recv()-only reader -2.0% (sd 0.7%, -3.3% to -0.5%
    # but five runs +4.5% to +7.5%, all in the host's busy hours: each of these schedstat
    # truths' bounds widen by its CPU's steal, steal_spread). So +-5%, 4.6 spreads and more
    # from each mean on a calm host, where it fails a figure 0.85x or 1.15x off; -10% before.
    # Two of ten matrices in the suite on 2026-11-30 read the cpumap kthread on the reader's
    # CPU +4.9% and +6.4% (the latter failed CI), never alone (10 runs +0.5% to +0.9%): its
    # truth was then read after the tracer's read, by a scan of /proc, on CPUs that iperf3 and
    # the kthread kept busy, and each read's moment taken after it; now the truths are read
    # beside the tracer's read (their spread widens the bounds: 0-0.5% here) and compared count
    # for count. And the exact mode now ends a kthread's run where the scheduler does
    # (syscall.bpf.h, run_end): +0.0% to +0.4% there (4 runs), the NAPI kthread +0.8% to +1.4%
    ("cpumap kthread", "sampled"): (-0.05, 0.05),
    ("cpumap kthread", "exact"): (-0.05, 0.05),
    ("NAPI kthread", "sampled"): (-0.05, 0.05),
    ("NAPI kthread", "exact"): (-0.05, 0.05),
    # sampled, 24 runs of the matrix: mean -0.3%, sd 0.5%
    ("reader schedstat", "sampled"): (-0.05, 0.05),
    ("reader schedstat", "exact"): (-0.05, 0.05),
    # count for count: steer's NET_RX samples against the sampler's clock expiries that began
    # inside NET_RX brackets (the truth's hrtimer_expire_entry on the sampler's own event), apart
    # from where the clock lands, which in this VM at 9,973 Hz is 31% short to 17% over NET_RX's
    # share of the time, by scenario and run (docs/testing.md). What steer
    # leaves out is the samples in a NET_RX softirq before net_rx_action takes its
    # bpf_net_context and after it lets go: the brackets' own programs, whose share of the
    # brackets' time each run measures (NetRxBrackets' raw less ns: 4.4% to 6.9% of it here,
    # 245-517 ns a softirq, where 2.8-3.8% had been taken as fixed: the UDP scenario then read
    # -8.6% to -9.0% against a -8.6% bound, clean clones 169, 171 and 172), and handle_softirqs'
    # own code around the action, the rest. Each row's bounds are its own brackets' share
    # (landing_rows' shift) beyond these, the rest's range over the matrix's scenarios: 1.0% to
    # 3.0% of the expiries over 15 figures of 3 runs (2026-12-01), per-scenario means 1.2% to
    # 2.4%, with LANDING_MISSED's binomial spread on the row's expiries at the suite's odds
    # beside them. A figure 0.85x off reads ~-20% and fails; 1.15x, ~+6%, fails
    ("the clock's expiries in NET_RX", "sampled"): (-0.025, -0.011),
    # flow by flow: per CPU of scenario 9, the samples charged to the lab's flows there against
    # the expiries in the softirqs that took packets in, which RPS gives to those flows alone
    # (flows_landing_rows): what steer leaves out of them as above, each row's shift its own
    # in-taking brackets' share (3.1-3.3% on the TCP CPU, 7.6-7.9% on the UDP one), and above,
    # the samples of the softirqs that only sent IPIs that go to a flow (LANDING_LEAK). 6 runs
    # (2026-12-02, 3 s): -3.6% to -4.6% and -5.1% to -8.6% within about -13%..+3% and
    # -14%..+3%; with --mutate 0.85 and 1.15 each fails (-17.8%, -22.4%; +11.5%, +6.0%), where
    # the flows' seconds per CPU, on 1,500 samples a CPU and the sampled NET_RX's bias, hold
    # -57%..+32% and do not
    ("the clock's expiries in NET_RX that took packets in", "sampled"): (-0.025, -0.011),
    # a UDP reader's: its connect datagram (4 bytes) too; where the kernel refuses fexit, the
    # sampled mode's reads of the moment from the first datagram to the tracepoint program's
    # attach not: the tracer measures that moment, and the lower bound widens by what the flows'
    # rates let arrive in it (unwatched_bytes). Before it did, the row read 0 to -0.09% in 20
    # clean clones and -0.12% in one whose host stole 12-25% of the CPUs (clone 178)
    ("iperf3 reader bytes", "sampled"): (-0.001, 0.0001),
    ("iperf3 reader bytes", "exact"): (-0.001, 0.0001),
    # a UDP flow mid-flow, against its namespace's datagrams read just before and just after
    # each of the tracer's reads (the truth's spread, 0.03% to 0.35% here, is added either way):
    # -0.08% to +0.07% over 3 runs of both modes (12 figures, all inside their spread). In
    # windows (a window's count stands for its cycle) a sender with a CPU to spare read -2.7% to
    # -0.2% in 7 runs of 4 s at 99 Hz, a ~2% spread of 8 cycles: +-5%, as test_windows_live
    # holds its paced flow. A sender with none to spare slows inside the windows and falls
    # outside (-10% to -14% at 99 Hz, the matrix's truths loading its CPU): what the windows
    # cost, which these rows show (docs/how-it-measures.md). Both fail a figure 0.85x or 1.15x off
    ("the namespace's datagrams", "sampled"): (-0.002, 0.002),
    ("the namespace's datagrams", "exact"): (-0.002, 0.002),
    ("the namespace's datagrams", "windows"): (-0.05, 0.05),
    ("the namespace's datagrams read", "sampled"): (-0.002, 0.002),
    ("the namespace's datagrams read", "exact"): (-0.002, 0.002),
    ("the namespace's datagrams read", "windows"): (-0.05, 0.05),
    # the NET_RX softirqs in which no NAPI poll took packets in (RPS's IPIs, scenario 9)
    # against the CPU's unattributed NET_RX: as per CPU (the scenario's sampled bias)
    ("NET_RX that took nothing in", "sampled"): (-0.25, 0.10),
    ("NET_RX that took nothing in", "exact"): (-0.05, 0.12),
    ("reader bytes", "sampled"): (0.0, 0.0),
    ("reader bytes", "exact"): (0.0, 0.0),
}


@dataclass(frozen=True)
class Scenario:
    name: str
    flows: Callable[[int, int], list[LabFlow]]   # (CPU A, CPU B) -> the lab's flows
    kernel_truth: str                            # softirqs NET_RX, cpumap kthread, NAPI kthread
    steer_to: Callable[[int, int], int] | None = None   # the CPU its first flow is pinned to
    threaded_napi: bool = False
    # compare the kthread's own time alone (with the softirqs it ran): the target CPU's NET_RX
    # also runs on top of the reader there (the ACKs it sends when it reads), which the
    # scheduler counts as the reader's
    kthread_only: bool = False
    # the sampled kernel time's own systematic bounds, where BOUNDS' do not hold for it
    sampled_bias: tuple[float, float] | None = None
    # RPS with flow steering on the lab's veth (Lab.rfs): a flow's softirq runs on its reader's
    # CPU, not its sender's
    rfs: bool = False

    def softirq_cpu(self, flow: LabFlow) -> int | None:
        """Where FLOW's receive processing runs (no XDP steering)."""
        return flow.app_cpu if self.rfs else flow.kernel_cpu


SCENARIOS = [
    # sender, reader and softirq taking turns on one CPU: the sampled NET_RX reads low, by an
    # amount that moves from run to run and does not shrink with a longer window (12 runs at
    # 9,973 Hz, 2026-11-27: -4% to -19% on 3 s windows, -7% to -19% on 10 s; mean -13%, spread
    # 5%): a bias, held by its spread as docs/testing.md says. -30% lies 3.4 spreads below the
    # mean, and with the samples' own allowance below it the chance of a false failure is ~1e-4;
    # the upper bound still catches a 1.4x figure, the lower one not a 1/1.4x one. (Those
    # against `softirqs`; against the brackets less their own cost, over the tracer's window,
    # -15% to -20% in 3 runs of 2026-11-29, the peer tool's own programs attached beside)
    Scenario("same core", lambda a, b: [LabFlow(a, a)], "softirqs NET_RX",
             sampled_bias=(-0.30, 0.10)),
    Scenario("softirq and reader apart", lambda a, b: [LabFlow(a, b)], "softirqs NET_RX"),
    Scenario("steered to the reader's CPU", lambda a, b: [LabFlow(a, b)], "cpumap kthread",
             steer_to=lambda a, b: b, kthread_only=True),
    Scenario("steered to another CPU", lambda a, b: [LabFlow(a, a)], "cpumap kthread",
             steer_to=lambda a, b: b),
    Scenario("threaded NAPI", lambda a, b: [LabFlow(b, a)], "NAPI kthread", threaded_napi=True),
    Scenario("UDP 2 Gbit/s", lambda a, b: [LabFlow(a, b, udp_rate="2G")], "softirqs NET_RX"),
    # on the lab namespace's loopback (the lab's veth has IPv4's benchmarking range alone)
    Scenario("IPv6 (loopback)", lambda a, b: [LabFlow(a, b, ipv6=True)], "softirqs NET_RX"),
    Scenario("eight flows, one softirq CPU", lambda a, b: [LabFlow(a, b) for _ in range(8)],
             "softirqs NET_RX"),
    # a truth per flow: each flow's receive processing and reader on a CPU of its own, so that
    # each CPU's NET_RX is one flow's (a TCP flow's with its ACKs: its sender's TCP also sends
    # from the softirq that takes the ACKs in, and its reader's acks from the one that takes the
    # data), and the two cost unalike per byte (TCP's 64 KB GRO skbs, 64-byte datagrams). RPS
    # with flow steering (Lab.rfs) puts each flow up the stack on its reader's CPU, through that
    # CPU's backlog, as RFS does for a NIC's queue; the TCP flow is sent from the UDP flow's CPU,
    # so that RPS hands its packets across. The CPU that takes them off the veth (its sender's)
    # raises NET_RX softirqs only to send the other CPU an IPI, which in this VM traps to the
    # host: 6-8 us a softirq, 0.07 s a second here, two fifths of that CPU's NET_RX. Those
    # softirqs take no packet in: no flow's, as the exact mode leaves them, and the sampler too
    # where it lands in the IPI's sending (sending_rps_ipi; without it the UDP flow read +37%
    # and the CPU's unattributed -99%, once). So per CPU the flow's truth is the brackets in
    # which a NAPI poll took packets in (NetRxBrackets' polled), and the sending CPU has a row
    # more: its unattributed NET_RX against the rest. 6 runs (2026-11-30, 3 s): exact, TCP
    # +3.0% to +3.7%, UDP +6.1% to +6.4%, unattributed +2.2% to +2.4% (the per-CPU bounds; a
    # figure 0.85x or 1.15x off fails); sampled at 9,973 Hz, TCP -1.0% to -5.5%, UDP -2.3% to
    # +0.8%, unattributed -21% to -29% (the sampled NET_RX's low weights on top of tasks, below,
    # and the ~5% of those softirqs' samples outside the sending, bpftrace's profile says: their
    # entry, the frees of skbs other CPUs took in, which go to the CPU's last skb). The bias
    # (-35%, +10%) lies over 3 spreads from each mean before the samples' own allowance; it does
    # not fail a sampled figure 0.85x or 1.15x off, and fails the misattribution.
    # Where the sampled NET_RX's bias comes from, measured with each flow's sender on its
    # reader's CPU too (no RPS, 9,973 Hz, 3 s, 2026-11-29, ~50 figures): -20% to +5%, ~0 where
    # much of the TCP CPU's NET_RX runs in ksoftirqd (~50 ms a second of it) and -10% to -16%
    # where it runs on top of the sender and the reader (ksoftirqd ~15 ms a second; the NET_RX
    # then takes 0.19 s a second, not 0.11); the UDP CPU (all on top of its tasks) -2% to -20%.
    # A diagnostic build whose sampler read the truth's open bracket (10 runs): the samples land
    # inside the brackets as often as their time says (within -2%..+5%); their weights give
    # them less than their share: a sample stands for its task's run time since that task's
    # previous sample, and a task's first sample after other tasks ran carries the run time
    # its earlier slices left unsampled (1.2-1.8 periods, against 0.8 for the others), which
    # goes to where its slices begin (the sender's own code, the reader's read), not to the
    # NET_RX that ends them: NET_RX samples on the UDP CPU weigh 0.86-0.91 of a period, while
    # the CPU's time since its previous sample is 1.01-1.02; and 5-8% of the samples in the
    # brackets are outside net_rx_action (the brackets' own cost, which the truth takes off, is
    # ~4.6% of them). A trial build that gave the carried time to the task's previous sample's
    # flow and side read the UDP CPU -5..-9% (3 runs) and the TCP CPU's high regime -13% as
    # before. Against bpftrace's brackets, whose own cost (a hash map, ~400 ns a softirq) made
    # ~10-20% of their time, it read 14-28% low
    Scenario("TCP and small UDP, a CPU each, by RFS, TCP sent from the other",
             lambda a, b: [LabFlow(b, a), LabFlow(b, b, udp_rate="100M", udp_size=64)],
             "NET_RX per CPU", sampled_bias=(-0.35, 0.10), rfs=True),
]


# Held out (--held-out): kthread scenarios the matrix's bounds were not made on, to see that they
# hold beyond it (issue 49). Not in `make test`. 3 runs each, 3 s at 9,973 Hz, --windows off,
# 2026-11-30: all within the matrix's bounds: the NAPI kthread beside sender and reader sampled
# -0.3..-0.7%, exact +2.5..+2.7% (its own time: the NET_RX on top of the tasks there is theirs,
# as in scenario 3); UDP through threaded NAPI -0.6..-1.0% / +0.3..+0.5%; four TCP flows through
# it +0.2..+0.3% / +1.1..+1.3%; a UDP flow steered to another CPU -0.2..-0.5% / -0.1..+0.3%;
# each with its flows' time plus unattributed within 0.2% of the CPU's
HELD_OUT = [
    Scenario("threaded NAPI beside its sender and reader", lambda a, b: [LabFlow(b, b)],
             "NAPI kthread", threaded_napi=True, kthread_only=True),
    Scenario("UDP 1 Gbit/s through threaded NAPI", lambda a, b: [LabFlow(b, a, udp_rate="1G")],
             "NAPI kthread", threaded_napi=True),
    Scenario("four TCP flows through threaded NAPI", lambda a, b: [LabFlow(b, a) for _ in range(4)],
             "NAPI kthread", threaded_napi=True),
    Scenario("UDP 1 Gbit/s steered to another CPU", lambda a, b: [LabFlow(a, a, udp_rate="1G")],
             "cpumap kthread", steer_to=lambda a, b: b),
]


DEFAULT_WINDOWS_TEXT = f"{DEFAULT_WINDOW * 1e3:g}/{DEFAULT_CYCLE * 1e3:g}"
WINDOWS = None   # the sampled mode's (--windows)


def _steer(*args: str) -> None:
    r = subprocess.run([sys.executable, "-m", "steer", *args], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"steer {args[0]}: {r.stderr.strip()}")


def _bound_text(b: float) -> str:
    """A bound as the table shows it: to a hundredth of a percent where it is under 1% (a byte
    count's -0.05% read -0.1%, beside a figure of -0.06% out of it)."""
    return f"{b:+.2%}" if abs(b) < 0.01 else f"{b:+.1%}"


IPERF3_PACING_TICK = 0.001   # s: a UDP sender's burst at most (iperf3 --pacing-timer's default)


def unwatched_bytes(tracer: Tracer, results) -> float:
    """What the reads of the UDP flows of RESULTS may hold that no program counted: those of the
    time from a datagram to the UDP reads' program's attach where it was off
    (Tracer.udp_reads_unwatched_ns), at most what the senders' rates (iperf3 -b) let arrive in
    it and a pacing burst."""
    unwatched = tracer.udp_reads_unwatched_ns / 1e9
    if not unwatched:
        return 0.0
    rate = sum(udp_rate_bytes(r.flow.udp_rate) for r in results if r.flow.udp_rate)
    return rate * (unwatched + IPERF3_PACING_TICK)


def udp_rate_bytes(rate: str) -> float:
    """iperf3's -b (bits a second, with an optional K, M or G) in bytes a second."""
    scale = {"K": 1e3, "M": 1e6, "G": 1e9}.get(rate[-1:].upper(), 1.0)
    return float(rate.rstrip("KMGkmg")) * scale / 8


def bounds(truth: str, mode: str, samples: float | None, figures: int = 1,
           extra_high: float = 0.0, bias: tuple[float, float] | None = None,
           truth_spread: float = 0.0, extra_low: float = 0.0,
           partial: float | None = None, expiries: float | None = None,
           shift: float = 0.0) -> tuple[float, float]:
    """What steer / truth - 1 is held to: BOUNDS (in windows, BOUNDS' windowed entry where it
    has one), or BIAS for a sampled time that has its own (and EXTRA_HIGH above, what the truth
    itself knows it left out, EXTRA_LOW below, what it knows it counted beyond the figure's
    time, and TRUTH_SPREAD either way, how far the truth knows itself to be off), and for a
    sampled time resting on SAMPLES samples what chance may add either way when FIGURES such
    times are held at once at the suite's odds (bench.odds): as a count, or, where the time is
    a task's whole run time but for PARTIAL of those samples, as bench.odds.whole_task_spread;
    for steer's samples held count for count to EXPIRIES of the clock, the binomial spread of
    the share it leaves out (bench.odds.classified_spread). SHIFT moves both ends: what the
    run's own truth measured of the figure's systematic part (a landing row's brackets' cost)."""
    key = (truth, "windows" if WINDOWS and mode == "sampled" else mode)
    low, high = bias if bias and mode == "sampled" and samples is not None \
        else BOUNDS.get(key, BOUNDS[(truth, mode)])
    low, high = low - truth_spread - extra_low + shift, high + extra_high + truth_spread + shift
    if mode == "sampled" and samples is not None:
        spread = sampled_spread(samples, figures) if partial is None \
            else whole_task_spread(samples, partial, figures)
        low, high = low - spread, high + spread
    if expiries is not None:
        spread = classified_spread(expiries, LANDING_MISSED, figures)
        low, high = low - spread, high + spread
    return low, high


def sampled_figures(rows: list[dict]) -> int:
    """How many sampled times ROWS hold to bounds at once: the odds are shared out among them."""
    return max(1, sum(1 for r in rows if r["mode"] == "sampled"
                      and (r.get("samples") is not None or r.get("expiries") is not None)
                      and not r.get("same_samples")))


def _check(r: dict) -> bool | None:
    if r["ratio"] is None:
        return None
    low, high = r["bounds"]
    return low - 1e-9 <= r["ratio"] - 1 <= high + 1e-9


def lab_scenario(sc: Scenario, mode: str, seconds: float, a: int, b: int, hz: int) -> list[dict]:
    """One run of SC under MODE: a row for its bytes and one for its kernel time."""
    topo = read_topology()
    # attached before the tracer, so that on each tracepoint its programs run first: a bracket
    # of the exact mode's then holds one program of the truth's (its exit), not three
    brackets = NetRxBrackets(polls=sc.rfs) \
        if sc.kernel_truth in ("NET_RX per CPU", "softirqs NET_RX") else None
    # what the kernel takes in where no BPF program runs (bench.unseen), for the bytes counted
    # skb by skb: the exact mode's, and the sampled mode's UDP (its TCP bytes are the sockets')
    unseen = UnseenReceive() if mode == "exact" or any(
        f.udp_rate for f in sc.flows(a, b)) else None
    if unseen and unseen.error:
        print(f" (what no BPF program saw is not measured: {unseen.error})", end="", flush=True)
    try:
        tracer = Tracer(timing=mode, sample_hz=hz,
                        windows=WINDOWS if mode == "sampled" else None).start()
    except BaseException:
        if brackets:
            brackets.close()
        if unseen:
            unseen.close()
        raise
    pinned = False
    try:
        # where the sampler's clock landed: its expiries inside NET_RX, count for count
        landing = brackets is not None and mode == "sampled" and watch_clock(brackets, tracer)
        peer = sc.kernel_truth == "softirqs NET_RX" and mode == "exact"
        with Lab(sc.flows(a, b), seconds=SETTLE + seconds + TAIL,
                 threaded_napi=sc.threaded_napi, rfs=sc.rfs) as lab:
            lab.start_servers()
            if sc.steer_to:
                f0 = lab.flows[0]
                _steer("pin", f"proto={f0.proto},dport={f0.port}", "--cpu",
                       str(sc.steer_to(a, b)), "--dev", "veth-rx", "--netns", lab.rx)
                pinned = True
            target = sc.steer_to(a, b) if sc.steer_to else b
            # the cpumap kthread of the target CPU; the NAPI kthreads of the lab's own veth
            kthread = (lambda pid, c: c.startswith(f"cpumap/{target}/")) if sc.steer_to else \
                (lambda pid, c: pid in lab.napi_pids)
            s0 = tracer.sample()
            tool = peer_error = None
            lab.start_clients()
            time.sleep(SETTLE)
            # the truths read just before and just after each of the tracer's reads (in the gap
            # between two windows where the tracer runs them: a read waits for it), so that what
            # they counted while it read is their known spread, not an error: a UDP scenario's
            # receiving namespace's count of datagrams in the middle of the flow (the whole
            # run's, iperf3's, has the flow's start and end in it, which windows count by whole
            # cycles), and the scheduler's runtime of the kthreads (clean clone of 2fa580e: the
            # cpumap kthread +6.4% against a +-5.8% bound where its truth was read after the
            # tracer's, by a scan of /proc that took its turn on a CPU with iperf3 and the
            # kthread)
            udp_pid = lab.receiver_pid(lab.flows[0].port) \
                if all(f.udp_rate for f in lab.flows) else None
            pids = task_pids(kthread)

            def truths():
                return (udp_datagrams(udp_pid) if udp_pid else None, schedstat_runtime(pids),
                        time.monotonic())
            if peer:
                # the peer's agreement is the exact mode's alone; its entry program runs inside
                # the truth's brackets (attached after them), where it adds its own cost to
                # every NET_RX softirq, which the exact mode's brackets hold too and the sampler
                # rightly does not see as NET_RX (~10% of it at 175,000 softirqs a second).
                # Its window opens once its programs are attached, and the steal inside the
                # brackets is read at its two ends: its clock counts that steal, the run
                # clock does not. What the host took from the CPUs from the tool's start to
                # that first read, and from the second to its exit, may lie in one window and
                # not the other: the row's bounds widen by it either way
                edges = -steal_seconds()
                tool = softirqs_tool(seconds)
                try:
                    opened = wait_attached(tool)
                    inside0 = brackets.steal_inside()
                    edges += steal_seconds()
                except PeerStartError as e:
                    tool.kill()
                    tool.wait()
                    peer_error, tool = str(e), None
            w0, (before0, after0) = tracer.sample(beside=truths)
            stolen0 = steal_seconds((target,))
            if brackets:
                brackets.measure()   # its window opens here
            if tool:
                time.sleep(max(0.0, opened + seconds - time.monotonic()))
                edges -= steal_seconds()
                peer_stolen = (brackets.steal_inside() - inside0) / 1e9
            else:
                time.sleep(seconds)
            w1, (before1, after1) = tracer.sample(beside=truths)
            stolen = steal_seconds((target,)) - stolen0
            if brackets:
                by_cpu = brackets.measure()   # read right after steer's, as it opened
            if tool:
                out, _ = tool.communicate(timeout=30)
                edges += steal_seconds()
            results = lab.wait(timeout=seconds + 60)
            time.sleep(0.2)
            s1 = tracer.sample()
            blind = unseen.events() if unseen else []
    finally:
        tracer.stop()
        if brackets:
            brackets.close()
        if unseen:
            unseen.close()
        if pinned:
            _steer("reset")
    errors = [r.error for r in results if r.error]
    if errors:
        raise SystemExit(f"iperf3: {errors[0]}")
    run_snap = build_snapshot(s0, s1, topo, tracer.capabilities)
    ports = {(r.sender_port, r.flow.port) for r in results}
    # in windows a UDP flow's start and end count by whole cycles: the whole run holds the TCP
    # flows alone (the sockets' counts), a UDP flow is held mid-flow (udp_window_rows)
    windowed = WINDOWS is not None and mode == "sampled"
    whole = [r for r in results if not (windowed and r.flow.udp_rate)]
    whole_ports = {(r.sender_port, r.flow.port) for r in whole}
    ours = [f for f in run_snap.flows if (f.flow.sport, f.flow.dport) in whole_ports]
    got, want = sum(f.rx_bytes for f in ours), sum(r.received_bytes for r in whole)
    # UDP datagrams that reached the stack and were then dropped at a full socket are counted by
    # steer, never read by iperf3: its own count of lost datagrams bounds them
    lost = sum(udp_lost_datagrams(r) * r.flow.udp_size for r in whole if r.flow.udp_rate)
    unseen_total = bytes_between(blind)
    rows = [{"scenario": sc.name, "mode": mode, "figure": "received bytes",
             "truth": "iperf3 bytes", "steer": got, "truth_value": want,
             "ratio": got / want if want else None,
             "extra_high": lost / want if want else 0.0,
             "extra_low": unseen_total / want if want else 0.0,
             "unseen_bytes": unseen_total}] if whole else []
    if all(r.flow.udp_rate for r in results) and not windowed:
        # TCP readers' bytes are the sockets' own counts; UDP's are counted read by read
        read = sum(f.app_bytes or 0 for f in ours)
        rows.append({"scenario": sc.name, "mode": mode, "figure": "bytes the reader got",
                     "truth": "iperf3 reader bytes", "steer": read, "truth_value": want,
                     "ratio": read / want if want and any(f.app_bytes for f in ours) else None,
                     "extra_low": unwatched_bytes(tracer, whole) / want if want else 0.0})
    win = build_snapshot(w0, w1, topo, tracer.capabilities)
    # the harness's clock at each read: the middle of its truths' reads on either side
    span = (before1[2] + after1[2]) / 2 - (before0[2] + after0[2]) / 2
    if udp_pid:
        rows += udp_window_rows(sc, mode, win, ports, lab.flows[0].udp_size,
                                (before0[0], after0[0]), (before1[0], after1[0]),
                                bytes_between(blind, before0[2] * 1e9, after1[2] * 1e9))
    if sc.kernel_truth == "NET_RX per CPU":
        rows += per_cpu_rows(sc, mode, win, results, by_cpu, brackets.elapsed, hz)
        if landing:
            rows += landing_rows(sc, mode, win, by_cpu, span, brackets.elapsed, hz, True)
            rows += flows_landing_rows(sc, mode, (w0, w1), results, by_cpu, span,
                                       brackets.elapsed, hz)
        return rows
    mine = [f for f in win.flows if (f.flow.sport, f.flow.dport) in ports]
    kernel_total = sum(c.net_rx_seconds + c.kthread_seconds for c in win.cpus)
    # how much of the kernel time the lab's flows were charged (the rest: their ACKs,
    # unattributed)
    share = sum(f.kernel_seconds for f in mine) / kernel_total if kernel_total else None
    if sc.kernel_truth == "softirqs NET_RX":
        value = sum(c.net_rx_seconds for c in win.cpus) / span
        # the truth held to the bounds: every CPU's brackets less their own cost, over the
        # tracer's own window (read within a millisecond of it)
        ns, raw = sum(c["ns"] for c in by_cpu.values()), sum(c["raw"] for c in by_cpu.values())
        count = sum(c["count"] for c in by_cpu.values())
        truth = ns / 1e9 / brackets.elapsed
        rows.append({"scenario": sc.name, "mode": mode,
                     "figure": "NET_RX seconds a second, summed over CPUs",
                     "truth": "NET_RX brackets", "steer": value, "truth_value": truth,
                     "ratio": value / truth if truth else None,
                     "samples": truth * span * hz if truth and mode == "sampled" else None,
                     "sampled_bias": sc.sampled_bias, "flows_share": share,
                     "truth_raw": raw / 1e9 / brackets.elapsed,
                     "bracket_overhead_ns": (raw - ns) / count if count else None,
                     "softirqs_a_second": count / brackets.elapsed})
        if landing:
            rows += landing_rows(sc, mode, win, by_cpu, span, brackets.elapsed, hz, False)
        # and the peer tool's reading, over its own window, from its attach to its read (its
        # own cost inside its brackets), less the steal inside the brackets over it: held
        # where steer brackets the same softirqs (exact)
        if mode != "exact":
            return rows
        row = {"scenario": sc.name, "mode": mode, "figure": "NET_RX seconds a second, all CPUs",
               "truth": sc.kernel_truth, "steer": value, "truth_value": None, "ratio": None,
               "samples": None}
        try:
            if peer_error:
                raise PeerStartError(peer_error)
            peer, mid = softirqs_reading(out, seconds, opened) or (None, 0)
        except PeerStartError as e:
            # the tool's reading, not the host's (clean clone 107: -100%): not judged
            row["truth_error"] = str(e)
        else:
            if peer:
                # its clock counts what the host took from a CPU inside a softirq, steer's and
                # the brackets' leave it out: that steal, counted inside the brackets over the
                # tool's window, comes off its reading
                row["peer_raw"] = peer / 1e9
                row["peer_steal"] = peer_stolen / max(1, round(seconds))
                row["truth_value"] = truth = row["peer_raw"] - row["peer_steal"]
                row["ratio"] = value / truth if truth > 0 else None
                row["edge_steal_seconds"] = round(edges, 3)
                # and a softirq under way at its attach, timed from 0, comes off within
                # MID_SOFTIRQ_NS of the attach's moment
                row["peer_timed_from_0"] = mid
                if truth > 0:
                    row["truth_spread"] = (edges + mid * MID_SOFTIRQ_NS / 1e9) / \
                        (truth * max(1, round(seconds)))
        rows.append(row)
        return rows
    # the kthreads' runtime over steer's window: at least what they ran between the later of the
    # first read's truths and the earlier of the second's, at most between the outer two
    truth_seconds, spread = runtime_between(before0[1], after0[1], before1[1], after1[1])
    truth = truth_seconds / win.duration   # a rate over steer's window: the ratio is the counts'
    cpu = next(c for c in win.cpus if c.cpu == (sc.steer_to(a, b) if sc.steer_to else b))
    # the softirqs a kthread runs when it enables bottom halves are its own to the scheduler:
    # NET_RX's are steer's kthread_net_rx_seconds (of net_rx_seconds), the other vectors'
    # (timers) its kthread_softirq_seconds
    if sc.kthread_only:
        # (a threaded NAPI kthread's own time is NET_RX time: napi_thread_seconds of it)
        own = cpu.napi_thread_seconds if sc.threaded_napi else cpu.kthread_seconds
        value = (own + cpu.kthread_softirq_seconds + cpu.kthread_net_rx_seconds) / win.duration
        figure = f"CPU {cpu.cpu}: kthread + the softirqs it ran, seconds a second"
        others = 0.0
    else:
        value = (cpu.kthread_seconds + cpu.net_rx_seconds
                 + cpu.kthread_softirq_seconds) / win.duration
        figure = f"CPU {cpu.cpu}: kthread + NET_RX + kthread's other softirqs, s a second"
        # the NET_RX on top of the CPU's other tasks (and its idle task): a share of their time
        others = cpu.net_rx_seconds - cpu.kthread_net_rx_seconds - cpu.napi_thread_seconds
    rows.append({"scenario": sc.name, "mode": mode, "figure": figure, "truth": sc.kernel_truth,
                 "steer": value, "truth_value": truth,
                 "ratio": value / truth if truth else None,
                 # the samples such a time rests on: its CPU-seconds at HZ
                 "samples": truth_seconds * hz if truth and mode == "sampled" else None,
                 # all but OTHERS' samples are the kthread's whole run time: no count's chance
                 "partial_samples": max(0.0, others) * hz if mode == "sampled" else None,
                 "sampled_bias": sc.sampled_bias, "flows_share": share,
                 "truth_spread": spread / truth_seconds if truth else 0.0,
                 **steal_spread(stolen, truth_seconds)})
    if not sc.kthread_only:
        # the same time flow by flow: every flow's kernel time on the CPU and what no flow was
        # charged with, as `steer flows --json` and the exporter show them; a time lost
        # between them (an evicted entry, a charge to neither) would read low here alone
        flows = sum(f.kernel_cpus.get(cpu.cpu, 0.0) for f in win.flows)
        by_flow = (flows + cpu.net_rx_unattributed_seconds + cpu.kthread_unattributed_seconds
                   + cpu.kthread_softirq_seconds) / win.duration
        # the same samples as the CPU's row (one chance, not a second one at the odds)
        rows.append({**rows[-1], "same_samples": True,
                     "steer": by_flow, "ratio": by_flow / truth if truth else None,
                     "figure": f"CPU {cpu.cpu}: its flows' kernel time + unattributed + "
                               "kthread's other softirqs, s a second"})
    return rows


def steal_spread(stolen: float, truth_seconds: float) -> dict:
    """A scheduler truth's known disagreement with steer's clock where the host took STOLEN
    seconds of the CPU over TRUTH_SECONDS of the task's time: steer's run clock and the
    scheduler's both leave steal out, each by its own reading of it (steer the hypervisor's
    live count at every event, the scheduler its run queue's, brought up to date at its clock
    updates and never by more than the time since the last one), so no more than STOLEN lies
    between them, either way; nothing where the host took nothing. Clean clones 131 and 141
    (2.55 CPU-s stolen over the scenario) read the exact recv()-only reader +5.6% and +6.3%,
    where the runs without steal read -0.8% to -3.3%."""
    extra = stolen / truth_seconds if truth_seconds > 0 else 0.0
    return {"cpu_steal_seconds": round(stolen, 3), "extra_low": extra, "extra_high": extra}


def unseen_text(rows: list[dict]) -> str:
    """How much of a run's bytes no BPF program could see, at most, for the truths' text."""
    shares = [r["unseen_bytes"] / r["truth_value"] for r in rows
              if r.get("unseen_bytes") and r.get("truth_value")]
    return f": up to {max(shares):.2%} of a scenario's bytes in this run" if shares else \
        ": none in this run"


def udp_window_rows(sc: Scenario, mode: str, win, ports, size: int, u0, u1,
                    unseen: int = 0) -> list[dict]:
    """A UDP scenario's bytes over the tracer's own window (WIN, mid-flow), against the receiving
    namespace's datagrams of SIZE bytes: those that reached its sockets, and those its readers
    read. U0 and U1 are udp_datagrams() read just before and just after each of the tracer's
    reads, so that what came in while it read is the truth's known spread (a row's
    truth_spread: half the difference, against the middle), not an error. UNSEEN: the bytes taken
    in over the window where no BPF program runs (bench.unseen), which steer cannot count."""
    mine = [f for f in win.flows if (f.flow.sport, f.flow.dport) in ports]
    rows = []
    read = None if all(f.app_bytes is None for f in mine) else \
        sum(f.app_bytes or 0 for f in mine)   # None: no reader figure in this mode
    for i, figure, truth, got in (
            (0, "received bytes, mid-flow", "the namespace's datagrams",
             sum(f.rx_bytes for f in mine)),
            (1, "bytes the reader got, mid-flow", "the namespace's datagrams read", read)):
        low = (u1[0][i] - u0[1][i]) * size    # the fewest the window can hold
        high = (u1[1][i] - u0[0][i]) * size   # the most
        mid = (low + high) / 2
        rows.append({"scenario": sc.name, "mode": mode, "figure": figure, "truth": truth,
                     "steer": got, "truth_value": mid,
                     "ratio": got / mid if mid and got is not None else None,
                     "truth_spread": (high - low) / 2 / mid if mid else 0.0,
                     "extra_low": unseen / mid if mid and i == 0 else 0.0})
    return rows


def per_cpu_rows(sc: Scenario, mode: str, win, results, by_cpu: dict[int, dict],
                 seconds: float, hz: int) -> list[dict]:
    """Per CPU, the kernel time of the flow whose softirq and reader run there (a TCP flow's and
    its ACKs'), against that CPU's NET_RX time (BY_CPU, NetRxBrackets' over SECONDS)."""
    rows = []
    for cpu in sorted({sc.softirq_cpu(r.flow) for r in results}):
        keys, names = set(), []
        for r in results:
            if sc.softirq_cpu(r.flow) == cpu == r.flow.app_cpu:
                keys.add((r.flow.proto, r.sender_port, r.flow.port))
                names.append(f"the {r.flow.proto.upper()} flow")
                if r.flow.proto == "tcp":
                    keys.add(("tcp", r.flow.port, r.sender_port))
                    names[-1] += " and its ACKs"
        ours = [f for f in win.flows if (f.flow.proto, f.flow.sport, f.flow.dport) in keys]
        c = next(c for c in win.cpus if c.cpu == cpu)
        value = sum(f.kernel_cpus.get(cpu, 0.0) for f in ours) / win.duration
        brackets = by_cpu.get(cpu, {"ns": 0, "raw": 0, "count": 0, "overhead": 0.0,
                                    "polled": 0, "polled_count": 0})
        # with RPS, the softirqs that took packets in: the others only sent IPIs
        truth = (brackets["polled"] if sc.rfs else brackets["ns"]) / 1e9 / seconds
        rows.append({"scenario": sc.name, "mode": mode,
                     "figure": f"CPU {cpu}: kernel seconds a second of {' and '.join(names)}",
                     "truth": sc.kernel_truth, "steer": value, "truth_value": truth,
                     "ratio": value / truth if truth else None,
                     "samples": truth * seconds * hz if truth and mode == "sampled" else None,
                     "sampled_bias": sc.sampled_bias,
                     # the brackets as they read, and what each took off for its own cost
                     "truth_raw": brackets["raw"] / 1e9 / seconds,
                     "bracket_overhead_ns": brackets["overhead"],
                     "softirqs_a_second": brackets["count"] / seconds,
                     # the samples alone, each one period: what the weights add or take
                     "unweighted": sum(f.kernel_samples or 0 for f in ours) / hz / win.duration
                     if mode == "sampled" else None,
                     # the CPU's whole NET_RX by steer, and what of it no flow was charged with
                     "cpu_net_rx": c.net_rx_seconds / win.duration,
                     "cpu_unattributed": c.net_rx_unattributed_seconds / win.duration,
                     "other_flows": sorted(((f.kernel_cpus.get(cpu, 0.0) / win.duration, str(f.flow))
                                           for f in win.flows if f not in ours), reverse=True)[:3]})
        if sc.rfs and any(r.flow.kernel_cpu == cpu != sc.softirq_cpu(r.flow) for r in results):
            # and on the CPU that hands a flow's packets to another, the softirqs that took
            # nothing in, which no flow can be charged with
            idle = (brackets["ns"] - brackets["polled"]) / 1e9 / seconds
            value = c.net_rx_unattributed_seconds / win.duration
            rows.append({"scenario": sc.name, "mode": mode,
                         "figure": f"CPU {cpu}: NET_RX no flow was charged with",
                         "truth": "NET_RX that took nothing in", "steer": value,
                         "truth_value": idle, "ratio": value / idle if idle else None,
                         "samples": idle * seconds * hz if idle and mode == "sampled" else None,
                         "sampled_bias": sc.sampled_bias,
                         "softirqs_a_second": (brackets["count"] - brackets["polled_count"])
                         / seconds})
    return rows


def watch_clock(brackets: NetRxBrackets, tracer: Tracer) -> bool:
    """Whether BRACKETS count where the TRACER's sampling clock lands (NetRxBrackets.watch_clock:
    not where the kernel does not name the perf timer's function)."""
    try:
        brackets.watch_clock(tracer.program_id("ft_sample"))
    except LookupError:
        return False
    return True


def landing_rows(sc: Scenario, mode: str, win, by_cpu: dict[int, dict], span: float,
                 elapsed: float, hz: int, per_cpu: bool) -> list[dict]:
    """steer's NET_RX samples, one period each, against the sampler's clock expiries that began
    inside NET_RX softirqs (BY_CPU's landed, over ELAPSED as the brackets; steer's over SPAN):
    count for count, what steer made of the samples it took, apart from where the clock landed
    (each row's landing: the expiries' time against the brackets'). Summed over CPUs, or PER_CPU
    a row each."""
    def row(figure: str, cpus: list[int]) -> dict:
        ours = [c for c in win.cpus if c.cpu in cpus]
        value = sum(c.net_rx_samples * sample_period(hz, c.cpu) for c in ours) / 1e9 / span
        truth = sum(by_cpu[c]["landed"] * sample_period(hz, c) for c in cpus) / 1e9 / elapsed
        brackets = sum(by_cpu[c]["ns"] for c in cpus) / 1e9 / elapsed
        raw = sum(by_cpu[c]["raw"] for c in cpus)
        # the brackets' own programs' share of their time: expiries in it are no NET_RX of steer's
        own = (raw - sum(by_cpu[c]["ns"] for c in cpus)) / raw if raw else 0.0
        return {"scenario": sc.name, "mode": mode, "figure": figure,
                "truth": "the clock's expiries in NET_RX", "steer": value, "truth_value": truth,
                "ratio": value / truth if truth else None, "samples": None,
                "landing": truth / brackets - 1 if brackets else None,
                "expiries": sum(by_cpu[c]["landed"] for c in cpus), "shift": -own}
    cpus = sorted(by_cpu)
    if per_cpu:
        return [row(f"CPU {c}: NET_RX samples, seconds a second", [c]) for c in cpus]
    return [row("NET_RX samples, seconds a second, summed over CPUs", cpus)]


def flows_landing_rows(sc: Scenario, mode: str, reads, results, by_cpu: dict[int, dict],
                       span: float, elapsed: float, hz: int) -> list[dict]:
    """Per CPU, the samples steer charged to the lab's flows there (each flow's both directions:
    a TCP flow's ACKs too), one period each, between the tracer's two READS, against the
    sampler's clock expiries that began inside that CPU's NET_RX softirqs in which a NAPI poll
    took packets in (BY_CPU's landed_polled): with RPS (SC.rfs) those softirqs took in the lab's
    flows alone, and the others none, so count for count what steer charged to flows of what
    the clock found there, apart from where it landed, as landing_rows does for the CPU's
    whole NET_RX; a sample charged to no flow, or to another, reads low here."""
    keys = set()
    for r in results:
        keys |= {(r.flow.proto, r.sender_port, r.flow.port), (r.flow.proto, r.flow.port,
                                                              r.sender_port)}

    def charged(read, cpu: int) -> int:
        return sum(e.kernel_samples for (f, c), e in read.entries.items()
                   if c == cpu and (f.proto, f.sport, f.dport) in keys)
    rows = []
    for cpu, b in sorted(by_cpu.items()):
        if not b["landed_polled"]:
            continue
        value = (charged(reads[1], cpu) - charged(reads[0], cpu)) * sample_period(hz, cpu)
        truth = b["landed_polled"] * sample_period(hz, cpu) / 1e9 / elapsed
        # the brackets' own programs' share of the time of those that took packets in: less
        # than of all, where the others are short (an IPI sent)
        own = b["polled_count"] * b["overhead"]
        own = own / (b["polled"] + own) if b["polled"] + own > 0 else 0.0
        rows.append({"scenario": sc.name, "mode": mode,
                     "figure": f"CPU {cpu}: the lab flows' samples, seconds a second",
                     "truth": "the clock's expiries in NET_RX that took packets in",
                     "steer": value / 1e9 / span, "truth_value": truth,
                     "ratio": value / 1e9 / span / truth, "samples": None,
                     "expiries": b["landed_polled"], "shift": -own,
                     # the samples of the softirqs that took nothing in which go to the CPU's
                     # last skb's flow, not to its unattributed NET_RX (their entry, and the
                     # frees of skbs other CPUs took in), at most LANDING_LEAK of theirs
                     "extra_high": LANDING_LEAK * (b["landed"] - b["landed_polled"])
                     / b["landed_polled"]})
    return rows


def udp_lost_datagrams(r) -> int:
    """The datagrams iperf3's server did not get, of a UDP lab flow's result R (its own count)."""
    end = r.raw["end"]
    return int((end.get("sum") or end.get("sum_received") or {}).get("lost_packets") or 0)


def reader_scenario(mode: str, seconds: float, a: int, b: int, hz: int) -> list[dict]:
    """A reader that only calls recv(), on CPU B, its sender on CPU A: its bytes and its
    receive time (app + nested softirq) against its own count and the scheduler's."""
    exe = build_c("recv_only")
    tracer = Tracer(timing=mode, sample_hz=hz,
                    windows=WINDOWS if mode == "sampled" else None).start()
    try:
        with Lab([], seconds=seconds) as lab:
            reader = subprocess.Popen(["nsenter", f"--net={NETNS_DIR}/{lab.rx}", "taskset", "-c",
                                       str(b), exe, RECEIVER_ADDR, str(READER_PORT)],
                                      stdout=subprocess.PIPE, text=True)
            if reader.stdout.readline().strip() != "listening":
                raise SystemExit("recv_only did not start")
            stolen0, w0 = steal_seconds((b,)), tracer.sample()
            code = (f"import socket,time\ns=socket.create_connection(('{RECEIVER_ADDR}',{READER_PORT}))\n"
                    f"b=bytes(1<<20)\nend=time.monotonic()+{seconds}\n"
                    "while time.monotonic()<end: s.sendall(b)\n"
                    "s.shutdown(socket.SHUT_WR)\ns.recv(1)\ns.close()")
            sender = subprocess.Popen(["nsenter", f"--net={NETNS_DIR}/{lab.tx}", "taskset", "-c",
                                       str(a), sys.executable, "-c", code])
            out = reader.communicate(timeout=seconds + 30)[0]
            sender.wait(timeout=30)
            time.sleep(0.1)
            w1 = tracer.sample()
            stolen = steal_seconds((b,)) - stolen0
    finally:
        tracer.stop()
    truth = {k: int(v) for k, v in (kv.split("=") for kv in out.split())}
    snap = build_snapshot(w0, w1, read_topology(), tracer.capabilities)
    f = next(f for f in snap.flows if f.flow.dport == READER_PORT and f.app_comm == "recv_only")
    tick = 1 / os.sysconf("SC_CLK_TCK")
    kernel_side = truth["oncpu_ns"] / 1e9 - truth["utime_ticks"] * tick
    ours = f.app_seconds + f.app_nested_seconds
    name = "a recv()-only reader apart"
    return [{"scenario": name, "mode": mode, "figure": "bytes the reader got",
             "truth": "reader bytes", "steer": f.app_bytes, "truth_value": truth["bytes"],
             "ratio": f.app_bytes / truth["bytes"] if truth["bytes"] else None},
            {"scenario": name, "mode": mode, "figure": "reader's receive seconds",
             "truth": "reader schedstat", "steer": ours, "truth_value": kernel_side,
             "ratio": ours / kernel_side if kernel_side else None,
             "samples": kernel_side * hz if mode == "sampled" else None,
             # the reader's whole run time but its user time, whose samples (a share: chance
             # as a count) drop their weights: that time to the tick, and the tick it may hide
             "partial_samples": (truth["utime_ticks"] + 1) * tick * hz if mode == "sampled"
             else None,
             # the truth's user time is counted in whole ticks (1-6 of them here): one either way
             "truth_spread": tick / kernel_side if kernel_side else 0.0,
             **steal_spread(stolen, kernel_side)}]


def _cell(r: dict) -> str:
    if r["ratio"] is None:
        return "-"
    mark = "" if r["ok"] else " **out of bounds**"
    return f"{r['ratio'] - 1:+.2%}{mark}"


def main(argv=None) -> int:
    p = parser(__doc__.splitlines()[0], seconds=4.0)
    p.add_argument("--modes", default=",".join(MODES),
                   help=f"comma-separated timing modes, of {', '.join(MODES)}")
    p.add_argument("--sample-hz", type=int, default=DEFAULT_SAMPLE_HZ,
                   help="the sampled mode's rate (steer's default; the live test takes 9973 "
                        "for bounds that can catch a 1.4x error in 3 s windows: not a multiple "
                        "of 1000, which locks in step with iperf3's 1 ms UDP pacing timer)")
    p.add_argument("--scenarios", default=None,
                   help=f"comma-separated scenario numbers (1-{len(SCENARIOS) + 1}, as in the "
                        "table) to run; all by default")
    p.add_argument("--windows", default=DEFAULT_WINDOWS_TEXT, metavar="W/C",
                   help="the sampled mode's windows (steer's --windows: WINDOW/CYCLE in ms, or "
                        "off: on its hooks all the time) (default: %(default)s, steer's)")
    p.add_argument("--held-out", action="store_true",
                   help="run the held-out scenarios (HELD_OUT in bench/accuracy.py: kthread "
                        "set-ups the bounds were not made on, numbered H1, H2, ...) instead of "
                        "the matrix")
    p.add_argument("--mutate", type=float, default=1.0, metavar="K",
                   help="scale every figure of steer's by K before it is judged: a check of the "
                        "bounds themselves (at 0.85 or 1.15 a bound that catches a 15%% error "
                        "fails)")
    args = p.parse_args(argv)
    require_root()
    global WINDOWS
    try:
        WINDOWS = parse_windows(args.windows)
    except WindowsError as e:
        p.error(str(e))
    if args.mutate <= 0:
        p.error("--mutate: a factor above 0, such as 0.85")
    if args.mutate != 1.0 and os.path.abspath(args.out) == os.path.abspath(RESULTS):
        p.error("--mutate: give --out, so that the scaled figures stay out of bench/results")
    modes = [m for m in args.modes.split(",") if m]
    if not modes or set(modes) - set(MODES):
        p.error(f"--modes: of {', '.join(MODES)}")
    cpus = usable_cpus()
    if len(cpus) < 2:
        raise SystemExit("needs two usable CPUs: a sender's and a reader's")
    a, b = cpus[0], cpus[-1]
    runs = [(i + 1, sc) for i, sc in enumerate(SCENARIOS)] + [(len(SCENARIOS) + 1, None)]
    if args.held_out:
        if args.mutate != 1.0 or args.smoke:
            p.error("--held-out: without --mutate and --smoke")
        runs = [(f"H{i + 1}", sc) for i, sc in enumerate(HELD_OUT)]
    if args.smoke:
        args.seconds = 2.0
        runs = [runs[0], runs[-1]]
    if args.scenarios:
        try:
            wanted = {int(x) for x in args.scenarios.split(",")}
        except ValueError:
            p.error("--scenarios: numbers such as 1,3")
        runs = [r for r in runs if r[0] in wanted or r[0] in {f"H{w}" for w in wanted}]
    rows = []
    for n, sc in runs:
        for mode in modes:
            print(f"{n}. {sc.name if sc else 'recv()-only reader'} ({mode})", end="", flush=True)
            stolen, beside = steal_seconds((a, b)), Bystanders()
            got = lab_scenario(sc, mode, args.seconds, a, b, args.sample_hz) if sc else \
                reader_scenario(mode, args.seconds, a, b, args.sample_hz)
            # what the host took from the two CPUs meanwhile: the brackets leave it out, the
            # scheduler's truths too, as soon as its clock has counted it; and what other tasks
            # of this machine ran (not judged: said, so that a figure out of bounds can be read)
            stolen, beside = steal_seconds((a, b)) - stolen, beside.stop()
            said = [f"the host took {stolen:.2f} CPU-s"] if stolen else []
            text = bystanders_text(beside)
            said += [text] if text else []
            print(": " + "; ".join(said) if said else "", flush=True)
            for r in got:
                r["n"] = n
                r["steal_seconds"] = round(stolen, 2)
                r["beside"] = beside
            rows += got
    if args.mutate != 1.0:
        for r in rows:
            if r["ratio"] is not None:
                r["ratio"] *= args.mutate
                r["steer"] *= args.mutate
    figures = sampled_figures(rows)
    for r in rows:
        r["bounds"] = bounds(r["truth"], r["mode"], r.get("samples"), figures,
                             r.get("extra_high", 0.0), r.pop("sampled_bias", None),
                             r.get("truth_spread", 0.0), r.get("extra_low", 0.0),
                             r.get("partial_samples"), r.get("expiries"), r.get("shift", 0.0))
        r["ok"] = _check(r)
    per_packet = (f", the per-packet programs {WINDOWS.window * 1e3:g} ms of every "
                  f"{WINDOWS.cycle * 1e3:g}") if WINDOWS else ", the per-packet programs always on"
    lines = [f"### Accuracy: steer's figures against independent truths ({args.seconds:g} s "
             f"windows, sampled at {args.sample_hz} Hz{per_packet}, CPU A = {a}, CPU B = {b})",
             "",
             "| # | scenario | figure | truth | " + " | ".join(f"{m}: steer / truth - 1" for m in modes)
             + " | bounds (" + ", ".join(modes) + ") |",
             "|---|---|---|---|" + "---|" * len(modes) + "---|"]
    seen = []
    for r in rows:
        key = (r["n"], r["figure"])
        if key in seen:
            continue
        seen.append(key)
        per = {x["mode"]: x for x in rows if (x["n"], x["figure"]) == key}
        cells = " | ".join(_cell(per[m]) if m in per else "-" for m in modes)
        held = ", ".join(f"{_bound_text(per[m]['bounds'][0])}..{_bound_text(per[m]['bounds'][1])}"
                         for m in modes if m in per)
        lines.append(f"| {r['n']} | {r['scenario']} | {r['figure']} | {r['truth']} | {cells} | "
                     f"{held} |")
    for r in rows:
        if r.get("truth_error"):
            lines += ["", f"{r['n']} {r['mode']}, {r['truth']}: no reading ({r['truth_error']})."]
    shares = [r for r in rows if r.get("flows_share") is not None]
    if shares:
        lines += ["", "Of the kernel time in each window, the lab flows' own share (the rest: the "
                      "ACKs their readers send, and time charged to no flow): " +
                      "; ".join(f"{r['n']} {r['mode']} {r['flows_share']:.0%}" for r in shares) + "."]
    overheads = [r["bracket_overhead_ns"] for r in rows if r.get("bracket_overhead_ns")]
    own = f", {min(overheads):.0f}-{max(overheads):.0f} ns a softirq here" if overheads else ""
    lines += ["", "Truths: iperf3's received bytes (the whole run); for a UDP flow in the "
              "middle of its run, the receiving namespace's own count of datagrams "
              "(/proc/PID/net/snmp: InDatagrams and InErrors, those that reached a socket, and "
              "InDatagrams, those read) read just before and just after each of the tracer's "
              "reads, whose difference widens the bounds; brackets of each CPU's "
              "NET_RX softirqs (bpf/truth.bpf.c on softirq_entry/exit: NET_RX brackets, summed "
              "over CPUs, and NET_RX per CPU) less the brackets' own cost, timed beside them"
              f"{own}, read over the tracer's own window; libbpf-tools `softirqs -N` (NET_RX "
              "time of all CPUs, held to the exact mode, from its attach to its read, the "
              "tracer's read at the same moment, less the time the host took from the CPUs "
              "inside the brackets over that window, which its clock counts); "
              "/proc/PID/schedstat of the cpumap kthread of the "
              "target CPU and of the threaded-NAPI kthreads, read just before and just after "
              "each of the tracer's reads (their difference widens the bounds), and of the "
              "recv()-only reader (on-CPU less user time, the whole run), which also counts its "
              "own count of bytes. Steered scenarios pin "
              "the flow with `steer pin` (generic XDP on the lab's veth); a UDP flow's received "
              "bytes may exceed iperf3's by the datagrams iperf3 counted lost (dropped at a full "
              "socket after steer saw them); bytes counted skb by skb (the exact mode's, and UDP's "
              "in both) may fall short of iperf3's by what the kernel took in on top of the tasks "
              "where no BPF program runs (on this VM kind PID 1's threads, the VM's own agent), which "
              f"the kernel's event tracing counts (bench/unseen.py){unseen_text(rows)}, and which widens "
              "the lower bound. A sampled figure's bounds are the systematic ones in "
              f"bench/accuracy.py plus {z_for(figures):.2f} standard deviations of the samples it "
              f"rests on ({DISPERSION:g}/sqrt(n)), or for a kthread's whole run time, whose "
              f"samples' weights add up to it, of those it holds beyond that kthread's, and "
              f"{2 * SAMPLE_WEIGHT_CPU_PERIODS} sampling periods for the window's ends: with "
              f"the {figures} sampled times held at once, "
              f"the matrix fails by chance at most {ODDS:g} of the time (bench/odds.py)."]
    h = host()
    lines += ["", f"Measured {time.strftime('%Y-%m-%d')}: kernel {h['kernel']}, {h['cpus']} CPUs"
              + (f", a {h['vm']} VM" if h.get("vm") not in (None, "none") else "")
              + (f", commit {h['commit']}" if h.get("commit") else "")
              + f", `python -m bench.accuracy --seconds {args.seconds:g}`"
              + (" --held-out" if args.held_out else "")
              + (f" --sample-hz {args.sample_hz}" if args.sample_hz != DEFAULT_SAMPLE_HZ else "")
              + (f" --windows {args.windows}" if args.windows != DEFAULT_WINDOWS_TEXT else "")
              + (f" --mutate {args.mutate:g}" if args.mutate != 1.0 else "") + "."]
    bad = [r for r in rows if r["ok"] is False]
    write("accuracy-held-out" if args.held_out else "accuracy", args.out,
          {"seconds": args.seconds, "modes": modes, "rows": rows,
           "out_of_bounds": len(bad), "smoke": args.smoke},
          "\n".join(lines))
    return 1 if bad and not args.smoke else 0


if __name__ == "__main__":
    run(main)
