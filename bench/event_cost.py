"""Per-event cost of each tracing program under lab load: run_time_ns / run_cnt as the kernel
counts them with kernel.bpf_stats_enabled=1 (which adds its own ~2 clock reads per run, so the
figures are upper bounds). Target: median <= 60 ns per event.

    sudo .venv/bin/python -m bench.event_cost [--seconds 10]
"""
from __future__ import annotations

import os
import statistics
import time

from steer.kernel.links import prog_run_stats
from steer.kernel.objects import BpfObject, bpf_dir
from steer.experiment.lab import Lab

from .common import TRACER_MODES, fmt, start_tracer, lab_flow, parser, require_root, run, write
from .peer import steal_seconds

STATS = "/proc/sys/kernel/bpf_stats_enabled"


# steer's programs that run per packet or per poll -> the empty program on the same tracepoint
# (floor.bpf.c): what each costs beyond it is its own work
FLOORS = {"ft_skb_hint": "floor_skb", "ft_netif_receive_skb": "floor_skb",
          "ft_napi_poll": "floor_napi"}
# in the default's windows ft_skb_hint counts a TCP skb to its flow (a header parse and a flow
# map update): its reference is floor_skb_flow, that work frozen (floor.bpf.c), attached in
# that mode alone, ahead of it
WINDOWED = "sampled-windows"
WINDOWED_FLOORS = {**FLOORS, "ft_skb_hint": "floor_skb_flow"}
# with --windows off ft_skb_hint stores the hint and skips a TCP skb its socket counts, and
# ft_napi_poll counts a backlog poll: their references are that work frozen, floor_skb_hint
# (attached in that mode alone, ahead of it) and floor_napi_count
WINDOWS_OFF = "sampled"
WINDOWS_OFF_FLOORS = {**FLOORS, "ft_skb_hint": "floor_skb_hint",
                      "ft_napi_poll": "floor_napi_count"}
# each reference program -> the one mode it is attached in
REFERENCES = {"floor_skb_flow": WINDOWED, "floor_skb_hint": WINDOWS_OFF}


def floors_of(mode: str) -> dict[str, str]:
    return {WINDOWED: WINDOWED_FLOORS, WINDOWS_OFF: WINDOWS_OFF_FLOORS}.get(mode, FLOORS)


def measure(mode: str, seconds: float, windows: int = 1):
    """Program -> {runs, ns, ns_per_event} in each of WINDOWS equal windows of SECONDS of one lab
    flow, steer's tracer of MODE and the floor programs attached side by side; the flow's result;
    steer's programs' (instructions, bytes of machine code); and per window the share of the
    CPUs' time the host took (steal): the kernel times a program by a clock that runs on while
    the host has its CPU, so that a preemption inside one run counts as that program's time."""
    with open(STATS) as f:
        old = f.read().strip()
    try:
        with open(STATS, "w") as f:
            f.write("1")
        # the floor first: programs on one hook run in the order they were attached, and the
        # first to read what the kernel left cold since the last event (the napi struct's
        # device, between two polls of a flow streaming through the caches) pays that miss,
        # 20-25 ns on some VMs, which whoever came second does not. floor_napi_count reads it,
        # so steer's programs are timed for their own work (ft_napi_poll +15-19 ns beyond the
        # empty program where, attached before the floor, it read +36-50)
        floor = BpfObject(str(bpf_dir() / "floor.bpf.o"), no_pin=True)
        for name in floor.programs():
            if REFERENCES.get(name, mode) == mode:
                floor.attach(name)
        floor_progs = {n: floor.prog_fd(n) for n in floor.programs()}
        tracer = None
        try:
            tracer = start_tracer(mode)
            sizes = tracer.program_sizes()

            def stats():
                out = tracer.program_stats()
                out.update({n: prog_run_stats(fd) for n, fd in floor_progs.items()})
                return out, steal_seconds(), time.monotonic()

            with Lab([lab_flow()], seconds=seconds) as lab:
                lab.start_servers()
                reads = [stats()]
                lab.start_clients()
                for _ in range(windows - 1):
                    time.sleep(seconds / windows)
                    reads.append(stats())
                (res,) = lab.wait(timeout=seconds + 30)
                reads.append(stats())
        finally:
            if tracer:
                tracer.stop()
            floor.close()
    finally:
        with open(STATS, "w") as f:
            f.write(old)
    parts, steal = [], []
    for (before, s0, t0), (after, s1, t1) in zip(reads, reads[1:]):
        steal.append((s1 - s0) / ((t1 - t0) * os.cpu_count()) if t1 > t0 else 0.0)
        per_event = {}
        for prog in sorted(after):
            ns = after[prog][0] - before[prog][0]
            cnt = after[prog][1] - before[prog][1]
            per_event[prog] = {"runs": cnt, "ns": ns, "ns_per_event": ns / cnt if cnt else None}
        parts.append(per_event)
    return parts, res, sizes, steal


