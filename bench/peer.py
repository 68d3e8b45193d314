"""A peer on the same run: the NET_RX part of steer's tracer (softirq_entry/exit only) against
libbpf-tools `softirqs` (Debian package): lab throughput with each attached (alternated), and their
NET_RX time totals over the same traffic. And NetRxBrackets, the accuracy matrix's truth of each
CPU's NET_RX time.

    sudo .venv/bin/python -m bench.peer [--pairs 5] [--seconds 5]
"""
from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import time

from steer.abi import flowtrace as abi
from steer.kernel.btf import kvm_steal_offset
from steer.kernel.objects import BpfObject, bpf_dir
from steer.experiment.lab import Lab

from .common import (alternate, fmt, lab_flow, parser, ratio_stats, require_root, run, stats,
                     write)

NET_RX_ONLY = {"ft_softirq_entry", "ft_softirq_exit"}


class NetRxTracer:
    """steer's flowtrace object with only its softirq programs attached."""

    def __enter__(self):
        self.obj = BpfObject(str(bpf_dir() / "flowtrace.bpf.o"), only=NET_RX_ONLY, no_pin=True)
        self.obj.attach_all()
        self.totals = self.obj.map("cpu_totals")
        return self

    def net_rx_ns(self) -> int:
        return sum(abi.CpuStats.from_buffer_copy(v).net_rx_ns
                   for v in self.totals.lookup(struct.pack("I", 0)))

    def __exit__(self, *exc):
        self.obj.close()


def perf_hrtimer_address() -> int:
    """perf_swevent_hrtimer's address: the function of a cpu-clock perf event's timer."""
    with open("/proc/kallsyms") as f:
        for line in f:
            addr, kind, name = line.split()[:3]
            if name == "perf_swevent_hrtimer" and kind in "tT":
                return int(addr, 16)
    raise LookupError("/proc/kallsyms has no perf_swevent_hrtimer")


def truth_object(only: set[str] | None = None, gate_fd: int | None = None) -> BpfObject:
    """bpf/truth.bpf.c loaded, owned by this process: its run clock told where the KVM steal
    clock lies (as steer's programs are), GATE_FD's map shared as its gate where given."""
    return BpfObject(str(bpf_dir() / "truth.bpf.o"), no_pin=True, only=only,
                     rodata=struct.pack("q", kvm_steal_offset()),
                     reuse=None if gate_fd is None else {"gate": gate_fd})


