"""Move verdicts: how often steer auto undoes a move that changed nothing, and how often it undoes
one that hurt.

Null moves: the lab flow over IPv6 on the receiving namespace's loopback, and a policy that moves
it between CPU A and CPU B every PERIOD seconds by rules on the veth, which none of its packets
cross. Each move is judged as any other (its window of intervals before and after); nothing
changes but chance, so every revert is a false one (auto runs with --revert-hold 0 here, so that
one does not keep the flow from the next moves). Harmful moves: the IPv4 lab flow with RPS
putting its stack on the reader's CPU B, and a rule moving it beside the sender on CPU A (a
quarter to a third of its rate), one auto run each, as tests/live/test_verdicts_live.py does;
iperf3's own per-second rates give each harmful run's recovery: the median of its seconds after
the revert against the median of those before the move (issue 46 asks within 10%).

The false revert rate is given with its one-sided 95% upper bound (Clopper-Pearson); the target
is below 5% (issue 46).

    sudo .venv/bin/python -m bench.verdicts [--seconds 420] [--harmful 5]
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime

from .common import parser, require_root, run, write

# as tests/live/test_verdicts_live.py judges them: null moves on 1 s intervals, three a side (the
# shortest windows, where chance weighs most), harmful ones on 2 s intervals, four a side
NULL = {"interval": 1, "window": 3}
HARM = {"interval": 1.5, "window": 5}
PERIOD = 6.0     # seconds between the null policy's flips: most trials (1 + 3 intervals) fit in one
TARGET = 0.05    # false reverts
# 0 of 59 gives a 95% upper bound under 5%: at one move per PERIOD, 420 s hold ~65
DEFAULT_SECONDS = 420.0

NULL_POLICY = """
import time
from steer.steering.policies import Decision
A, B, PERIOD = {a}, {b}, {period}

