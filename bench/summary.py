"""One table of what tracing costs in each mode, from the latest bench/results/*.json.

    python -m bench.summary      # writes bench/results/summary.md (README.md includes it)

It measures nothing: each column is one benchmark's ratio with/without the tracer (median of
pairs and its 95% interval), and the lines under the table say when and where each was taken.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.common import TRACER_DEFAULT_MODES, where

RESULTS = Path(__file__).resolve().parent / "results"
# (file, column heading, what a ratio above 1 means)
COLUMNS = [("rr", "redis GET requests/s"), ("syscall_tax", "time of a getppid()"),
           ("roundtrip", "1-byte TCP round trip"), ("roundtrip_udp", "1-byte UDP round trip"),
           ("bulk", "iperf3 bulk Gbit/s")]
# what the default mode is to cost at most (docs/performance.md): a rate at least, a time at most
TARGETS = {"rr": (">=", 0.99), "syscall_tax": ("<=", 1.01), "roundtrip": ("<=", 1.02),
           "roundtrip_udp": ("<=", 1.03), "bulk": (">=", 0.99)}
MODES = [("sampled-windows", "sampled, `--windows 50/500` (default)"),
         ("sampled", "sampled, `--windows off`"),
         ("sampled-tracepoint", "sampled, `--windows off --app-hook tracepoint`"),
         ("exact", "`--timing exact`")]
JUDGED = "sampled-windows"   # the default mode, which the targets are for


def target_line(name: str) -> str:
    """The line under benchmark NAME's own table that states the default's target."""
    op, bound = TARGETS[name]
    return f"Target for the default mode ({JUDGED}): {op} {bound}."


def _ratio(r: dict | None) -> str:
    if not r or r.get("median") is None:
        return "-"
    lo, hi = r.get("median_ci95") or (None, None)
    return f"{r['median']:.3f}" + (f" ({lo:.3f}-{hi:.3f})" if lo is not None else "")


def verdict(r: dict | None, target: tuple[str, float]) -> str:
    """Met (the whole interval on the target's side), not shown (the median is, its interval
    reaches across) or missed (the median is not), for the ratio R."""
    if not r or r.get("median") is None:
        return "-"
    op, bound = target
    ok = (lambda v: v >= bound) if op == ">=" else (lambda v: v <= bound)
    lo, hi = r.get("median_ci95") or (None, None)
    if not ok(r["median"]):
        return "missed"
    worst = lo if op == ">=" else hi
    return "met" if worst is None or ok(worst) else "not shown"


def _where(d: dict) -> str:
    return where(d["date"], d.get("host"))


def _command(n: str, d: dict) -> str:
    """The command line that made D: the options its JSON records, and --modes where they were
    not the default ones."""
    cmd = f"python -m bench.{d['benchmark'] if n != 'roundtrip_udp' else 'roundtrip --proto udp'}"
    for key in ("trips", "calls", "seconds"):
        if key in d:
            cmd += f" --{key} {d[key]:g}" if isinstance(d[key], float) else f" --{key} {d[key]}"
    modes = list(d.get("ratio", {}))
    if modes != list(TRACER_DEFAULT_MODES):
        cmd += f" --modes {','.join(modes)}"
    return cmd


def table(results: Path = RESULTS) -> str:
    data = {}
    for name, _ in COLUMNS:
        f = results / f"{name}.json"
        if f.exists():
            data[name] = json.loads(f.read_text())
    cols = [(n, h) for n, h in COLUMNS if n in data]
    lines = ["| tracer mode | " + " | ".join(h for _, h in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for mode, label in MODES:
        if not any(mode in data[n]["ratio"] for n, _ in cols):
            continue   # not measured in these runs
        lines.append(f"| {label} | " + " | ".join(_ratio(data[n]["ratio"].get(mode)) for n, _ in cols) + " |")
    lines.append("| target for the default | " + " | ".join(
        " ".join(map(str, TARGETS[n])) for n, _ in cols) + " |")
    lines.append("| the default against it | " + " | ".join(
        f"**{verdict(data[n]['ratio'].get(JUDGED), TARGETS[n])}**" for n, _ in cols) + " |")
    lines.append("")
    lines.append("Ratios with/without the tracer: the median of pairs measured in turns in one run, with its "
                 "bootstrap 95% interval (a rate below 1 or a time above 1 is the cost). A target is "
                 "met when the whole interval is on its side, not shown when the median is and the "
                 "interval reaches across, missed when the median is not. Measured:")
    for n, h in cols:
        d = data[n]
        lines.append(f"- {h}: `{_command(n, d)}`, {d.get('pairs', '?')} pairs, {_where(d)}")
    return "\n".join(lines) + "\n"


def main() -> int:
    text = table()
    (RESULTS / "summary.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