class NetRxBrackets:
    """Each CPU's NET_RX softirq time by brackets (bpf/truth.bpf.c), less what the brackets add
    themselves: a program's return, the next one's call and a clock read, which a pair of
    programs of the same code times on every softirq beside it (attached first, outside the
    bracket). Without it these brackets read 2-5% high on this VM (30,000 to 100,000 softirqs a
    second), bpftrace's 10-20% (its programs keep the bracket's start in a hash map).

    GATE_FD: a map shaped like truth.h's struct truth_gate (steer's window map, whose scale is set
    while a window of its sampled timing is open): the softirqs that begin while it is open are
    also counted apart (measure()'s "gated")."""

    def __init__(self, gate_fd: int | None = None, polls: bool = False):
        self.obj = truth_object(gate_fd=gate_fd)
        try:
            # in this order: a tracepoint runs its programs in the order they were attached
            for prog in ("gap_start", "gap_end", "truth_entry", "truth_exit") + \
                    (("truth_poll",) if polls else ()):
                self.obj.attach(prog)
            self.cpus = self.obj.map("truth_cpus")
            self._last = self._read()
        except BaseException:
            self.obj.close()
            raise
        self._t = time.monotonic()

    def _read(self) -> list[tuple[int, ...]]:
        return [struct.unpack_from("19Q", v) for v in self.cpus.lookup(struct.pack("I", 0))]

    def watch_clock(self, prog_id: int) -> None:
        """Count each CPU's expiries of the clock of the perf events that run program PROG_ID
        (steer's ft_sample) that begin inside a NET_RX softirq (measure()'s "landed"): where the
        sampler's samples land, whatever steer makes of them."""
        self.obj.map("truth_clock").update(struct.pack("I", 0), struct.pack(
            "QII", perf_hrtimer_address(), prog_id, 0))
        self.obj.attach("truth_clock_expiry")

    def steal_inside(self) -> int:
        """The steal inside NET_RX brackets on all CPUs since they were attached (ns): read at
        a peer's window's two ends, the part of its time the brackets leave out."""
        return sum(v[16] for v in self._read())

    def measure(self) -> dict[int, dict]:
        """Since the previous measure() (or the start): CPU -> {ns (the NET_RX time, the brackets'
        own cost taken off), raw (as the brackets read it), count (softirqs), overhead (ns a
        bracket added), gated (ns, own cost taken off, of those that began with the gate open),
        gated_count, polled and polled_count (with POLLS: those in which a NAPI poll took packets
        in; the rest only sent RPS IPIs, or found nothing), landed and landed_polled (with
        watch_clock: the clock's expiries inside them, and inside those that took packets
        in), steal (ns the host took the CPU away inside them, which the brackets leave out and a
        wall clock's brackets, a peer tool's, count)}, for the CPUs that ran any; the window's
        length in self.elapsed."""
        cur, now = self._read(), time.monotonic()
        out = {}
        for cpu, (a, b) in enumerate(zip(self._last, cur)):
            ns, n, gap, gaps = b[1] - a[1], b[2] - a[2], b[4] - a[4], b[5] - a[5]
            gated, gn = b[7] - a[7], b[8] - a[8]
            polled, pn = b[10] - a[10], b[11] - a[11]
            landed, landed_polled = b[13] - a[13], b[14] - a[14]
            steal = b[16] - a[16]
            if n:
                over = gap / gaps if gaps else 0.0
                out[cpu] = {"ns": ns - n * over, "raw": ns, "count": n, "overhead": over,
                            "gated": gated - gn * over, "gated_count": gn,
                            "polled": polled - pn * over, "polled_count": pn,
                            "landed": landed, "landed_polled": landed_polled,
                            "steal": steal}
        self.elapsed, self._last, self._t = now - self._t, cur, now
        return out

    def close(self) -> None:
        self.obj.close()


def udp_datagrams(pid: int) -> tuple[int, int]:
    """The UDP datagrams of PID's network namespace since it was made, by the kernel's own count
    (/proc/PID/net/snmp): those that reached a socket (InDatagrams, read, and InErrors, dropped
    there: a full receive buffer), and those read."""
    with open(f"/proc/{pid}/net/snmp") as f:
        names, values = [line.split() for line in f if line.startswith("Udp:")][:2]
    udp = dict(zip(names[1:], map(int, values[1:])))
    return udp["InDatagrams"] + udp["InErrors"], udp["InDatagrams"]


