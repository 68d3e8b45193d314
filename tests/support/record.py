"""The suite's record of itself: each test's outcome and time, the time of each tier, and a history
kept across runs, so that a failure can be set beside the earlier runs of the same test.

- build/test-results/run.json: this run (commit, kernel, CPUs, per test its outcome and
  seconds, and each failure's message), written when the session ends, whatever its result;
- a history of runs, one JSON line each (STEER_TEST_HISTORY, default
  /var/tmp/steer-test-history.jsonl: outside the checkout, because CI runs each submission in a
  fresh clone on the same machine; empty STEER_TEST_HISTORY keeps none);
- at the end of the terminal report: the seconds of each tier, and for a test that failed, how
  it fared in the runs of the history (how often it failed, its usual time);
- the figures live tests hold to statistical bounds (the `held` fixture, tests/conftest.py):
  each one's value and bounds, so that the history shows how far each bound is from what the
  figure does run after run. `python tests/support/record.py` reads them back: per figure, its
  spread over the runs and the chance that spread gives of crossing its bound (`odds_of`),
  against the odds the bound was made for;
- the host's idle time while each test ran (setup to teardown, summed over CPUs): a test that
  leaves the CPUs idle waits on a clock (a sleep, a fixed duration, a timeout), which is where
  the suite's wall time is cheapest to win back;
- the steal: how long the hypervisor ran something else in this VM's CPUs' place over the run
  and during each test that saw some, summed over CPUs, beside a failure too: times held to the
  scheduler's account are the ones it upsets.

A plugin of the suite's own (tests/conftest.py registers it); it reads nothing but pytest's
reports (and /proc/stat's steal)."""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from statistics import NormalDist

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_FILE = os.path.join(ROOT, "build", "test-results", "run.json")
DEFAULT_HISTORY = "/var/tmp/steer-test-history.jsonl"
# the runs of the history a failure is compared with: a few days of sessions and CI runs
HISTORY_RUNS = 50
MESSAGE_CHARS = 1000   # of a failure's message kept in the record


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


HELD = "held"   # the user property a held figure is recorded under


def held_figures(runs: list[dict]) -> dict[tuple[str, str], list[tuple[float, float, float]]]:
    """(test, figure) -> its (value, low, high) in each run of RUNS that held it, oldest first."""
    out: dict[tuple[str, str], list[tuple[float, float, float]]] = defaultdict(list)
    for run in runs:
        for nodeid, figs in (run.get("figures") or {}).items():
            for name, v in figs.items():
                out[(nodeid, name)].append(tuple(v))
    return dict(out)


def _sd_upper(sd: float, n: int, confidence: float = 0.95) -> float:
    """An upper confidence bound on a normal spread estimated from N values (chi-square by
    Wilson and Hilferty's approximation): a few runs' spread is itself uncertain."""
    k = n - 1
    z = NormalDist().inv_cdf(1 - confidence)
    chi2 = k * (1 - 2 / (9 * k) + z * (2 / (9 * k)) ** 0.5) ** 3
    return sd * (k / chi2) ** 0.5


def odds_of(values: list[float], low: float, high: float) -> dict:
    """What VALUES (one figure over several runs) say about the chance it falls outside
    (LOW, HIGH) in a run: a normal fit, with the spread at its 95% upper confidence bound. The
    figures are bounded by a model (bench.odds) or a measured range; this is the check of
    either by repetition."""
    n = len(values)
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if n > 1 else 0.0
    outside = sum(1 for v in values if not low < v < high)
    if n < 3 or sd == 0:
        return {"n": n, "mean": mean, "sd": sd, "outside": outside, "chance": None}
    up = _sd_upper(sd, n)
    d = NormalDist(mean, up)
    return {"n": n, "mean": mean, "sd": sd, "outside": outside,
            "chance": d.cdf(low) + (1 - d.cdf(high)),
            "margin": min(mean - low, high - mean) / up}


