"""A peer on the same run: the NET_RX part of steer's tracer (softirq_entry/exit only) against
libbpf-tools `softirqs` (Debian package): lab throughput with each attached (alternated), and their
NET_RX time totals over the same traffic.

    sudo .venv/bin/python -m bench.peer [--pairs 5] [--seconds 5]
"""
from __future__ import annotations

import queue
import re
import shutil
import struct
import subprocess
import threading
import time

from steer.abi import flowtrace as abi
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


# The window runs from BEGIN (its probes in place), not from bpftrace's start: an interval probe
# counts from the start, and on a loaded VM attaching took all of a 3 s window once (CI run 95:
# the report came at once, and both it and steer read nothing)
_NET_RX_PER_CPU_BT = """
BEGIN { @t0 = nsecs; printf("ready\\n"); }
tracepoint:irq:softirq_entry /args->vec == 3/ { @start[cpu] = nsecs; }
tracepoint:irq:softirq_exit /args->vec == 3 && @start[cpu]/ {
  @ns[cpu] += nsecs - @start[cpu]; delete(@start[cpu]);
}
interval:ms:20 /nsecs - @t0 >= SECONDS000000000/ {
  print(@ns); printf("elapsed %lld\\n", nsecs - @t0); printf("end\\n");
  clear(@ns); clear(@start); exit();
}
"""


class NetRxPerCpu:
    """NET_RX softirq time per CPU over SECONDS from its start, by bpftrace (Debian's): what
    libbpf-tools `softirqs -N` sums over the CPUs, kept per CPU. Started: its probes are in place.
    result() reads its one report and does not wait for bpftrace to exit (it was seen to hang
    there now and then): the report ends in a line of its own."""

    def __init__(self, seconds: int):
        self.seconds = seconds
        self.proc = subprocess.Popen(
            ["bpftrace", "-e", _NET_RX_PER_CPU_BT.replace("SECONDS", str(seconds))],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        if self._lines_until("ready", 60) is None:
            self.close()
            raise SystemExit(f"bpftrace did not attach: {self.proc.stderr.read().strip()}")

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _lines_until(self, last: str, timeout: float) -> list[str] | None:
        lines, end = [], time.monotonic() + timeout
        while (left := end - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                return None
            if line.strip() == last:
                return lines
            lines.append(line)
        return None

    def result(self) -> dict[int, int]:
        """CPU -> NET_RX ns over the window (CPUs that ran none are left out); its length in
        seconds, as bpftrace timed it, in self.elapsed."""
        lines = self._lines_until("end", self.seconds + 60)
        self.close()
        if lines is None:
            raise SystemExit("bpftrace gave no NET_RX report")
        report = "".join(lines)
        m = re.search(r"^elapsed (\d+)$", report, re.M)
        if not m:
            raise SystemExit(f"bpftrace's NET_RX report has no window length: {report[-500:]}")
        self.elapsed = int(m.group(1)) / 1e9
        return {int(c): int(n) for c, n in re.findall(r"^@ns\[(\d+)\]: (\d+)$", report, re.M)}

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def softirqs_tool(seconds: float) -> subprocess.Popen:
    return subprocess.Popen(["softirqs", "-N", str(max(1, round(seconds))), "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


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
            m = re.search(r"^net_rx\s+(\d+)", out, re.M)
            theirs = int(m.group(1)) / max(1, round(args.seconds)) if m else None
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
