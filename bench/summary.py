"""One table of what tracing costs in each mode, from the latest bench/results/*.json.

    python -m bench.summary      # writes bench/results/summary.md (README.md includes it)

It measures nothing: each column is one benchmark's ratio with/without the tracer (median of
pairs and its 95% interval), and the lines under the table say when and where each was taken.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
# (file, column heading, what a ratio above 1 means)
COLUMNS = [("rr", "redis GET requests/s"), ("syscall_tax", "time of a getppid()"),
           ("roundtrip", "1-byte TCP round trip"), ("roundtrip_udp", "1-byte UDP round trip"),
           ("bulk", "iperf3 bulk Gbit/s")]
MODES = [("sampled", "sampled (default)"), ("sampled-tracepoint", "sampled, `--app-hook tracepoint`"),
         ("exact", "`--timing exact`")]


def _ratio(r: dict | None) -> str:
    if not r or r.get("median") is None:
        return "-"
    lo, hi = r.get("median_ci95", (None, None))
    return f"{r['median']:.3f}" + (f" ({lo:.3f}-{hi:.3f})" if lo is not None else "")


def _where(d: dict) -> str:
    h = d.get("host") or {}
    parts = [d["date"][:10]]
    if h:
        parts.append(f"kernel {h.get('kernel')}, {h.get('cpus')} CPUs"
                     + (f", a {h['vm']} VM" if h.get("vm") not in (None, "none") else "")
                     + (f" ({h['container']} container)" if h.get("container") not in (None, "none") else "")
                     + (f", commit {h['commit']}" if h.get("commit") else ""))
    else:
        parts.append("this project's 2-vCPU development VM (kernel 6.18)")
    return ", ".join(parts)


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
        lines.append(f"| {label} | " + " | ".join(_ratio(data[n]["ratio"].get(mode)) for n, _ in cols) + " |")
    lines.append("")
    lines.append("Ratios with/without the tracer: the median of pairs measured in turns in one run, with its "
                 "bootstrap 95% interval (a rate below 1 or a time above 1 is the cost). Measured:")
    for n, h in cols:
        d = data[n]
        lines.append(f"- {h}: `python -m bench.{d['benchmark'] if n != 'roundtrip_udp' else 'roundtrip --proto udp'}`, "
                     f"{d.get('pairs', '?')} pairs, {_where(d)}")
    return "\n".join(lines) + "\n"


def main() -> int:
    text = table()
    (RESULTS / "summary.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
