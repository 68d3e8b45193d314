"""Scale with CPUs: what user space spends on one tracer interval, one exporter scrape and one
live-view frame, against the number of CPUs, from 2 to 256.

    python -m bench.scale_cpus [--flows 1000] [--repeat 5]

This host has 2 CPUs, so the machines are fixture sysfs trees (tests/support/sysfs.py: the
2-CPU VM, a 2 x 12-core SMT Xeon, 2 x 48- and 2 x 64-core SMT EPYCs) and the tracer's reads are
synthetic TraceSamples of FLOWS flows, each with entries on its softirq's and its reader's CPUs,
and a CpuSample per CPU, as a Tracer hands them over. No root needed for that table.

The kernel's part of a read grows with the CPUs too: a per-CPU map's lookup copies one value per
possible CPU (cpu_totals; napi_polls for each NAPI instance), and the flow map, keyed by (flow,
CPU), grows with the CPUs a flow touches. As root, a second table times a real tracer's read and
scrape on this machine, and takes the rows the guest tier measured in its qemu guests of 4 and
16 vCPUs (tests/guest: their consoles' STEER_VM_RESULT lines, which tests/guest/vm/run.py keeps
in build/vm/): a real kernel with more CPUs than this host has.
"""
from __future__ import annotations

import json
import os
import statistics
import struct
import sys
import tempfile
import time
from dataclasses import replace

from prometheus_client import CollectorRegistry, generate_latest
from rich.console import Console

from steer.model.flowarrays import FlowArrays
from steer.model.flows import build_snapshot
from steer.model.capabilities import MISSING, WORKS, Capabilities, Figure
from steer.model.samples import CpuSample, FlowCpuSample, FlowId, TraceSample
from steer.model.topology import read_topology
from steer.present.exporter import SteerCollector
from steer.present.view import ViewState, screen

from .common import fmt, parser, run, write

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from fakes import FakeTracer  # noqa: E402  (the tests' stand-in tracer)
from sysfs import epyc_2s, xeon_2s_smt  # noqa: E402  (and fixture machines)

VM = os.path.join(ROOT, "tests", "support", "fixtures", "sysfs-vm-2cpu")
CAPS = Capabilities(*[Figure(WORKS, "")] * 3, Figure(MISSING, "no PMU"),
                    timing=Figure(WORKS, "sampled: 99 Hz"), mode="sampled")
S = 1_000_000_000


def machines(tmp: str) -> dict[int, str]:
    """CPUs -> the sysfs root of a fixture machine with that many."""
    return {2: VM, 48: xeon_2s_smt(os.path.join(tmp, "xeon")),
            192: epyc_2s(os.path.join(tmp, "epyc96"), cores=48),
            256: epyc_2s(os.path.join(tmp, "epyc128"), cores=64)}