def odds_report(runs: list[dict], match: str = "") -> list[str]:
    """One line per held figure whose test id or name contains MATCH."""
    lines = []
    for (nodeid, name), seen in sorted(held_figures(runs).items()):
        if match not in nodeid + " " + name:
            continue
        values = [v for v, _, _ in seen]
        low, high = seen[-1][1], seen[-1][2]
        o = odds_of(values, low, high)
        chance = "too few runs" if o["chance"] is None else \
            f"{o['margin']:.1f} sd to the nearer bound, chance {o['chance']:.1e}"
        lines.append(f"{nodeid} {name}: {o['n']} runs, mean {o['mean']:+.4f} sd {o['sd']:.4f}, "
                     f"range {min(values):+.4f}..{max(values):+.4f}, bounds {low:+.4f}..{high:+.4f} "
                     f"(last run), {o['outside']} outside; {chance}")
    return lines


def idle_seconds() -> float:
    """/proc/stat's idle and iowait of all CPUs, in seconds since boot."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return (int(fields[4]) + int(fields[5])) / os.sysconf("SC_CLK_TCK")


def steal_seconds() -> float:
    """The time the hypervisor ran something else on this machine's CPUs, summed over them
    (bench.peer's reading of /proc/stat): a test of times taken while the host took a CPU away
    is read against truths that count it differently (the scheduler's leave it out)."""
    from bench.peer import steal_seconds as stolen   # the suite runs from the checkout's root
    return stolen()


class Recorder:
    def __init__(self):
        self.started = time.time()
        self.seconds: dict[str, float] = defaultdict(float)
        self.outcome: dict[str, str] = {}
        self.figures: dict[str, dict[str, list[float]]] = defaultdict(dict)
        self.why: dict[str, str] = {}   # a failure's message, to compare with the next one
        self.steal: dict[str, float] = {}   # the steal while a test's call ran, where there was
        self._steal_at = 0.0
        self._steal_start = steal_seconds()
        self.idle: dict[str, float] = {}   # CPU-seconds idle from a test's setup to its teardown
        self._idle_at = 0.0

    def pytest_runtest_logstart(self, nodeid, location):
        self._idle_at = idle_seconds()

    def pytest_runtest_logfinish(self, nodeid, location):
        self.idle[nodeid] = round(idle_seconds() - self._idle_at, 2)

    def pytest_runtest_logreport(self, report):
        self.seconds[report.nodeid] += report.duration
        if report.when == "setup":
            self._steal_at = steal_seconds()
        elif report.when == "call":
            stolen = steal_seconds() - self._steal_at
            if stolen > 0:
                self.steal[report.nodeid] = round(stolen, 2)
        for key, v in report.user_properties:
            if key == HELD and report.when == "call":
                self.figures[report.nodeid][v["name"]] = [v["value"], v["low"], v["high"]]
        # the worst phase decides: a teardown error after a pass is an error
        if report.failed:
            self.outcome[report.nodeid] = "failed" if report.when == "call" else "error"
            crash = getattr(report.longrepr, "reprcrash", None)
            self.why.setdefault(report.nodeid, (crash.message if crash else
                                                str(report.longrepr))[:MESSAGE_CHARS])
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
                stolen = f" (the host took {self.steal[nodeid]:.2f} CPU-s while it ran)" \
                    if nodeid in self.steal else ""
                tr.write_line(f"{nodeid}: {past_of(nodeid, runs)}{stolen}")
        self.write(took, tr)

    def write(self, took: float, tr) -> None:
        run = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
               "seconds": round(took, 1), "commit": _commit(), "kernel": platform.release(),
               "cpus": os.cpu_count(), "ci": os.environ.get("CI") == "true",
               "tiers": {t: round(s, 1) for t, s in self.by_tier().items()},
               "tests": {n: [self.outcome.get(n, "error"), round(s, 2)]
                         for n, s in sorted(self.seconds.items())},
               "figures": dict(self.figures), "failures": self.why, "idle": self.idle,
               "steal": {"run": round(steal_seconds() - self._steal_start, 2), **self.steal}}
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="The figures live tests hold to statistical bounds, over the runs of the "
                    "suite's history: each one's spread and the chance it gives of failing.")
    p.add_argument("match", nargs="?", default="", help="only test ids or figures containing this")
    p.add_argument("--history", default=history_path() or DEFAULT_HISTORY,
                   help="the history file (default: %(default)s)")
    p.add_argument("--runs", type=int, default=1000, help="the last RUNS runs (default: %(default)s)")
    a = p.parse_args(argv)
    runs = read_history(a.history, a.runs)
    lines = odds_report(runs, a.match)
    if not lines:
        print(f"no held figures in the last {len(runs)} runs of {a.history}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
