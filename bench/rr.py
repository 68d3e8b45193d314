"""Request/response cost: redis GET requests/s over loopback (redis-server pinned to one CPU,
redis-benchmark -c 20 to another) with each tracer mode attached (B) vs none (A), alternated.
Many small requests and many syscalls per byte: where per-packet and per-syscall tracing cost
shows most. The default mode's target is bench.summary's.

One redis-benchmark runs for the whole measurement and each window's rate is the server's own
count of commands (INFO stats) over --seconds: runs of redis-benchmark of their own varied by
+-15% here, from start-up to start-up, which drowned a 3% effect. Each tracer is loaded once and
attached only for its windows (bench.common.traced), so windows are short and many: single
windows here still range from 0.6 to 1.6 of their neighbour, and the result is the median ratio
with its bootstrap 95% interval.

    sudo .venv/bin/python -m bench.rr [--pairs 20] [--seconds 2.5]

A run spans five cycles of the default mode's windows (50 ms on the hooks every 500 ms): a run
shorter than a cycle holds one window or none, and its ratio says which, not what the mode costs.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

from .common import (compare_modes, mode_rows, parser, require_root, run, traced,
                     write)
from .summary import target_line

RUN_PAIRS, RUN_SECONDS = 20, 2.5   # whole cycles of the default's windows a run (docstring)
CLIENTS = 20   # redis-benchmark's default connection count
ENDLESS = 10**10   # requests for the one redis-benchmark: it runs until the measurement kills it
WARMUP_SECONDS = 10   # load before the first window: connections, buffers and caches settle


def commands_processed(port: int) -> int:
    """The server's total_commands_processed, by one INFO over a connection of its own."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"*2\r\n$4\r\nINFO\r\n$5\r\nstats\r\n")
        buf = b""
        while b"total_commands_processed:" not in buf or not buf.endswith(b"\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    for line in buf.decode().splitlines():
        if line.startswith("total_commands_processed:"):
            return int(line.split(":")[1])
    raise SystemExit("redis INFO has no total_commands_processed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None) -> int:
    p = parser(__doc__.splitlines()[0], pairs=RUN_PAIRS, seconds=RUN_SECONDS, modes=True)
    args = p.parse_args(argv)
    require_root()
    for tool in ("redis-server", "redis-benchmark"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} not found: apt-get install redis-server redis-tools")
    if args.smoke:
        args.pairs, args.seconds = 1, 1.0
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu, client_cpu = cpus[-1], cpus[0]
    port = free_port()
    server = subprocess.Popen(["taskset", "-c", str(server_cpu), "redis-server", "--port", str(port),
                               "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = None
    try:
        deadline = time.monotonic() + 10
        while subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True,
                             text=True).stdout.strip() != "PONG":
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("redis-server did not start")
            time.sleep(0.1)

        client = subprocess.Popen(["taskset", "-c", str(client_cpu), "redis-benchmark", "-p",
                                   str(port), "-t", "get", "-n", str(ENDLESS), "-c", str(CLIENTS),
                                   "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0 if args.smoke else WARMUP_SECONDS)

        def run(mode):
            with traced(mode):
                n0, t0 = commands_processed(port), time.monotonic()
                time.sleep(args.seconds)
                n1, t1 = commands_processed(port), time.monotonic()
            if client.poll() is not None:
                raise SystemExit("redis-benchmark stopped")
            return (n1 - n0) / (t1 - t0)

        results, runs = compare_modes(run, args.pairs, "redis GET", args.modes)
    finally:
        for proc in (client, server):
            if proc:
                proc.kill()
                proc.wait()
    rows = mode_rows(results, runs, ",.0f")
    table = "\n".join([
        f"### Request/response: redis GET ({args.pairs} pairs x {args.seconds:g} s windows of one "
        f"redis-benchmark -c {CLIENTS}, server CPU {server_cpu}, client CPU {client_cpu}, "
        "loopback)", "",
        "| tracer | requests/s without (median) | requests/s with (median) | ratio with/without: median (95% interval) | min | max |",
        "|---|---|---|---|---|---|", *rows, "",
        target_line("rr")])
    write("rr", args.out, {"pairs": args.pairs, "seconds": args.seconds, "clients": CLIENTS,
                           "server_cpu": server_cpu, "client_cpu": client_cpu, "runs": runs,
                           "ratio": results, "smoke": args.smoke}, table)
    return 0


if __name__ == "__main__":
    run(main)
