"""The suite's own record: each clean-clone run of `make test` as a row of
bench/results/suite.md, which docs/testing.md includes, so the time budget is shown as measured.

    git clone . /tmp/x && cd /tmp/x && CI=true bash .ci/run          # nothing else running
    python -m bench.suite add /tmp/x/build/test-results/run.json --wall 21:35 --note "..."
    python -m bench.suite                                              # rewrites suite.md

A row holds what the run's record (tests/support/record.py) says: commit, start, pytest's
seconds and each tier's, the tests that failed; the wall clock (setup included) is `time`'s.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
TIERS = ("artifacts", "guest", "live", "unit")
BUDGET = 25 * 60   # seconds: make test from a clean clone, setup included
SHOWN = 20         # the latest runs in the table; suite.json keeps every one


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = round(seconds)
    return f"{s // 60}:{s % 60:02d}"


def _wall(text: str) -> float:
    """'21:35' (minutes:seconds) -> seconds."""
    minutes, sep, seconds = text.partition(":")
    if not sep or not minutes.isdigit() or not seconds.isdigit() or int(seconds) > 59:
        raise argparse.ArgumentTypeError(f"{text!r}: give minutes:seconds, as time prints them")
    return int(minutes) * 60 + int(seconds)


def row(run: dict, wall: float | None, note: str) -> dict:
    """A run's record (run.json) as suite.json keeps it."""
    return {"started": run.get("started"), "commit": run.get("commit"),
            "kernel": run.get("kernel"), "cpus": run.get("cpus"), "wall": wall,
            "pytest": run.get("seconds"), "tiers": {t: run.get("tiers", {}).get(t) for t in TIERS},
            "failed": sorted(run.get("failures") or {}), "note": note,
            "figures": run.get("figures") or {}}


def _outcome(r: dict) -> str:
    n = len(r["failed"]) if isinstance(r["failed"], list) else r["failed"]
    return "passed" if not n else f"{n} failed"


def table(runs: list[dict]) -> str:
    shown = runs[-SHOWN:]
    lines = ["| started | commit | wall clock | pytest | " + " | ".join(TIERS) + " | outcome | note |",
             "|---|---|---|---|" + "---|" * len(TIERS) + "---|---|"]
    for r in shown:
        tiers = " | ".join(f"{r['tiers'][t]:,.0f} s" if r["tiers"].get(t) is not None else "-"
                           for t in TIERS)
        started = (r.get("started") or "-")[:16].replace("T", " ")
        lines.append(f"| {started} | {r['commit']} | {_clock(r.get('wall'))} | "
                     f"{_clock(r.get('pytest'))} | {tiers} | {_outcome(r)} | {r.get('note', '')} |")
    walls = [r["wall"] for r in shown if r.get("wall") is not None]
    streak = 0
    for r in reversed(runs):
        if _outcome(r) != "passed":
            break
        streak += 1
    passed = sum(_outcome(r) == "passed" for r in shown)
    lines += ["", f"The last {len(shown)} clean clones: {passed} passed every test; wall clock "
              f"{_clock(min(walls))} to {_clock(max(walls))} against a budget of {_clock(BUDGET)} "
              f"({sum(w > BUDGET for w in walls)} over it); the latest {streak} in a row passed."
              if walls else ""]
    return "\n".join(lines).rstrip() + "\n"


def figures(runs: list[dict]) -> str:
    """Each live test's figure against its bounds: its value in the latest run that has it, and
    the least and most it read over every kept run (the figures are relative errors against
    the test's truth, tests/support/record.py)."""
    seen: dict[tuple[str, str], list[float]] = {}
    latest: dict[tuple[str, str], tuple[float, float, float]] = {}
    for r in runs:
        for test, figs in (r.get("figures") or {}).items():
            for name, (value, low, high) in figs.items():
                key = (test.split("::", 1)[1] if "::" in test else test, name)
                seen.setdefault(key, []).append(value)
                latest[key] = (value, low, high)
    with_figures = sum(bool(r.get("figures")) for r in runs)
    lines = [f"| test | figure | bounds | latest | least..most over {with_figures} runs |",
             "|---|---|---|---|---|"]
    for (test, name), (value, low, high) in sorted(latest.items()):
        values = seen[(test, name)]
        lines.append(f"| `{test}` | {name} | {low:+.1%}..{high:+.1%} | {value:+.2%} | "
                     f"{min(values):+.2%}..{max(values):+.2%} |")
    return "\n".join(lines) + "\n"


def load(results: Path = RESULTS) -> list[dict]:
    f = results / "suite.json"
    return json.loads(f.read_text()) if f.exists() else []


def write(runs: list[dict], results: Path = RESULTS) -> None:
    # a run a line: a new run is a line of the diff
    (results / "suite.json").write_text("[\n" + ",\n".join(json.dumps(r) for r in runs) + "\n]\n")
    (results / "suite.md").write_text(table(runs))
    (results / "suite_figures.md").write_text(figures(runs))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="The clean-clone runs of make test, as a table "
                                "(bench/results/suite.md).")
    sub = p.add_subparsers(dest="cmd")
    add = sub.add_parser("add", help="add a run's record (build/test-results/run.json)")
    add.add_argument("run", type=Path, help="the run's build/test-results/run.json")
    add.add_argument("--wall", type=_wall, metavar="M:SS", help="the wall clock, setup included")
    add.add_argument("--note", default="", help="what changed, or why it failed")
    args = p.parse_args(argv)
    runs = load()
    if args.cmd == "add":
        try:
            run = json.loads(args.run.read_text())
        except (OSError, ValueError) as e:
            print(f"bench.suite: {args.run}: {e}", file=sys.stderr)
            return 1
        runs.append(row(run, args.wall, args.note))
    write(runs)
    print(f"bench/results/suite.md: {len(runs)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
