"""Scale: the flow map filled with 1k to 1M (flow, CPU) entries, then what reading it costs:
`steer flows` (two samples and a snapshot), one exporter scrape, process and kernel memory.
Target: 100k flows scraped in under 0.5 s.

    sudo .venv/bin/python -m bench.scale [--sizes 1000,10000,100000,1000000]
"""
from __future__ import annotations

import gc
import statistics
import time

from prometheus_client import CollectorRegistry, generate_latest

from steer.abi import flowtrace as abi
from steer.kernel.process import trim_heap
from steer.present.exporter import SteerCollector
from steer.model.flows import build_snapshot
from steer.model.topology import read_topology
from steer.trace.tracer import Tracer

from .common import fmt, parser, require_root, rss_kb, run, write


def fill(tracer: Tracer, n: int, ncpu: int, first: int = 0) -> None:
    """N synthetic entries: distinct IPv4 senders and ports (from the FIRST-th), spread over the
    CPUs, fresh enough that the idle timeout keeps them."""
    m = tracer.flow_map
    now = time.monotonic_ns()
    chunk = 50_000
    for start in range(first, first + n, chunk):
        keys, vals = bytearray(), bytearray()
        for i in range(start, min(first + n, start + chunk)):
            k = abi.FlowCpuKey(cpu=i % ncpu)
            k.flow.saddr[:4] = (198, 19, (i >> 8) & 0xFF, i & 0xFF)
            k.flow.daddr[:4] = (198, 18, 0, 2)
            k.flow.sport, k.flow.dport = 1024 + (i >> 16) % 64000, 5201
            k.flow.proto, k.flow.family = 6, 4
            v = abi.FlowStats(rx_bytes=1000 + i, rx_packets=10, rx_skbs=10, kernel_ns=5000,
                              app_bytes=900 + i, app_calls=3, app_ns=7000, last_seen_ns=now,
                              app_pid=1, app_comm=b"bench")
            keys += bytes(k)
            vals += bytes(v)
        m.update_batch(bytes(keys), bytes(vals))