def place(snapshot, topology):
    cpu = B if int(time.monotonic() // PERIOD) % 2 == 0 else A
    return [Decision(f.flow, cpu, "null move (bench.verdicts)")
            for f in snapshot.flows if f.flow.dport == {port}]
"""


def _steer(*args: str) -> list[str]:
    return [sys.executable, "-m", "steer", *args]


def upper_bound(k: int, n: int, confidence: float = 0.95) -> float:
    """The one-sided upper confidence bound on a rate seen K times in N (Clopper-Pearson, by
    bisection on the binomial tail)."""
    if n == 0:
        return 1.0
    if k >= n:
        return 1.0
    lo, hi = k / n, 1.0
    for _ in range(60):
        p = (lo + hi) / 2
        tail = sum(_binom(n, i, p) for i in range(k + 1))   # P(X <= k | p)
        lo, hi = (p, hi) if tail > 1 - confidence else (lo, p)
    return hi


def _binom(n: int, i: int, p: float) -> float:
    from math import comb
    return comb(n, i) * p ** i * (1 - p) ** (n - i)


def _auto(lab, policy: str, seconds: float, interval: int, window: int,
          retry: bool) -> tuple[list, list]:
    """steer auto on LAB's veth with POLICY for SECONDS, the traffic started once it traces; its
    JSON log's events, each with its wall-clock time ("at"), and iperf3's per-second rates
    [(start, end, bit/s)] on the same clock. RETRY: a reverted target may be offered again at
    once (--revert-hold 0), else not for the rest of the run (the default hold)."""
    hold = ["--revert-hold", "0"] if retry else []
    p = subprocess.Popen(_steer("auto", "--policy", policy, "--dev", "veth-rx", "--netns", lab.rx,
                                "--interval", str(interval), "--window", str(window),
                                "--confirm", "1", "--hold", "0", *hold,
                                "--duration", str(seconds), "--log-format", "json"),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = [p.stderr.readline()]
    # read the log as it comes: a pipe nobody reads fills (64 KiB, ~300 s of moves) and auto
    # then waits on its next log line, moving nothing more
    reader = threading.Thread(target=lambda: lines.extend(p.stderr), daemon=True)
    reader.start()
    started = time.time()
    lab.start_clients(seconds)
    results = lab.wait(timeout=seconds + 60)
    p.wait(timeout=60)
    reader.join(timeout=10)
    err = "".join(lines)
    if p.returncode != 0 or any(r.error for r in results):
        sys.exit(f"verdicts: steer auto exited {p.returncode}: {err[-2000:]} "
                 f"{[r.error for r in results]}")
    events = [json.loads(line) for line in err.splitlines()]
    for e in events:
        e["at"] = datetime.fromisoformat(e["time"].replace("Z", "+00:00")).timestamp()
    rates = [(started + i["sum"]["start"], started + i["sum"]["end"], i["sum"]["bits_per_second"])
             for r in results for i in r.raw["intervals"]]
    return events, rates


def median_rate(rates: list, start: float, end: float) -> float | None:
    """iperf3's median rate over its seconds wholly inside START..END; None for fewer than 2."""
    inside = [bps for s, e, bps in rates if s >= start - 0.05 and e <= end + 0.05]
    return statistics.median(inside) if len(inside) >= 2 else None


def mean_rate(rates: list, start: float, end: float) -> float | None:
    """iperf3's mean rate over START..END, each second it reports weighted by its overlap (a rate
    taken as even within its second); None where its seconds cover less than 90% of the span."""
    covered = sum(max(0.0, min(e, end) - max(s, start)) for s, e, _ in rates)
    if end <= start or covered < 0.9 * (end - start):
        return None
    return sum(bps * max(0.0, min(e, end) - max(s, start)) for s, e, bps in rates) / covered


def recovery(events: list[dict], rates: list) -> dict | None:
    """A harmful run's iperf3 rate before its move, while moved and after its undo (None: no
    undo, or too few whole seconds in a span)."""
    move = next((e for e in events if e.get("event") == "move"), None)
    undo = next((e for e in events if e.get("event") == "undo"), None)
    verdict = next((e for e in events if e.get("event") == "verdict"), None)
    if not (move and undo and verdict):
        return None
    span = HARM["window"] * HARM["interval"]
    before = median_rate(rates, move["at"] - span, move["at"])
    moved = median_rate(rates, move["at"] + HARM["interval"], verdict["at"])
    back = median_rate(rates, undo["at"] + 1, rates[-1][1])
    if not (before and moved and back):
        return None
    return {"before_bps": before, "moved_bps": moved, "after_revert_bps": back,
            "recovered": back / before}


def _verdicts(events: list[dict]) -> list[dict]:
    return [e for e in events if e.get("event") == "verdict"]


def _recovery_line(recoveries: list[dict], runs: int) -> str:
    if not recoveries:
        return f"iperf3's rate after a revert: no run of {runs} had a revert and whole seconds around it."
    ratios = sorted(r["recovered"] for r in recoveries)
    moved = statistics.median(r["moved_bps"] / r["before_bps"] for r in recoveries)
    within = sum(1 for x in ratios if x >= 0.9)
    return (f"iperf3's own rate (median of its whole seconds): while moved {moved:.2f} of the rate "
            f"before the move; after the revert {statistics.median(ratios):.2f} of it (median of "
            f"{len(ratios)} runs, {ratios[0]:.2f} to {ratios[-1]:.2f}), within 10% in {within} "
            f"of {len(ratios)}.")


def main() -> int:
    p = parser(__doc__.split("\n")[0], seconds=DEFAULT_SECONDS)
    p.add_argument("--harmful", type=int, default=5, help="harmful moves, one auto run each")
    args = p.parse_args()
    require_root()
    from steer.experiment.lab import Lab, LabFlow, usable_cpus
    cpus = usable_cpus()
    if len(cpus) < 2:
        sys.exit("verdicts: needs two usable CPUs")
    a, b = cpus[0], cpus[-1]
    seconds = 40.0 if args.smoke else args.seconds
    harmful_runs = 1 if args.smoke else args.harmful
    private = tempfile.mkdtemp(prefix=".steer-bench-", dir=os.path.expanduser("~"))
    null_policy = os.path.join(private, "null.py")
    with Lab([LabFlow(a, b, ipv6=True)], seconds=seconds) as lab:
        with open(null_policy, "w") as f:
            f.write(NULL_POLICY.format(a=a, b=b, period=PERIOD, port=lab.flows[0].port))
        lab.start_servers()
        null_events, _ = _auto(lab, null_policy, seconds, retry=True, **NULL)
        null = _verdicts(null_events)
    rules = os.path.join(private, "harm.toml")
    with open(rules, "w") as f:
        f.write(f'[[rule]]\nflow = "proto=tcp,dport=5201"\ncpu = {a}\n')
    harmful: list[dict] = []
    harmful_events: list[dict] = []
    recoveries: list[dict] = []
    # the move after WINDOW + 1 intervals, one to settle, WINDOW after, WINDOW to confirm, and
    # 8 s after: the undo's interval, a second to settle and whole seconds of iperf3's after it
    harm_seconds = round((3 * HARM["window"] + 2) * HARM["interval"] + 8)
    for _ in range(harmful_runs):
        with Lab([LabFlow(a, b)], seconds=harm_seconds) as lab:
            r = subprocess.run(_steer("rps", "--dev", "veth-rx", "--netns", lab.rx, "--cpu", str(b)),
                               capture_output=True, text=True)
            try:
                if r.returncode != 0:
                    sys.exit(f"verdicts: steer rps: {r.stderr.strip()}")
                lab.start_servers()
                # not offered again after its revert: the rate after it is the placement's own
                events, rates = _auto(lab, rules, harm_seconds, retry=False, **HARM)
                harmful += _verdicts(events)
                harmful_events += events
                if (r := recovery(events, rates)) is not None:
                    recoveries.append(r)
            finally:
                subprocess.run(_steer("reset"), capture_output=True)
    os.remove(null_policy)
    os.remove(rules)
    os.rmdir(private)

    def count(vs, outcome):
        return sum(1 for v in vs if v["verdict"] == outcome)
    false = count(null, "reverted")
    bound = upper_bound(false, len(null))
    caught = count(harmful, "reverted")
    changes = [v["goodput_bytes_per_second"]["change"] for v in null
               if v["goodput_bytes_per_second"]]

    def confirming(events):   # first windows that read a loss, to be confirmed or not
        return sum(1 for e in events if e.get("event") == "confirming")
    data = {"null_judged_on": NULL, "harmful_judged_on": HARM, "null_seconds": seconds,
            "null": {"moves": len(null), "kept": count(null, "kept"),
                     "inconclusive": count(null, "inconclusive"), "reverted": false,
                     "first_window_loss": confirming(null_events),
                     "false_revert_rate_upper_95": round(bound, 4),
                     "goodput_changes": changes},
            "harmful": {"moves": len(harmful), "reverted": caught,
                        "first_window_loss": confirming(harmful_events),
                        "changes": [v["goodput_bytes_per_second"]["change"] for v in harmful
                                    if v["goodput_bytes_per_second"]],
                        "iperf3": recoveries},
            "verdicts": null + harmful}
    spread = f"{min(changes):+.1%} to {max(changes):+.1%}" if changes else "-"
    table = "\n".join([
        "### Move verdicts: null moves and harmful ones",
        "",
        "steer auto, 5% tolerance, 95% confidence. Null moves: rules on the lab's veth for a "
        f"flow on the loopback, flipped every {PERIOD:g} s for {seconds:g} s, judged on "
        f"{NULL['interval']} s intervals, {NULL['window']} a side. Harmful: the stack moved from "
        f"the reader's CPU (RPS) beside the sender, judged on {HARM['interval']} s intervals, "
        f"{HARM['window']} a side.",
        "",
        "| moves | judged | kept | inconclusive (kept) | reverted | |",
        "|---|---|---|---|---|---|",
        f"| null | {len(null)} | {count(null, 'kept')} | {count(null, 'inconclusive')} | {false} "
        f"| false revert rate at most {bound:.1%} (95% upper bound); target < {TARGET:.0%}: "
        f"{'met' if bound < TARGET else 'not shown'} |",
        f"| harmful | {len(harmful)} | {count(harmful, 'kept')} | "
        f"{count(harmful, 'inconclusive')} | {caught} | |",
        "",
        f"The null moves' goodput changes spread {spread}; the first window after a null move "
        f"read a loss in {confirming(null_events)} of {len(null)}, after a harmful one in "
        f"{confirming(harmful_events)} of {len(harmful)} (a loss is reverted only when the "
        "second window confirms it).",
        "",
        _recovery_line(recoveries, harmful_runs),
    ])
    write("verdicts", args.out, data, table)
    return 0


if __name__ == "__main__":
    run(main)
