"""Bulk throughput: one lab iperf3 flow for the whole measurement, with each tracer mode attached
(B) vs none (A), the modes in turn. The default mode's target is bench.summary's.

Each window's rate is the receiving veth's byte count over --seconds, read from the receiver's
own namespace (/proc/PID/net/dev), so the tracer does not measure itself. bench.overhead's runs
of an iperf3 of their own vary by +-10% here from start-up to start-up, which drowns a 2% effect;
this is bench.rr's method: one long run, many short windows, the median ratio with its bootstrap
95% interval.

    sudo .venv/bin/python -m bench.bulk [--pairs 15] [--seconds 2.5]
"""
from __future__ import annotations

import time

from steer.experiment.lab import Lab

from .common import (SETTLE_SECONDS, compare_modes, lab_flow, mode_rows, parser,
                     require_root, run, traced, write)
from .summary import target_line

WARMUP_SECONDS = 3   # before the first window: slow start, buffers and caches settle
SPARE_SECONDS = 60   # the flow outlasts the windows by this much (loading the tracers, attaching)


def rx_bytes(pid: int, dev: str) -> int:
    """DEV's received bytes in the network namespace of process PID."""
    with open(f"/proc/{pid}/net/dev") as f:
        for line in f:
            name, _, counters = line.partition(":")
            if name.strip() == dev:
                return int(counters.split()[0])
    raise SystemExit(f"bulk: {dev} is not in the receiver's namespace")


def main(argv=None) -> int:
    p = parser(__doc__.splitlines()[0], pairs=15, seconds=2.5, modes=True)
    args = p.parse_args(argv)
    require_root()
    if args.smoke:
        args.pairs, args.seconds = 1, 0.3
    # two windows per pair and mode, each with its attach, settle and detach
    windows = 2 * args.pairs * len(args.modes)
    seconds = WARMUP_SECONDS + windows * (args.seconds + SETTLE_SECONDS + 1) + SPARE_SECONDS
    with Lab([lab_flow()], seconds=seconds) as lab:
        flow = lab.flows[0]
        lab.start()
        pid = lab.receiver_pid(flow.port)
        time.sleep(1.0 if args.smoke else WARMUP_SECONDS)

        def window(mode):
            with traced(mode):
                b0, t0 = rx_bytes(pid, lab.rx_dev), time.monotonic()
                time.sleep(args.seconds)
                b1, t1 = rx_bytes(pid, lab.rx_dev), time.monotonic()
            if not lab.running():
                raise SystemExit("bulk: iperf3 stopped before the measurement ended")
            return (b1 - b0) * 8 / (t1 - t0)

        results, runs = compare_modes(window, args.pairs, "bulk iperf3", args.modes)
    rows = mode_rows(results, runs, ".2f", scale=1e9)
    table = "\n".join([
        f"### Bulk throughput ({args.pairs} pairs x {args.seconds:g} s windows of one lab iperf3 "
        f"flow, sender CPU {flow.kernel_cpu} -> reader CPU {flow.app_cpu})", "",
        "| tracer | Gbit/s without (median) | Gbit/s with (median) | ratio with/without: median (95% interval) | min | max |",
        "|---|---|---|---|---|---|", *rows, "",
        target_line("bulk")])
    write("bulk", args.out, {"pairs": args.pairs, "seconds": args.seconds,
                             "sender_cpu": flow.kernel_cpu, "reader_cpu": flow.app_cpu,
                             "runs": runs, "ratio": results, "smoke": args.smoke}, table)
    return 0


if __name__ == "__main__":
    run(main)
