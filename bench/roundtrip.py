"""Round-trip tax: ns per one-byte TCP (or UDP: --proto udp) round trip over loopback
(bench/roundtrip.c: one thread plays both ends, pinned) with each tracer mode
attached (B) vs none (A), alternated.

Per round trip: two sends, two receives, two skbs up the stack, no wake-up: what the tracer adds
per packet and per read, undiluted and with little noise, where bench.rr (redis) measures what a
server loses of its rate but varies by 10% from one window to the next on this VM. The two agree
when rr's ratio is about 1 - (added ns per request) / (ns per request).

    sudo .venv/bin/python -m bench.roundtrip [--pairs 15] [--trips 150000] [--proto udp]

UDP is the request/response case of DNS, QUIC and memcached: the default mode counts its bytes
skb by skb (no socket keeps a count of them), so each datagram costs a flow-map update there.
"""
from __future__ import annotations

import os
import subprocess

from .common import (build_c, compare_modes, fmt, fmt_ci, parser, require_root, run, stats, traced,
                     write)


def main(argv=None) -> int:
    # short runs, many of them: this VM's speed moves between two levels ~60% apart for seconds
    # at a time, so neighbouring short runs compare what long ones cannot
    p = parser(__doc__.splitlines()[0], pairs=15, modes=True)
    p.add_argument("--trips", type=int, default=150_000,
                   help="round trips per run (~3 s here: whole cycles of the default's windows)")
    p.add_argument("--proto", choices=("tcp", "udp"), default="tcp",
                   help="the transport of the round trips (default: %(default)s)")
    p.add_argument("--cpu", type=int, default=None,
                   help="CPU the loop is pinned to (default: the last one)")
    args = p.parse_args(argv)
    require_root()
    if args.smoke:
        args.pairs, args.trips = 1, 20_000
    exe = build_c("roundtrip")
    cpu = args.cpu if args.cpu is not None else max(os.sched_getaffinity(0))

    def run(mode):
        with traced(mode):
            out = subprocess.run(["taskset", "-c", str(cpu), exe, str(args.trips), args.proto],
                                 capture_output=True, text=True, check=True).stdout
        return float(out)

    proto = args.proto.upper()
    results, runs = compare_modes(run, args.pairs, f"{proto} round trip", args.modes)
    base = stats([a for pairs in runs.values() for a, _ in pairs])
    rows = []
    for mode, r in results.items():
        with_ = stats([b for _, b in runs[mode]]).get("median")
        added = stats([b - a for a, b in runs[mode]]).get("median")
        rows.append(f"| {mode} | {fmt(base.get('median'), ',.0f')} | {fmt(with_, ',.0f')} | "
                    f"{fmt(added, ',.0f')} | {fmt_ci(r)} |")
    table = "\n".join([
        f"### Round-trip tax ({args.pairs} pairs x {args.trips:,} one-byte {proto} round trips over "
        f"loopback, one thread on CPU {cpu})", "",
        "| tracer | ns per round trip without | with | added ns (median of pairs) | ratio with/without: median (95% interval) |",
        "|---|---|---|---|---|", *rows])
    write("roundtrip" if args.proto == "tcp" else f"roundtrip_{args.proto}", args.out,
          {"pairs": args.pairs, "trips": args.trips, "cpu": cpu, "proto": args.proto,
           "runs": runs, "ratio": results, "smoke": args.smoke}, table)
    return 0


if __name__ == "__main__":
    run(main)
