"""The odds that the live verdict tests fail by chance, by a model of the lab flow's seconds run
through steer's own judge and confirm.

The model (tests/live/test_verdicts_live.py, bench/results/verdicts.md): each interval's rate is
the flow's rate times 1 + a normal error of SD, and in a share DIP of the intervals the host
slows it by a uniform 15% to 40% more. A harmful move multiplies the rate after it by HARM. The
harmful test fails when the move is kept (it undoes reverted and inconclusive moves alike); the
null test fails when the move is reverted (an inconclusive one is kept).

    .venv/bin/python tests/support/verdict_odds.py [--runs 200000]
"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from steer.model.samples import FlowId                                # noqa: E402
from steer.steering.verdict import (KEPT, REVERTED, Figures, confirm,  # noqa: E402
                                    judge)

FLOW = FlowId("tcp", "198.18.0.1", 40000, "198.18.0.2", 5201)
NOISE = [(0.04, 0.08), (0.06, 0.12), (0.08, 0.20)]   # (SD, DIP): the lab's, and worse


def _window(rng: random.Random, n: int, sd: float, dip: float, harm: float = 1.0):
    out = []
    for _ in range(n):
        rate = 1e9 * harm * (1 + rng.gauss(0, sd))
        if rng.random() < dip:
            rate *= rng.uniform(0.60, 0.85)
        out.append({FLOW: Figures(int(max(rate, 1.0)), 0.1, 1.0)})
    return out


def outcome(rng: random.Random, window: int, sd: float, dip: float, harm: float) -> str:
    """One move's verdict, as steer auto reaches it: a first window's loss is measured again."""
    before = _window(rng, window, sd, dip)
    v = judge(FLOW, before, _window(rng, window, sd, dip, harm), set())
    if v.outcome == REVERTED:
        v = confirm(v, judge(FLOW, before, _window(rng, window, sd, dip, harm), set()))
    return v.outcome


def rate(runs: int, window: int, sd: float, dip: float, harm: float, bad: str,
         seed: int = 1) -> float:
    rng = random.Random(seed)
    return sum(outcome(rng, window, sd, dip, harm) == bad for _ in range(runs)) / runs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=200_000)
    args = p.parse_args()
    print("harmful move kept (the harmful test's failure), five intervals a side:")
    for sd, dip in NOISE:
        for harm in (0.80, 0.75, 0.70):
            print(f"  sd {sd:.0%}, dips in {dip:.0%}, harm {harm - 1:+.0%}: "
                  f"{rate(args.runs, 5, sd, dip, harm, KEPT):.1e}")
    print("null move reverted (the null test's failure), three intervals a side:")
    for sd, dip in NOISE:
        print(f"  sd {sd:.0%}, dips in {dip:.0%}: {rate(args.runs, 3, sd, dip, 1.0, REVERTED):.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