def reads(ncpu: int, flows: int, n: int) -> list[TraceSample]:
    """N successive reads of FLOWS flows spread over NCPU CPUs, counters growing a second each."""
    out = []
    for t in range(n):
        entries = {}
        for i in range(flows):
            f = FlowId("tcp", f"198.19.{i >> 8 & 255}.{i & 255}", 1024 + i, "198.18.0.2", 5201)
            k, a = i % ncpu, (i * 7 + 1) % ncpu
            entries[(f, k)] = FlowCpuSample(f, k, rx_bytes=(t + 1) * 10**6, rx_skbs=(t + 1) * 100,
                                            kernel_ns=(t + 1) * 10**6, kernel_samples=(t + 1))
            if a != k:
                entries[(f, a)] = FlowCpuSample(f, a, app_bytes=(t + 1) * 10**6,
                                                app_ns=(t + 1) * 2 * 10**6, app_samples=t + 1,
                                                app_pid=1000 + i, app_comm="reader")
        cpus = tuple(CpuSample(c, net_rx_events=(t + 1) * 100, net_rx_ns=(t + 1) * S // 10,
                               app_ns=(t + 1) * S // 20)
                     for c in range(ncpu))
        out.append(TraceSample((t + 1) * S, entries, cpus, len(entries), 65536, seq=t + 1,
                               changed=tuple(entries)))
    return out


def measure(ncpu: int, root: str, flows: int, repeat: int) -> dict:
    topo = read_topology(root)
    assert len(topo.online) == ncpu, (root, len(topo.online))
    samples = reads(ncpu, flows, repeat + 3)
    snap_s = []
    for a, b in zip(samples, samples[1:]):
        t = time.perf_counter()
        snap = build_snapshot(a, b, topo, CAPS)
        snap_s.append(time.perf_counter() - t)
    out = {"cpus": ncpu, "flows": flows, "snapshot_s": statistics.median(snap_s)}
    # the exporter reads the map as arrays (Tracer.sample_arrays): made here, outside the timing
    as_read = [replace(s, entries={}, arrays=FlowArrays.of_entries(s.entries)) for s in samples]
    for labels in ("cpu", "socket"):
        reg = CollectorRegistry(auto_describe=False)
        reg.register(SteerCollector(FakeTracer(as_read, CAPS), topo, cpu_labels=labels))
        generate_latest(reg)   # the first read
        times, body = [], b""
        for _ in range(repeat):
            t = time.perf_counter()
            body = generate_latest(reg)
            times.append(time.perf_counter() - t)
        out[f"scrape_s_{labels}"] = statistics.median(times)
        out[f"series_{labels}"] = sum(1 for line in body.splitlines()
                                      if line and not line.startswith(b"#"))
    times = []
    for _ in range(repeat):
        console = Console(width=120, height=40, record=True, color_system=None, file=open(os.devnull, "w"))
        t = time.perf_counter()
        console.print(screen(snap, topo, ViewState(), 120, 40))
        times.append(time.perf_counter() - t)
    out["frame_s"] = statistics.median(times)
    return out


GUEST_RESULTS = os.path.join(ROOT, "build", "vm")   # the guest tier's rows (tests/guest/vm/run.py)
KERNEL_MARKER = "STEER_VM_RESULT=scale-kernel-"     # a guest's row on its console: MARKER<cpus> <json>


def kernel_row(flows: int, repeat: int) -> dict:
    """The kernel's part on this machine (root): a real tracer whose flow map holds FLOWS
    synthetic flows, one entry each over the CPUs. One tracer read (sample_arrays: the socket
    flush, the flow map's batches, the per-CPU totals with a value per possible CPU, the NAPI
    map), the per-CPU totals' lookup alone, and one exporter scrape; medians of REPEAT."""
    from steer.kernel.maps import possible_cpus
    from steer.kernel.process import trim_heap
    from steer.trace.tracer import Tracer
    from .scale import fill
    topo = read_topology()
    tracer = Tracer(max_flows=max(flows * 5 // 4, 1024), idle_timeout=3600).start()
    try:
        fill(tracer, flows, len(topo.online))
        key = struct.pack("I", 0)
        timed = {"read": tracer.sample_arrays, "cpu_totals": lambda: tracer._cpus.lookup(key)}
        reg = CollectorRegistry(auto_describe=False)
        reg.register(SteerCollector(tracer, topo, release_memory=trim_heap))
        generate_latest(reg)
        timed["scrape"] = lambda: generate_latest(reg)
        out = {"cpus": len(topo.online), "possible_cpus": possible_cpus(), "flows": flows,
               "repeat": repeat,
               "per_cpu_values": len(tracer._cpus.lookup(key)), "kernel": os.uname().release,
               "when": time.strftime("%Y-%m-%d")}
        for name, fn in timed.items():
            times = []
            for _ in range(repeat):
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
            out[f"{name}_s"] = statistics.median(times)
    finally:
        tracer.stop()
    return out


def console_line(row: dict) -> str:
    """ROW as the line a guest writes on its console for tests/guest/vm/run.py to keep."""
    return f"\n{KERNEL_MARKER}{row['cpus']} {json.dumps(row, separators=(',', ':'))}\n"


def guest_rows() -> list[dict]:
    """The rows the guest tier left (build/vm/scale-kernel-CPUS.json), fewest CPUs first."""
    rows = []
    if os.path.isdir(GUEST_RESULTS):
        for name in sorted(os.listdir(GUEST_RESULTS)):
            if name.startswith("scale-kernel-") and name.endswith(".json"):
                with open(os.path.join(GUEST_RESULTS, name)) as f:
                    rows.append(dict(json.load(f), where="qemu guest (TCG)"))
    return sorted(rows, key=lambda r: r["cpus"])


def main(argv=None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--flows", type=int, default=1000, help="flows in each read")
    p.add_argument("--repeat", type=int, default=5, help="reads, scrapes and frames timed")
    args = p.parse_args(argv)
    if args.smoke:
        args.flows, args.repeat = 100, 2
    with tempfile.TemporaryDirectory() as tmp:
        results = []
        for ncpu, root in machines(tmp).items():
            print(f"  {ncpu} CPUs ...", flush=True)
            results.append(measure(ncpu, root, args.flows, args.repeat))
    rows = [f"| {r['cpus']} | {fmt(r['snapshot_s'] * 1e3, '.1f')} | "
            f"{fmt(r['scrape_s_cpu'] * 1e3, '.1f')} ({r['series_cpu']:,}) | "
            f"{fmt(r['scrape_s_socket'] * 1e3, '.1f')} ({r['series_socket']:,}) | "
            f"{fmt(r['frame_s'] * 1e3, '.1f')} |" for r in results]
    table = "\n".join([
        f"### Scale with CPUs ({args.flows:,} flows; user space on fixture machines "
        f"(tests/support/sysfs.py), synthetic reads; median of {args.repeat})", "",
        "| CPUs | one interval's snapshot ms | one scrape ms (series), per CPU | one scrape ms "
        "(series), `--cpu-labels socket` | one `steer top` frame at 120x40 ms |",
        "|---|---|---|---|---|", *rows])
    kernel = guest_rows()
    if os.geteuid() == 0:
        print("  the kernel's part, this machine ...", flush=True)
        kernel.insert(0, dict(kernel_row(args.flows, args.repeat), where="this machine"))
    if kernel:
        table += "\n".join([
            "", "", f"With the kernel's part, a real tracer with {args.flows:,} flows in its map "
            "(medians; this machine's of as many as above, a guest's of 9):", "",
            "| where | CPUs (possible) | one read ms | of which the per-CPU totals ms | "
            "one scrape ms | kernel, when |", "|---|---|---|---|---|---|",
            *(f"| {r['where']} | {r['cpus']} ({r['possible_cpus']}) | {fmt(r['read_s'] * 1e3, '.1f')} | "
              f"{fmt(r['cpu_totals_s'] * 1e3, '.2f')} | {fmt(r['scrape_s'] * 1e3, '.1f')} | "
              f"{r['kernel']}, {r['when']} |" for r in kernel), "",
            "A read copies the per-CPU totals' value of every possible CPU. The guests (the "
            "guest tier's) run under TCG, one host thread for all their vCPUs: compare them with "
            "each other, not with this machine."])
    write("scale_cpus", args.out, {"flows": args.flows, "repeat": args.repeat,
                                   "results": results, "kernel": kernel, "smoke": args.smoke}, table)
    return 0


if __name__ == "__main__":
    run(main)
