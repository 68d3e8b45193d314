"""Tracing overhead: lab iperf3 throughput and CPU cost per GB with the tracer attached (B) vs not
(A), alternated. Target: throughput ratio B/A >= 0.98.

    sudo .venv/bin/python -m bench.overhead [--pairs 5] [--seconds 5]
"""
from __future__ import annotations

import os

from steer.experiment.lab import Lab

from .common import (TRACER_MODES, alternate, fmt, lab_flow, parser, ratio_stats, start_tracer,
                     require_root, run, stats, write)

CLK_TCK = os.sysconf("SC_CLK_TCK")


def softirq_seconds() -> float:
    """All CPUs' softirq time from /proc/stat (tick-sampled: a coarse, tracer-free witness)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[7]) / CLK_TCK


def one_run(lab: Lab, seconds: float, traced: bool, mode: str = "sampled") -> dict:
    tracer = start_tracer(mode) if traced else None
    try:
        s0 = softirq_seconds()
        lab.start(seconds)
        (res,) = lab.wait(timeout=seconds + 30)
        s1 = softirq_seconds()
    finally:
        if tracer:
            tracer.stop()
    if res.error:
        raise SystemExit(f"iperf3: {res.error}")
    end = res.raw["end"]
    gb = res.received_bytes / 1e9
    secs = end["sum_received"]["seconds"]
    # iperf3 measures its own receiver's CPU (getrusage): user + system, percent of one CPU
    recv_cpu = end["cpu_utilization_percent"]["remote_total"] / 100 * secs
    return {"bps": end["sum_received"]["bits_per_second"], "recv_s_per_gb": recv_cpu / gb,
            "softirq_s_per_gb": (s1 - s0) / gb}


def main(argv=None) -> int:
    p = parser(__doc__.splitlines()[0], pairs=5, seconds=5.0)
    p.add_argument("--mode", choices=list(TRACER_MODES), default="sampled",
                   help="the tracer's configuration (B): bench.common.TRACER_MODES")
    args = p.parse_args(argv)
    require_root()
    if args.smoke:
        args.pairs, args.seconds = 1, 1.0
    runs = {"A": [], "B": []}
    with Lab([lab_flow()], seconds=args.seconds) as lab:
        def run(traced):
            r = one_run(lab, args.seconds, traced, args.mode)
            runs["B" if traced else "A"].append(r)
            return r["bps"]
        print(f"tracing overhead: {args.pairs} pairs of {args.seconds:g} s, A = no tracer, "
              f"B = tracer ({args.mode})")
        pairs = alternate(lambda: run(False), lambda: run(True), args.pairs)
    thr = ratio_stats(pairs)
    recv = ratio_stats([(a["recv_s_per_gb"], b["recv_s_per_gb"]) for a, b in zip(runs["A"], runs["B"])])
    sirq = ratio_stats([(a["softirq_s_per_gb"], b["softirq_s_per_gb"])
                        for a, b in zip(runs["A"], runs["B"]) if a["softirq_s_per_gb"]])
    a_bps, b_bps = stats([r["bps"] for r in runs["A"]]), stats([r["bps"] for r in runs["B"]])
    table = "\n".join([
        f"### Tracing overhead, {args.mode} tracer ({args.pairs} pairs x {args.seconds:g} s, lab "
        f"flow sender CPU {lab.flows[0].kernel_cpu} -> reader CPU {lab.flows[0].app_cpu})", "",
        "| measure | without tracer (median) | with tracer (median) | ratio with/without: median | min | max | target |",
        "|---|---|---|---|---|---|---|",
        f"| throughput Gbit/s | {fmt(a_bps.get('median', 0) / 1e9, '.2f')} | "
        f"{fmt(b_bps.get('median', 0) / 1e9, '.2f')} | {fmt(thr.get('median'))} | {fmt(thr.get('min'))} | "
        f"{fmt(thr.get('max'))} | >= 0.98 |",
        f"| receiver CPU-s/GB (iperf3's getrusage) | {fmt(stats([r['recv_s_per_gb'] for r in runs['A']]).get('median'))} | "
        f"{fmt(stats([r['recv_s_per_gb'] for r in runs['B']]).get('median'))} | {fmt(recv.get('median'))} | "
        f"{fmt(recv.get('min'))} | {fmt(recv.get('max'))} | |",
        f"| softirq CPU-s/GB (/proc/stat, ticks) | {fmt(stats([r['softirq_s_per_gb'] for r in runs['A']]).get('median'))} | "
        f"{fmt(stats([r['softirq_s_per_gb'] for r in runs['B']]).get('median'))} | {fmt(sirq.get('median'))} | "
        f"{fmt(sirq.get('min'))} | {fmt(sirq.get('max'))} | |",
    ])
    name = "overhead" if args.mode == "sampled" else f"overhead_{args.mode}"
    write(name, args.out, {"mode": args.mode, "pairs": args.pairs, "seconds": args.seconds, "runs": runs,
                                 "throughput_ratio": thr, "receiver_cpu_ratio": recv,
                                 "softirq_cpu_ratio": sirq, "smoke": args.smoke}, table)
    return 0


if __name__ == "__main__":
    run(main)
