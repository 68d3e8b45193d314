"""Shared by the benchmarks: A/B alternation, statistics, and the JSON + markdown output."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")


def parser(description: str, pairs: int | None = None,
           seconds: float | None = None) -> argparse.ArgumentParser:
    """The options every benchmark has, plus --pairs and --seconds where given a default."""
    p = argparse.ArgumentParser(description=description,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--smoke", action="store_true",
                   help="a quick run that checks the benchmark works (CI), not a measurement")
    p.add_argument("--out", default=RESULTS, help="directory for NAME.json and NAME.md")
    if pairs is not None:
        p.add_argument("--pairs", type=int, default=pairs, help="A/B pairs measured")
    if seconds is not None:
        p.add_argument("--seconds", type=float, default=seconds, help="traffic per run")
    return p


def lab_reader_cpu() -> int:
    """The lab flow's reader CPU: another core than the sender's (CPU 0) where there is one,
    the common placement on real receivers."""
    return 1 if len(os.sched_getaffinity(0)) > 1 else 0


def require_root() -> None:
    if os.geteuid() != 0:
        sys.exit("benchmarks load BPF programs and make namespaces: run as root")


# the tracer configurations the cost benchmarks compare with no tracer at all: the default that
# `steer export` and `steer auto` run, and the exact mode `steer flows/top --timing exact` offers
TRACER_MODES = {"sampled": {"timing": "sampled"}, "exact": {"timing": "exact"}}


SETTLE_SECONDS = 1.0   # after attaching: the tracer's start-up (kallsyms, load) is not its cost


class traced:
    """with traced(mode): the tracer of MODE (a TRACER_MODES key, or None for none) attached and
    read once a second by a thread, as the exporter and steer auto read it."""

    def __init__(self, mode: str | None):
        self.mode = mode

    def __enter__(self):
        import threading
        from steer.tracer import Tracer
        self.tracer = Tracer(**TRACER_MODES[self.mode]).start() if self.mode else None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        time.sleep(SETTLE_SECONDS)
        return self

    def _read(self):
        while self.tracer and not self._stop.wait(1.0):
            self.tracer.sample()

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        if self.tracer:
            self.tracer.stop()


def alternate(a, b, pairs: int) -> list[tuple[float, float]]:
    """PAIRS measurements of A and B, in ABBA order so that a slow drift of the machine (thermal,
    caches, other load) does not favour either side."""
    out = []
    for i in range(pairs):
        if i % 2 == 0:
            va = a()
            vb = b()
        else:
            vb = b()
            va = a()
        out.append((va, vb))
        print(f"  pair {i + 1}/{pairs}: A {va:.4g}  B {vb:.4g}  B/A {vb / va if va else float('nan'):.3f}",
              flush=True)
    return out


def compare_modes(run, pairs: int, what: str) -> tuple[dict, dict]:
    """RUN(mode) for every tracer mode against RUN(None), PAIRS ABBA pairs each: the ratio
    statistics and the raw pairs, by mode."""
    results, runs = {}, {}
    for mode in TRACER_MODES:
        print(f"{what}, {mode}: {pairs} pairs, A = no tracer, B = {mode}")
        runs[mode] = alternate(lambda: run(None), lambda: run(mode), pairs)
        results[mode] = ratio_stats(runs[mode])
    return results, runs


def stats(values: list[float]) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"n": 0}
    return {"n": len(values), "median": statistics.median(values), "min": min(values),
            "max": max(values),
            "stdev": statistics.stdev(values) if len(values) > 1 else 0.0}


def ratio_stats(pairs: list[tuple[float, float]]) -> dict:
    """B/A per pair, then median and spread: the ratio is the result, not the raw values."""
    return stats([b / a for a, b in pairs if a])


def write(name: str, out_dir: str, data: dict, table: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    data = {"benchmark": name, "date": time.strftime("%Y-%m-%d %H:%M:%S"), **data}
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(data, f, indent=1)
    with open(os.path.join(out_dir, f"{name}.md"), "w") as f:
        f.write(table.rstrip() + "\n")
    print(table)


def fmt(v, spec=".3f") -> str:
    return "-" if v is None else format(v, spec)
