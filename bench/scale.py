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
from steer.present.exporter import SteerCollector
from steer.model.flows import build_snapshot
from steer.model.topology import read_topology
from steer.trace.tracer import Tracer

from .common import fmt, parser, require_root, rss_kb, run, write


def fill(tracer: Tracer, n: int, ncpu: int) -> None:
    """N synthetic entries: distinct IPv4 senders and ports, spread over the CPUs, fresh enough
    that the idle timeout keeps them."""
    m = tracer.flow_map
    now = time.monotonic_ns()
    chunk = 50_000
    for start in range(0, n, chunk):
        keys, vals = bytearray(), bytearray()
        for i in range(start, min(n, start + chunk)):
            k = abi.FlowCpuKey(cpu=i % ncpu)
            k.flow.saddr[:4] = (198, 19, (i >> 8) & 0xFF, i & 0xFF)
            k.flow.daddr[:4] = (198, 18, 0, 2)
            k.flow.sport, k.flow.dport = 1024 + (i >> 16), 5201
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
    rss0 = rss_kb()
    # LRU maps evict a little before they are full (per-CPU free lists): leave headroom
    tracer = Tracer(max_flows=max(n * 5 // 4, 1024), idle_timeout=3600).start()
    try:
        t = time.perf_counter()
        fill(tracer, n, ncpu)
        fill_s = time.perf_counter() - t
        live = len(tracer.flow_map.items())
        t = time.perf_counter()
        a = tracer.sample()
        sample_s = time.perf_counter() - t
        t = time.perf_counter()
        b = tracer.sample()
        snap = build_snapshot(a, b, topo, tracer.capabilities)
        flows_s = time.perf_counter() - t + sample_s   # steer flows: two samples, one snapshot
        registry = CollectorRegistry(auto_describe=False)
        registry.register(SteerCollector(tracer, topo))
        for _ in range(2):   # the first scrapes fold in everything seen so far
            generate_latest(registry)
        times = []
        for _ in range(5):   # the steady state: what every later scrape costs
            t = time.perf_counter()
            body = generate_latest(registry)
            times.append(time.perf_counter() - t)
        scrape_s = statistics.median(times)
        kernel = tracer.flow_map.memlock()
        rss1 = rss_kb()
    finally:
        tracer.stop()
    del a, b, snap
    return {"entries": live, "fill_s": fill_s, "sample_s": sample_s, "flows_s": flows_s,
            "scrape_s": scrape_s, "scrape_bytes": len(body), "process_rss_kb": rss1 - rss0,
            "kernel_map_bytes": kernel,
            "kernel_bytes_per_entry": kernel / live if kernel and live else None,
            "process_bytes_per_entry": (rss1 - rss0) * 1024 / live if live else None}


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
    rows = [f"| {n:,} | {r['entries']:,} | {fmt(r['flows_s'])} | {fmt(r['scrape_s'])} | "
            f"{fmt(r['process_rss_kb'] / 1024, '.1f')} | {fmt((r['kernel_map_bytes'] or 0) / 2**20, '.1f')} | "
            f"{fmt(r['kernel_bytes_per_entry'], '.0f')} | {fmt(r['process_bytes_per_entry'], '.0f')} |"
            for n, r in results.items()]
    hundred_k = results.get(100000, {}).get("scrape_s")
    table = "\n".join([
        "### Scale (flow map filled from userspace with synthetic entries)", "",
        "| entries asked | in map | steer flows s | one scrape s (median of 5) | process MB | kernel map MB | "
        "kernel B/entry | process B/entry |", "|---|---|---|---|---|---|---|---|", *rows, "",
        f"100k entries scraped in {fmt(hundred_k)} s (target < 0.5 s)."])
    write("scale", args.out, {"sizes": results, "smoke": args.smoke}, table)
    return 0


if __name__ == "__main__":
    run(main)
