"""Churn soak: the exporter and steer auto while a busy frontend's short connections and a port
scan go by, for --seconds. Does the exporter's memory, scrape time and series count level off?

The lab's receiving namespace runs redis-server; redis-benchmark in the sending one opens a new
connection for every request (-k 0, as `Connection: close` does to a web server), as fast as it
goes; a scanner there connects to every port of the receiver in turn (each a SYN and a RST: a
new flow for the tracer each time). `steer export` is scraped every second; `steer auto
--dry-run` (llc-peer) runs on the lab's veth. Targets (issue 37): RSS at most 80 MB and a scrape
at most 0.3 s over the last half, with no growth there. At the end each long-running command is
killed with SIGKILL, `steer reset` runs, and nothing of steer may be left in the kernel: no
program, no link, no pin.

    sudo .venv/bin/python -m bench.soak [--seconds 600]
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

from .bystanders import parse_stat
from .common import parser, require_root, rss_kb, run, write

TARGET_RSS_MB, TARGET_SCRAPE_S = 80.0, 0.3
REDIS_PORT = 7000
SCANNER = r"""
import errno, select, socket, sys
dst, window = sys.argv[1], 256
port, live = 1, {}
while True:
    while len(live) < window:
        s = socket.socket(); s.setblocking(False)
        s.connect_ex((dst, port)); live[s.fileno()] = s
        port = port % 65535 + 1
    _, w, _ = select.select([], list(live), [], 0.5)
    for fd in w or list(live):
        live.pop(fd).close()
"""


def _steer(*args: str) -> list[str]:
    return [sys.executable, "-m", "steer", *args]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(url: str) -> tuple[float, str | None]:
    start = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            body = r.read().decode()
    except OSError:
        return time.monotonic() - start, None
    return time.monotonic() - start, body


def _value(body: str, name: str) -> float | None:
    m = re.search(rf"^{name} (\S+)$", body, re.M)
    return float(m.group(1)) if m else None


def _redis_connections(ns: str) -> int:
    out = subprocess.run(["ip", "netns", "exec", ns, "redis-cli", "-h", "198.18.0.2", "-p",
                          str(REDIS_PORT), "info", "stats"], capture_output=True, text=True).stdout
    m = re.search(r"total_connections_received:(\d+)", out)
    return int(m.group(1)) if m else 0


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process PID and its threads so far (/proc/PID/stat): the
    system part holds the receive processing of the packets it sends (veth runs it there)."""
    with open(f"/proc/{pid}/stat") as f:
        return parse_stat(f.read())[2] / os.sysconf("SC_CLK_TCK")


def leftovers() -> list[str]:
    """What of steer is still in the kernel: programs (ft_*, steer_*), links, pins."""
    out = []
    progs = json.loads(subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True,
                                      text=True).stdout or "[]")
    out += [f"program {p.get('name')}" for p in progs
            if str(p.get("name", "")).startswith(("ft_", "steer_"))]
    # steer reset empties the pin directory and leaves it (an exporter may read pins from it)
    if os.path.isdir("/sys/fs/bpf/steer") and os.listdir("/sys/fs/bpf/steer"):
        out.append("pins under /sys/fs/bpf/steer")
    return out