def measure(n: int, topo) -> dict:
    ncpu = len(topo.online)
    gc.collect()
    trim_heap()
    rss0 = rss_kb()
    # LRU maps evict a little before they are full (per-CPU free lists): leave headroom
    tracer = Tracer(max_flows=max(n * 5 // 4, 1024), idle_timeout=3600).start()
    try:
        t = time.perf_counter()
        fill(tracer, n, ncpu)
        fill_s = time.perf_counter() - t
        live = len(tracer.flow_map.items())
        gc.collect()
        trim_heap()
        rss_filled = rss_kb()   # the tracer loaded, its map filled: what the process starts from
        # the exporter first, alone: its memory is what it keeps of the map between scrapes
        registry = CollectorRegistry(auto_describe=False)
        registry.register(SteerCollector(tracer, topo, release_memory=trim_heap))
        for _ in range(2):   # the first scrapes fold in everything seen so far
            generate_latest(registry)
        times = []
        for _ in range(5):   # the steady state: what every later scrape costs
            t = time.perf_counter()
            body = generate_latest(registry)
            times.append(time.perf_counter() - t)
        scrape_s = statistics.median(times)
        rss_export = rss_kb()
        t = time.perf_counter()
        a = tracer.sample()
        sample_s = time.perf_counter() - t
        t = time.perf_counter()
        b = tracer.sample()
        snap = build_snapshot(a, b, topo, tracer.capabilities)
        flows_s = time.perf_counter() - t + sample_s   # steer flows: two samples, one snapshot
        rss_flows = rss_kb()
        kernel = tracer.flow_map.memlock()
    finally:
        tracer.stop()
    del a, b, snap
    return {"entries": live, "fill_s": fill_s, "sample_s": sample_s, "flows_s": flows_s,
            "scrape_s": scrape_s, "scrape_bytes": len(body),
            "process_rss_kb": rss_flows - rss0, "exporter_rss_kb": rss_export - rss_filled,
            "flows_rss_kb": rss_flows - rss_export,
            "kernel_map_bytes": kernel,
            "kernel_bytes_per_entry": kernel / live if kernel and live else None,
            "exporter_bytes_per_entry": (rss_export - rss_filled) * 1024 / live if live else None,
            "flows_bytes_per_entry": (rss_flows - rss_export) * 1024 / live if live else None}


CHURN_ENTRIES = 16384   # the exporter's map at its default --max-flows, full
CHURN_SCRAPES = 12


def measure_churn(topo, n: int = CHURN_ENTRIES, scrapes: int = CHURN_SCRAPES) -> dict:
    """Connection churn at its worst: before every scrape, the whole map replaced by N new
    flows (a port scan, a frontend's short connections). The exporter's scrape time and RSS
    over the last half of SCRAPES (issue 37's targets under churn: 0.3 s, 80 MB)."""
    ncpu = len(topo.online)
    tracer = Tracer(max_flows=n, idle_timeout=3600).start()
    try:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(SteerCollector(tracer, topo, release_memory=trim_heap))
        generate_latest(registry)
        gc.collect()
        trim_heap()
        rss0 = rss_kb()
        times, rss = [], []
        for r in range(scrapes):
            fill(tracer, n, ncpu, first=(r + 1) * n)
            t = time.perf_counter()
            generate_latest(registry)
            times.append(time.perf_counter() - t)
            rss.append(rss_kb())
        entries = len(tracer.flow_map.items())
    finally:
        tracer.stop()
    half = scrapes // 2
    return {"entries": entries, "scrapes": scrapes, "scrape_s": statistics.median(times[half:]),
            "scrape_s_max": max(times[half:]), "rss_start_mb": rss0 / 1024,
            "rss_mb": statistics.median(rss[half:]) / 1024, "rss_max_mb": max(rss[half:]) / 1024}


def main(argv=None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,10000,100000,1000000")
    args = p.parse_args(argv)
    require_root()
    sizes = [1000, 10000] if args.smoke else [int(x) for x in args.sizes.split(",")]
    topo = read_topology()
    results = {}
    for n in sizes:
        print(f"  {n:,} entries ...", flush=True)
        results[n] = measure(n, topo)
    rows = [f"| {n:,} | {r['entries']:,} | {fmt(r['scrape_s'])} | "
            f"{fmt(r['exporter_bytes_per_entry'], '.0f')} | {fmt(r['flows_s'])} | "
            f"{fmt(r['flows_bytes_per_entry'], '.0f')} | "
            f"{fmt((r['kernel_map_bytes'] or 0) / 2**20, '.1f')} | "
            f"{fmt(r['kernel_bytes_per_entry'], '.0f')} |"
            for n, r in results.items()]
    print(f"  churn: {CHURN_ENTRIES:,} new entries before each of {CHURN_SCRAPES} scrapes ...",
          flush=True)
    churn = measure_churn(topo, scrapes=4 if args.smoke else CHURN_SCRAPES)
    hundred_k = results.get(100000, {}).get("scrape_s")
    table = "\n".join([
        "### Scale (flow map filled from userspace with synthetic entries)", "",
        "| entries asked | in map | one scrape s (median of 5) | exporter B/entry | steer flows s | "
        "steer flows B/entry | kernel map MB | kernel B/entry |", "|---|---|---|---|---|---|---|---|",
        *rows, "",
        f"100k entries scraped in {fmt(hundred_k)} s (target < 0.5 s). The exporter's bytes an "
        "entry: its RSS after the scrapes less before them (the map filled, the tracer loaded); "
        "`steer flows`' after its two reads and snapshot less the exporter's.", "",
        f"Churn: the map ({churn['entries']:,} entries) replaced by new flows before each of "
        f"{churn['scrapes']} scrapes; over the last half a scrape took {fmt(churn['scrape_s'])} s "
        f"(max {fmt(churn['scrape_s_max'])}; target 0.3) and the process's RSS was "
        f"{fmt(churn['rss_mb'], '.1f')} MB (max {fmt(churn['rss_max_mb'], '.1f')}; "
        f"{fmt(churn['rss_start_mb'], '.1f')} before the first; this process also fills the map)."])
    write("scale", args.out, {"sizes": results, "churn": churn, "smoke": args.smoke}, table)
    return 0


if __name__ == "__main__":
    run(main)
