"""Request/response cost: redis GET requests/s over loopback (redis-server pinned to one CPU,
redis-benchmark -c 20 to another) with each tracer mode attached (B) vs none (A), alternated.
Many small requests and many syscalls per byte: where per-packet and per-syscall tracing cost
shows most. Target for the default (sampled) mode: B/A >= 0.97.

    sudo .venv/bin/python -m bench.rr [--pairs 8] [--requests 200000]
"""
from __future__ import annotations

import csv
import io
import os
import shutil
import socket
import subprocess
import time

from .common import (compare_modes, fmt, parser, require_root, stats, traced,
                     write)

CLIENTS = 20   # redis-benchmark's default connection count


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None) -> int:
    p = parser(__doc__.splitlines()[0], pairs=8)
    p.add_argument("--requests", type=int, default=200_000, help="GET requests per run")
    args = p.parse_args(argv)
    require_root()
    for tool in ("redis-server", "redis-benchmark"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} not found: apt-get install redis-server redis-tools")
    if args.smoke:
        args.pairs, args.requests = 1, 20_000
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu, client_cpu = cpus[-1], cpus[0]
    port = free_port()
    server = subprocess.Popen(["taskset", "-c", str(server_cpu), "redis-server", "--port", str(port),
                               "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True,
                             text=True).stdout.strip() != "PONG":
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("redis-server did not start")
            time.sleep(0.1)

        def run(mode):
            with traced(mode):
                out = subprocess.run(["taskset", "-c", str(client_cpu), "redis-benchmark", "-p",
                                      str(port), "-t", "get", "-n", str(args.requests), "-c",
                                      str(CLIENTS), "--csv"],
                                     capture_output=True, text=True, check=True).stdout
            rows = [r for r in csv.reader(io.StringIO(out)) if r and r[0] == "GET"]
            return float(rows[-1][1])

        results, runs = compare_modes(run, args.pairs, "redis GET")
    finally:
        server.kill()
        server.wait()
    rows = [f"| {mode} | {fmt(stats([a for a, _ in runs[mode]]).get('median'), ',.0f')} | "
            f"{fmt(stats([b for _, b in runs[mode]]).get('median'), ',.0f')} | "
            f"{fmt(r.get('median'))} | {fmt(r.get('min'))} | {fmt(r.get('max'))} |"
            for mode, r in results.items()]
    table = "\n".join([
        f"### Request/response: redis GET ({args.pairs} pairs x {args.requests:,} requests, "
        f"-c {CLIENTS}, server CPU {server_cpu}, client CPU {client_cpu}, loopback)", "",
        "| tracer | requests/s without (median) | requests/s with (median) | ratio with/without: median | min | max |",
        "|---|---|---|---|---|---|", *rows, "",
        "Target for the default (sampled) mode: >= 0.97."])
    write("rr", args.out, {"pairs": args.pairs, "requests": args.requests, "clients": CLIENTS,
                           "server_cpu": server_cpu, "client_cpu": client_cpu, "runs": runs,
                           "ratio": results, "smoke": args.smoke}, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