def task_pids(match) -> tuple[int, ...]:
    """The pids of every task whose pid and comm MATCH(pid, comm) takes. A scan of /proc: find a
    truth's tasks once, before its window, and read them with schedstat_runtime beside the
    tracer's reads (Tracer.sample(beside=...)), not by a scan after them."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if match(int(pid), f.read().strip()):
                    pids.append(int(pid))
        except OSError:
            continue
    return tuple(pids)


def schedstat_runtime(pids) -> int:
    """The summed on-CPU time (ns, /proc/PID/schedstat's sum_exec_runtime) of PIDS, by the
    scheduler's own count (a task gone counts nothing)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            continue
    return total


def runtime_between(before0: int, after0: int, before1: int, after1: int) -> tuple[float, float]:
    """What tasks ran between two reads of a tracer, from their schedstat_runtime read just before
    and just after each (ns): the middle of the least and the most it can be, and half their
    difference (what they ran while the tracer read), both in seconds."""
    low, high = before1 - after0, after1 - before0
    return (low + high) / 2 / 1e9, (high - low) / 2 / 1e9


def widened(bound: tuple[float, float], spread: float, truth: float) -> tuple[float, float]:
    """BOUND (low, high of steer / truth - 1) widened either way by what a truth of TRUTH seconds
    knows it may be off, SPREAD seconds (runtime_between's)."""
    return bound[0] - spread / truth, bound[1] + spread / truth


def steal_seconds(cpus=None) -> float:
    """The time the hypervisor ran something else in the place of CPUS (all, by default) since
    boot, summed, by the kernel's own count (/proc/stat's steal column, in 1/USER_HZ s): during
    it neither the lab's senders nor its receivers run, and the scheduler leaves it out of every
    task's time."""
    want = None if cpus is None else {f"cpu{c}" for c in cpus}
    ticks = 0
    with open("/proc/stat") as f:
        for line in f:
            if not line.startswith("cpu"):
                break
            fields = line.split()
            if (want is None and fields[0] == "cpu") or (want and fields[0] in want):
                ticks += int(fields[8])
    return ticks / os.sysconf("SC_CLK_TCK")


def softirqs_tool(seconds: float) -> subprocess.Popen:
    return subprocess.Popen(["softirqs", "-N", str(max(1, round(seconds))), "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


# what a process's attached BPF program holds open, as /proc/PID/fd names it (a raw
# tracepoint's, before the kernel made it a link, the second)
LINK_FDS = ("anon_inode:bpf_link", "anon_inode:bpf-raw-tracepoint")


def bpf_links_held(pid: int) -> int:
    """How many BPF links (attached programs) process PID holds open."""
    held = 0
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return 0
    for fd in fds:
        try:
            held += os.readlink(f"/proc/{pid}/fd/{fd}") in LINK_FDS
        except OSError:
            continue
    return held


def wait_attached(tool: subprocess.Popen, links: int = 2, timeout: float = 10.0,
                  poll: float = 0.005) -> float:
    """The moment (time.monotonic()) TOOL holds LINKS BPF links: a peer tool such as softirqs_tool's
    has attached its programs (entry and exit), and its window opens; at most POLL late.
    PeerStartError where it ends or takes TIMEOUT first."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if bpf_links_held(tool.pid) >= links:
            return time.monotonic()
        if tool.poll() is not None:
            raise PeerStartError(f"softirqs exited ({tool.returncode}) before it attached")
        time.sleep(poll)
    raise PeerStartError(f"softirqs had not attached its programs after {timeout:g} s")


class PeerStartError(ValueError):
    """A `softirqs` reading no host can have; str() says what it read."""


def softirqs_net_rx(out: str, seconds: float) -> float | None:
    """NET_RX ns a second from what softirqs_tool(SECONDS) printed (None: no NET_RX line);
    PeerStartError where a softirq under way at its attach spoilt it (softirqs_reading)."""
    reading = softirqs_reading(out, seconds)
    return reading[0] if reading else None


def softirqs_reading(out: str, seconds: float,
                     opened: float | None = None) -> tuple[float, int] | None:
    """NET_RX ns a second from what softirqs_tool(SECONDS) printed, and how many softirqs timed
    from 0 came off it (None: no NET_RX line).

    A softirq under way when the tool's entry program was attached and not yet its exit
    program is timed from a zeroed per-CPU start, i.e. as the boot clock: its reading then
    holds that CPU's NET_RX exit's moment on CLOCK_MONOTONIC, once for each such CPU (86,775 s
    over 3 s once, the VM's uptime). Given the moment the tool had attached (OPENED, by
    wait_attached), each such exit lies within a few milliseconds of it, and comes off
    (started_mid_softirq says how many); else, or where what is left is no reading a host can
    have, PeerStartError."""
    m = re.search(r"^net_rx\s+(\d+)", out, re.M)
    if not m:
        return None
    total, cpus, window = int(m.group(1)), os.cpu_count() or 1, max(1, round(seconds))
    mid = started_mid_softirq(total, window, cpus, opened)
    if mid is None:
        raise PeerStartError(f"softirqs read {total / window / 1e9:.3g} s a second of NET_RX on "
                             f"{cpus} CPUs: a softirq that began before it attached, timed "
                             "from 0")
    return (total - mid * opened * 1e9 if mid else total) / window, mid


def started_mid_softirq(total: int, window: int, cpus: int, opened: float | None) -> int | None:
    """How many of the NET_RX softirqs in a softirqs reading of TOTAL ns over WINDOW s were timed
    from 0 (softirqs_net_rx): 0 where TOTAL is a reading CPUS can have; else as many times as
    OPENED (the tool's attach, CLOCK_MONOTONIC seconds) fits in it, where what is left can be
    had, and at most one a CPU; None where it cannot be told."""
    most = 1e9 * cpus * window
    if total <= most:
        return 0
    if not opened:
        return None
    mid = round(total / (opened * 1e9))
    rest = total - mid * opened * 1e9
    return mid if 1 <= mid <= cpus and -mid * MID_SOFTIRQ_NS <= rest <= most else None


# how far from the tool's attach, as wait_attached saw it, the exit of a softirq under way at
# the attach may lie, either way: wait_attached's poll (at most 5 ms late), and the softirq's
# own rest (net_rx_action stops after 2 ms, netdev_budget_usecs), with room to spare
MID_SOFTIRQ_NS = 10_000_000


def main(argv=None) -> int:
    p = parser(__doc__.splitlines()[0], pairs=5, seconds=5.0)
    args = p.parse_args(argv)
    require_root()
    if not shutil.which("softirqs"):
        raise SystemExit("libbpf-tools is not installed (apt-get install libbpf-tools)")
    if args.smoke:
        args.pairs, args.seconds = 1, 2.0
    agree = []
    with Lab([lab_flow()], seconds=args.seconds + 2) as lab:
        def traffic():
            lab.start(args.seconds + 2)
            (res,) = lab.wait(timeout=args.seconds + 40)
            if res.error:
                raise SystemExit(f"iperf3: {res.error}")
            return res.raw["end"]["sum_received"]["bits_per_second"]

        def with_peer():
            tool = softirqs_tool(args.seconds)
            time.sleep(0.5)   # its programs load before the traffic starts
            bps = traffic()
            tool.communicate(timeout=30)
            return bps

        def with_ours():
            with NetRxTracer():
                return traffic()
        print(f"overhead: {args.pairs} pairs, A = libbpf-tools softirqs, B = steer's NET_RX programs")
        pairs = alternate(with_peer, with_ours, args.pairs)

        print("agreement: both attached to the same traffic")
        for _ in range(max(1, args.pairs // 2)):
            with NetRxTracer() as ours:
                lab.start(args.seconds + 3)
                time.sleep(1)
                tool = softirqs_tool(args.seconds)
                time.sleep(0.4)   # the tool's own window starts once its programs are attached
                a, t0 = ours.net_rx_ns(), time.monotonic()
                out, _ = tool.communicate(timeout=60)
                b, t1 = ours.net_rx_ns(), time.monotonic()
                lab.wait(timeout=60)
            try:
                theirs = softirqs_net_rx(out, args.seconds)
            except PeerStartError as e:
                print(f"  {e}: left out", flush=True)
                continue
            mine = (b - a) / (t1 - t0)
            agree.append({"steer_ns_per_s": mine, "softirqs_ns_per_s": theirs,
                          "ratio": mine / theirs if theirs else None})
            print(f"  NET_RX ns/s: steer {mine:.0f}, softirqs {theirs}", flush=True)
    r = ratio_stats(pairs)
    ag = stats([x["ratio"] for x in agree])
    table = "\n".join([
        f"### Peer: libbpf-tools softirqs vs steer's NET_RX programs ({args.pairs} pairs x "
        f"{args.seconds:g} s)", "",
        "| measure | softirqs | steer | steer / softirqs: median | min | max |",
        "|---|---|---|---|---|---|",
        f"| throughput Gbit/s (median) | {fmt(stats([a for a, _ in pairs]).get('median', 0) / 1e9, '.2f')} | "
        f"{fmt(stats([b for _, b in pairs]).get('median', 0) / 1e9, '.2f')} | {fmt(r.get('median'))} | "
        f"{fmt(r.get('min'))} | {fmt(r.get('max'))} |",
        f"| NET_RX time, ns per second (same traffic) | "
        f"{fmt(stats([x['softirqs_ns_per_s'] for x in agree]).get('median'), '.0f')} | "
        f"{fmt(stats([x['steer_ns_per_s'] for x in agree]).get('median'), '.0f')} | {fmt(ag.get('median'))} | "
        f"{fmt(ag.get('min'))} | {fmt(ag.get('max'))} |", "",
        "The NET_RX totals are rates over windows that are not aligned to the microsecond."])
    write("peer", args.out, {"pairs": args.pairs, "seconds": args.seconds,
                             "throughput_ratio": r, "agreement": agree, "smoke": args.smoke}, table)
    return 0


if __name__ == "__main__":
    run(main)
