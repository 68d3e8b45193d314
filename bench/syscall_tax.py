"""Syscall tax: ns per unrelated system call (getppid() in a C loop, pinned) with each tracer mode
attached (B) vs none (A), alternated. The default mode's target is bench.summary's.

    sudo .venv/bin/python -m bench.syscall_tax [--pairs 10] [--calls 12500000]
"""
from __future__ import annotations

import os
import subprocess

from .common import (build_c, compare_modes, fmt, fmt_ci, parser, require_root, run, stats, traced,
                     write)
from .summary import target_line


def main(argv=None) -> int:
    p = parser(__doc__.splitlines()[0], pairs=10, modes=True)
    p.add_argument("--calls", type=int, default=12_500_000,
                   help="getppid() calls per run (~1.5 s here: three cycles of the default's windows)")
    p.add_argument("--cpu", type=int, default=None,
                   help="CPU the loop is pinned to (default: the last one)")
    args = p.parse_args(argv)
    require_root()
    if args.smoke:
        args.pairs, args.calls = 1, 200_000
    exe = build_c("getppid_loop")
    cpu = args.cpu if args.cpu is not None else max(os.sched_getaffinity(0))

    def run(mode):
        with traced(mode):
            out = subprocess.run(["taskset", "-c", str(cpu), exe, str(args.calls)],
                                 capture_output=True, text=True, check=True).stdout
        return float(out)

    results, runs = compare_modes(run, args.pairs, "syscall tax", args.modes)
    base = stats([a for pairs in runs.values() for a, _ in pairs])
    rows = [f"| {mode} | {fmt(base.get('median'), '.1f')} | "
            f"{fmt(stats([b for _, b in runs[mode]]).get('median'), '.1f')} | "
            f"{fmt_ci(r)} | {fmt(r.get('min'))} | {fmt(r.get('max'))} |"
            for mode, r in results.items()]
    table = "\n".join([
        f"### Syscall tax ({args.pairs} pairs x {args.calls:,} getppid() calls on CPU {cpu})", "",
        "| tracer | ns per call without | ns per call with | ratio with/without: median (95% interval) | min | max |",
        "|---|---|---|---|---|---|", *rows, "",
        target_line("syscall_tax")])
    write("syscall_tax", args.out, {"pairs": args.pairs, "calls": args.calls, "cpu": cpu,
                                    "runs": runs, "ratio": results, "smoke": args.smoke}, table)
    return 0


if __name__ == "__main__":
    run(main)
