"""Syscall tax: ns per unrelated system call (getppid() in a C loop, pinned) with each tracer mode
attached (B) vs none (A), alternated. Target for the default (sampled) mode: B/A <= 1.05.

    sudo .venv/bin/python -m bench.syscall_tax [--pairs 10] [--calls 5000000]
"""
from __future__ import annotations

import os
import subprocess

from .common import (HERE, compare_modes, fmt, parser, require_root, stats,
                     traced, write)

BUILD = os.path.join(os.path.dirname(HERE), "build")


def build_loop() -> str:
    exe = os.path.join(BUILD, "getppid_loop")
    src = os.path.join(HERE, "getppid_loop.c")
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        os.makedirs(BUILD, exist_ok=True)
        cc = next((c for c in ("cc", "clang", "gcc") if subprocess.run(
            ["sh", "-c", f"command -v {c}"], capture_output=True).returncode == 0), None)
        if cc is None:
            raise SystemExit("no C compiler (apt-get install clang)")
        subprocess.run([cc, "-O2", "-o", exe, src], check=True)
    return exe


def main(argv=None) -> int:
    p = parser(__doc__.splitlines()[0], pairs=10)
    p.add_argument("--calls", type=int, default=5_000_000, help="getppid() calls per run")
    p.add_argument("--cpu", type=int, default=None,
                   help="CPU the loop is pinned to (default: the last one)")
    args = p.parse_args(argv)
    require_root()
    if args.smoke:
        args.pairs, args.calls = 1, 200_000
    exe = build_loop()
    cpu = args.cpu if args.cpu is not None else max(os.sched_getaffinity(0))

    def run(mode):
        with traced(mode):
            out = subprocess.run(["taskset", "-c", str(cpu), exe, str(args.calls)],
                                 capture_output=True, text=True, check=True).stdout
        return float(out)

    results, runs = compare_modes(run, args.pairs, "syscall tax")
    base = stats([a for pairs in runs.values() for a, _ in pairs])
    rows = [f"| {mode} | {fmt(base.get('median'), '.1f')} | "
            f"{fmt(stats([b for _, b in runs[mode]]).get('median'), '.1f')} | "
            f"{fmt(r.get('median'))} | {fmt(r.get('min'))} | {fmt(r.get('max'))} |"
            for mode, r in results.items()]
    table = "\n".join([
        f"### Syscall tax ({args.pairs} pairs x {args.calls:,} getppid() calls on CPU {cpu})", "",
        "| tracer | ns per call without | ns per call with | ratio with/without: median | min | max |",
        "|---|---|---|---|---|---|", *rows, "",
        "Target for the default (sampled) mode: <= 1.05."])
    write("syscall_tax", args.out, {"pairs": args.pairs, "calls": args.calls, "cpu": cpu,
                                    "runs": runs, "ratio": results, "smoke": args.smoke}, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