def main() -> int:
    p = parser(__doc__.split("\n")[0], seconds=600.0)
    args = p.parse_args()
    require_root()
    for tool in ("redis-server", "redis-benchmark", "redis-cli", "bpftool"):
        if not subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).stdout:
            sys.exit(f"soak: {tool} not found (apt-get install redis-server redis-tools bpftool)")
    seconds = 12.0 if args.smoke else args.seconds
    from steer.experiment.lab import Lab
    from .common import lab_flow
    port = _free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    rows: list[dict] = []
    procs: dict[str, subprocess.Popen] = {}
    with Lab([lab_flow()]) as lab:
        # redis-benchmark -k 0 closes each connection itself, so its side keeps the TIME_WAIT:
        # without reuse the sender's ephemeral ports run out at a few hundred connections a
        # second (95/s, 2026-11-26), where a web server closing after its reply is not held back
        for knob, value in (("net.ipv4.tcp_tw_reuse", "1"),
                            ("net.ipv4.ip_local_port_range", "1024 65000")):
            subprocess.run(["ip", "netns", "exec", lab.tx, "sysctl", "-qw", f"{knob}={value}"],
                           check=True)
        try:
            procs["redis"] = subprocess.Popen(
                ["ip", "netns", "exec", lab.rx, "redis-server", "--port", str(REDIS_PORT), "--bind",
                 "198.18.0.2", "--save", "", "--appendonly", "no", "--protected-mode", "no"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs["export"] = subprocess.Popen(_steer("export", "--listen", f"127.0.0.1:{port}"),
                                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                               text=True)
            procs["auto"] = subprocess.Popen(
                _steer("auto", "--dev", "veth-rx", "--netns", lab.rx, "--policy", "llc-peer",
                       "--dry-run", "--interval", "2"),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            end = time.monotonic() + 60
            while _scrape(url)[1] is None:
                if time.monotonic() > end or procs["export"].poll() is not None:
                    sys.exit(f"soak: the exporter did not start: {procs['export'].stderr.read()}")
                time.sleep(0.5)
            procs["churn"] = subprocess.Popen(
                ["ip", "netns", "exec", lab.tx, "redis-benchmark", "-h", "198.18.0.2", "-p",
                 str(REDIS_PORT), "-k", "0", "-c", "20", "-n", str(10**9), "-t", "ping_inline",
                 "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs["scan"] = subprocess.Popen(["ip", "netns", "exec", lab.tx, sys.executable, "-c",
                                              SCANNER, "198.18.0.2"], stdout=subprocess.DEVNULL)
            start, conns0 = time.monotonic(), _redis_connections(lab.rx)
            cpu0 = {n: cpu_seconds(p.pid) for n, p in procs.items()}
            while (t := time.monotonic() - start) < seconds:
                took, body = _scrape(url)
                rows.append({"t": round(t, 1), "rss_mb": round(rss_kb(procs["export"].pid) / 1024, 1),
                             "scrape_s": round(took, 3), "ok": body is not None,
                             "series": sum(1 for l in (body or "").splitlines()
                                           if l and not l.startswith("#")),
                             # the exporter's own time for the read and snapshot, without
                             # the wait for a CPU the churn keeps busy
                             "collect_s": _value(body or "", "steer_scrape_duration_seconds"),
                             "flow_entries": _value(body or "", "steer_tracer_flow_entries"),
                             "evictions": _value(body or "", "steer_tracer_evictions_total")})
                time.sleep(max(0.0, 1.0 - took))
            rate = (_redis_connections(lab.rx) - conns0) / seconds
            # who holds the CPUs: each process's share of one CPU over the run
            elapsed = time.monotonic() - start
            cpu_share = {n: round((cpu_seconds(p.pid) - cpu0[n]) / elapsed, 3)
                         for n, p in procs.items()}
        finally:
            alive = {n: p.poll() is None for n, p in procs.items()}
            for name in ("export", "auto"):   # the long-running commands die without a word
                if name in procs:
                    procs[name].send_signal(signal.SIGKILL)
            for proc in procs.values():
                proc.kill()
                proc.wait()
    reset = subprocess.run(_steer("reset"), capture_output=True, text=True)
    left = leftovers()
    half = [r for r in rows if r["t"] >= seconds / 2 and r["ok"]]
    summary = _summary(rows, half, rate, alive, left, reset.returncode)
    summary["cpu_share"] = cpu_share
    write("soak", args.out,
          {"smoke": args.smoke, "seconds": seconds,
           "targets": {"rss_mb": TARGET_RSS_MB, "scrape_s": TARGET_SCRAPE_S},
           "summary": summary, "rows": rows}, _table(summary, seconds))
    return 0


def _summary(rows, half, rate, alive, left, reset_rc) -> dict:
    def med(key, rs):
        vals = [r[key] for r in rs if r[key] is not None]
        return round(statistics.median(vals), 3) if vals else None

    def p99(key, rs):
        vals = sorted(r[key] for r in rs if r[key] is not None)
        return round(vals[min(len(vals) - 1, int(0.99 * len(vals)))], 3) if vals else None

    def top(key, rs):
        return round(max((r[key] or 0 for r in rs), default=0), 3) if rs else None
    first = [r for r in rows if r not in half and r["ok"]]
    slope = None
    if len(half) > 2:
        ts, ms = [r["t"] for r in half], [r["rss_mb"] for r in half]
        mt, mm = statistics.mean(ts), statistics.mean(ms)
        den = sum((t - mt) ** 2 for t in ts)
        slope = round(60 * sum((t - mt) * (m - mm) for t, m in zip(ts, ms)) / den, 3) if den else None
    return {
        "new_connections_per_s": round(rate),
        "scrapes": len(rows), "failed_scrapes": sum(not r["ok"] for r in rows),
        "rss_mb": {"first_half_median": med("rss_mb", first), "last_half_median": med("rss_mb", half),
                   "last_half_max": max((r["rss_mb"] for r in half), default=None),
                   "last_half_slope_mb_per_min": slope},
        "scrape_s": {"first_half_median": med("scrape_s", first),
                     "last_half_median": med("scrape_s", half), "last_half_p99": p99("scrape_s", half),
                     "last_half_max": top("scrape_s", half),
                     "last_half_over_target": sum(r["scrape_s"] > TARGET_SCRAPE_S for r in half)},
        "collect_s": {"first_half_median": med("collect_s", first),
                      "last_half_median": med("collect_s", half),
                      "last_half_p99": p99("collect_s", half), "last_half_max": top("collect_s", half)},
        "evictions_per_s": round(((rows[-1]["evictions"] or 0) - (rows[0]["evictions"] or 0))
                                 / max(rows[-1]["t"] - rows[0]["t"], 1e-9)) if len(rows) > 1 else None,
        "series": {"min": min((r["series"] for r in rows if r["ok"]), default=None),
                   "max": max((r["series"] for r in rows if r["ok"]), default=None)},
        "flow_entries_max": max((r["flow_entries"] or 0 for r in rows), default=None),
        "alive_until_the_end": alive,
        "after_kill_9_and_reset": {"reset_exit": reset_rc, "left_in_kernel": left},
    }


def _table(s: dict, seconds: float) -> str:
    rss, scr, col = s["rss_mb"], s["scrape_s"], s["collect_s"]
    ok = lambda good: "met" if good else "NOT met"  # noqa: E731
    return "\n".join([
        "### Churn soak: the exporter's memory and scrape time under connection churn",
        "",
        f"{seconds:g} s: {s['new_connections_per_s']:,} new connections/s "
        "(redis-benchmark -k 0, its TIME_WAIT ports reused) plus a port scan, "
        f"{s.get('evictions_per_s') or 0:,} flow map evictions/s; the exporter scraped every "
        "second, steer auto --dry-run running.",
        "",
        "| | first half (median) | last half (median) | last half (99th percentile) | "
        "last half (max) | target |",
        "|---|---|---|---|---|---|",
        f"| exporter RSS, MB | {rss['first_half_median']} | {rss['last_half_median']} | | "
        f"{rss['last_half_max']} | <= {TARGET_RSS_MB:g}: "
        f"{ok((rss['last_half_max'] or 1e9) <= TARGET_RSS_MB)} |",
        f"| scrape, s | {scr['first_half_median']} | {scr['last_half_median']} | "
        f"{scr.get('last_half_p99')} | {scr['last_half_max']} | <= {TARGET_SCRAPE_S:g}: "
        f"{ok((scr['last_half_max'] or 1e9) <= TARGET_SCRAPE_S)} at the max "
        f"({scr.get('last_half_over_target')} of the last half's scrapes above it), "
        f"{ok((scr.get('last_half_p99') or 1e9) <= TARGET_SCRAPE_S)} at the 99th percentile |",
        f"| of which the exporter's read and snapshot, s | {col['first_half_median']} | "
        f"{col['last_half_median']} | {col.get('last_half_p99')} | {col['last_half_max']} | |",
        "",
        f"RSS slope over the last half: {rss['last_half_slope_mb_per_min']} MB/min; series "
        f"{s['series']['min']}-{s['series']['max']}; flow map entries up to "
        f"{s['flow_entries_max']}; scrapes {s['scrapes']}, failed {s['failed_scrapes']}.",
        f"CPU used, in CPUs (of {os.cpu_count()}): " + ", ".join(
            f"{name} {share:g}" for name, share in s.get("cpu_share", {}).items()) + ".",
        f"After kill -9 of export and auto and `steer reset` (exit "
        f"{s['after_kill_9_and_reset']['reset_exit']}): "
        + (", ".join(s["after_kill_9_and_reset"]["left_in_kernel"]) or "nothing left in the kernel")
        + ".",
    ])


if __name__ == "__main__":
    run(main)