def beyond_floor(per_event: dict[str, dict], floors: dict[str, str] = FLOORS) -> dict[str, float]:
    """Per program of FLOORS that ran: its ns per event less its floor's, from the same run."""
    return {p: per_event[p]["ns_per_event"] - per_event[f]["ns_per_event"]
            for p, f in floors.items()
            if per_event.get(p, {}).get("ns_per_event") is not None
            and per_event.get(f, {}).get("ns_per_event") is not None}


def main(argv=None) -> int:
    p = parser(__doc__.splitlines()[0], seconds=10.0)
    p.add_argument("--mode", choices=list(TRACER_MODES), default="sampled",
                   help="the tracer's configuration: bench.common.TRACER_MODES")
    args = p.parse_args(argv)
    require_root()
    if args.smoke:
        args.seconds = 1.0
    (per_event,), res, _, (steal,) = measure(args.mode, args.seconds)
    rows, beyond = [], beyond_floor(per_event, floors_of(args.mode))
    for prog, v in per_event.items():
        cnt, ns = v["runs"], v["ns"]
        rows.append(f"| {prog} | {cnt:,} | {fmt(ns / cnt if cnt else None, '.1f')} | "
                    f"{fmt(beyond.get(prog), '+.1f') if prog in beyond else ''} |")
    # the programs that run per packet, per read or per syscall: the sampler runs per sample (its
    # rate is --sample-hz, not the traffic's) and is read from its own row
    busy = [v["ns_per_event"] for p, v in per_event.items()
            if v["runs"] > 1000 and not p.startswith("floor_") and p != "ft_sample"]
    med = statistics.median(busy) if busy else None
    total_ns = sum(v["ns"] for p, v in per_event.items() if not p.startswith("floor_"))
    fl = {p: v["ns_per_event"] for p, v in per_event.items() if p.startswith("floor_")}
    gb = (res.received_bytes or 0) / 1e9
    table = "\n".join([
        f"### Per-event cost, {args.mode} tracer ({args.seconds:g} s of lab traffic, "
        f"{gb:.1f} GB received)", "",
        "| program | events | ns per event | beyond its floor: an empty program on its tracepoint"
        + (" (ft_skb_hint: floor_skb_flow, its windowed work frozen)" if args.mode == WINDOWED
           else " (ft_skb_hint: floor_skb_hint, its work frozen)" if args.mode == WINDOWS_OFF
           else "") + " |",
        "|---|---|---|---|", *rows, "",
        f"Median over steer's per-packet, per-read and per-syscall programs with more than 1,000 "
        f"events: {fmt(med, '.1f')} ns (target <= 60). "
        f"The floor on this host, measured alongside: an empty program costs "
        f"{fmt(fl.get('floor_empty'), '.1f')} ns per event, one with a single clock read "
        f"{fmt(fl.get('floor_clock'), '.1f')} ns (bpf_stats itself reads the clock twice per run). "
        f"All programs together: {total_ns / 1e9:.3f} CPU-seconds, "
        f"{fmt(total_ns / 1e9 / gb if gb else None, '.4f')} CPU-seconds per GB received. "
        f"The host took {steal:.1%} of the CPUs' time meanwhile (steal; inside a program's "
        "run it counts as that program's time)."])
    name = "event_cost" if args.mode == "sampled" else f"event_cost_{args.mode}"
    write(name, args.out, {"mode": args.mode, "seconds": args.seconds, "programs": per_event,
                           "floor": fl, "beyond_floor": beyond, "median_ns_per_event": med,
                           "received_bytes": res.received_bytes, "steal_share": round(steal, 4),
                           "smoke": args.smoke}, table)
    return 0


if __name__ == "__main__":
    run(main)
