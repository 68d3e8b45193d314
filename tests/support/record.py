"""The suite's record of itself: each test's outcome and time, the time of each tier, and a history
kept across runs, so that a failure can be set beside the earlier runs of the same test.

- build/test-results/run.json: this run (commit, kernel, CPUs, and per test its outcome and
  seconds), written when the session ends, whatever its result;
- a history of runs, one JSON line each (STEER_TEST_HISTORY, default
  /var/tmp/steer-test-history.jsonl: outside the checkout, because CI runs each submission in a
  fresh clone on the same machine; empty STEER_TEST_HISTORY keeps none);
- at the end of the terminal report: the seconds of each tier, and for a test that failed, how
  it fared in the runs of the history (how often it failed, its usual time).

A plugin of the suite's own (tests/conftest.py registers it); it reads nothing but pytest's
reports."""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_FILE = os.path.join(ROOT, "build", "test-results", "run.json")
DEFAULT_HISTORY = "/var/tmp/steer-test-history.jsonl"
# the runs of the history a failure is compared with: a few days of sessions and CI runs
HISTORY_RUNS = 50


def history_path() -> str | None:
    path = os.environ.get("STEER_TEST_HISTORY", DEFAULT_HISTORY)
    return path or None


def tier_of(nodeid: str) -> str:
    """tests/live/test_x.py::test_y -> live (the folder under tests/)."""
    parts = nodeid.split("::")[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]


def _commit() -> str | None:
    """HEAD's short hash; None outside a git checkout (a source tarball) or without git."""
    try:
        r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                           text=True, cwd=ROOT)
    except OSError:
        return None
    return r.stdout.strip() or None


def read_history(path: str | None, limit: int = HISTORY_RUNS) -> list[dict]:
    """The last LIMIT runs of the history file, oldest first; a torn or foreign line is passed
    over (two suites may end at once)."""
    if not path or not os.path.exists(path):
        return []
    runs = []
    with open(path, errors="replace") as f:
        for line in f:
            try:
                run = json.loads(line)
            except ValueError:
                continue
            if isinstance(run, dict) and isinstance(run.get("tests"), dict):
                runs.append(run)
    return runs[-limit:]


def past_of(nodeid: str, runs: list[dict]) -> str:
    """One line on how NODEID fared in RUNS."""
    seen = [r["tests"][nodeid] for r in runs if nodeid in r["tests"]]
    if not seen:
        return "not in the history"
    failed = sum(1 for o, _ in seen if o in ("failed", "error"))
    secs = [s for o, s in seen if o == "passed"]
    usual = f", {statistics.median(secs):.1f} s when it passed" if secs else ""
    return f"failed in {failed} of the {len(seen)} earlier runs that ran it{usual}"


class Recorder:
    def __init__(self):
        self.started = time.time()
        self.seconds: dict[str, float] = defaultdict(float)
        self.outcome: dict[str, str] = {}

    def pytest_runtest_logreport(self, report):
        self.seconds[report.nodeid] += report.duration
        # the worst phase decides: a teardown error after a pass is an error
        if report.failed:
            self.outcome[report.nodeid] = "failed" if report.when == "call" else "error"
        elif report.skipped:
            self.outcome.setdefault(report.nodeid, "skipped")
        elif report.when == "call":
            self.outcome.setdefault(report.nodeid, "passed")

    def by_tier(self) -> dict[str, float]:
        tiers: dict[str, float] = defaultdict(float)
        for nodeid, s in self.seconds.items():
            tiers[tier_of(nodeid)] += s
        return dict(tiers)

    def pytest_terminal_summary(self, terminalreporter, exitstatus, config):
        if not self.outcome:
            return
        tr = terminalreporter
        took = time.time() - self.started
        tiers = ", ".join(f"{t} {s:.0f} s" for t, s in sorted(self.by_tier().items()))
        tr.write_sep("=", "time by tier")
        tr.write_line(f"{tiers}; the session {took:.0f} s")
        failed = sorted(n for n, o in self.outcome.items() if o in ("failed", "error"))
        runs = read_history(history_path())
        if failed and runs:
            tr.write_sep("=", f"the failures in the last {len(runs)} runs ({history_path()})")
            for nodeid in failed:
                tr.write_line(f"{nodeid}: {past_of(nodeid, runs)}")
        self.write(took, tr)

    def write(self, took: float, tr) -> None:
        run = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
               "seconds": round(took, 1), "commit": _commit(), "kernel": platform.release(),
               "cpus": os.cpu_count(), "ci": os.environ.get("CI") == "true",
               "tiers": {t: round(s, 1) for t, s in self.by_tier().items()},
               "tests": {n: [self.outcome.get(n, "error"), round(s, 2)]
                         for n, s in sorted(self.seconds.items())}}
        os.makedirs(os.path.dirname(RUN_FILE), exist_ok=True)
        with open(RUN_FILE, "w") as f:
            json.dump(run, f, indent=1)
        path = history_path()
        where = RUN_FILE
        if path:
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "a") as f:
                    f.write(json.dumps(run, separators=(",", ":")) + "\n")
                where += f", and a line of {path}"
            except OSError as e:
                where += f" (not added to {path}: {e.strerror})"
        tr.write_line(f"this run's record: {where}")
