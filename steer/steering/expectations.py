"""What a move should do, by what a sweep of this host measured (`steer sweep --out DIR`): the
throughput of the placement a move leaves and of the one it makes, from the sweep's cells of
that kernel and app CPU where it measured them, else from its medians of their classes.

An expectation, not a verdict: a sweep measures one lab or real flow alone on its cells, and a
move's verdict (steer.steering.verdict) is what the flow did. `steer auto --expect-from DIR`
logs it beside each move, and with --dry-run it is what the user has instead of an outcome.
"""
from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass

from steer.model.classify import classify
from steer.model.topology import Topology


class ExpectationError(ValueError):
    """A sweep that cannot be read as one; str() is one line."""


@dataclass(frozen=True)
class Expectation:
    before_bps: float
    after_bps: float
    basis: str              # "cells" (both placements measured) or "classes" (their medians)
    before: str             # what each side is: "cell 2:3" or "class same-core"
    after: str

    @property
    def ratio(self) -> float:
        return self.after_bps / self.before_bps

    def text(self) -> str:
        return (f"the sweep measured {self.after} at {self.after_bps / 1e9:.2f} Gbit/s, "
                f"{self.before} at {self.before_bps / 1e9:.2f}: x{self.ratio:.2f}")

    def fields(self) -> dict:
        return {"expected_ratio": round(self.ratio, 3), "expected_basis": self.basis,
                "expected_before_bps": self.before_bps, "expected_after_bps": self.after_bps}


class SweepExpectations:
    """The one-flow matrix of a sweep (under the device as found): throughput by cell and by
    class, for this host's topology."""

    def __init__(self, results: dict, topo: Topology, where: str = "the sweep"):
        self.topo, self.where = topo, where
        cells = [c for c in results.get("cells") or []
                 if c.get("flows", 1) == 1 and not c.get("setting")
                 and c.get("throughput_bps") and isinstance(c.get("kernel_cpu"), int)
                 and isinstance(c.get("app_cpu"), int)]
        if not cells:
            raise ExpectationError(f"{where}: no one-flow cell with a throughput")
        self.cells = {(c["kernel_cpu"], c["app_cpu"]): float(c["throughput_bps"]) for c in cells}
        by_class: dict[str, list[float]] = {}
        for (k, a), bps in self.cells.items():
            by_class.setdefault(classify(k, a, topo).cls, []).append(bps)
        self.classes = {cls: statistics.median(v) for cls, v in by_class.items()}
        host = (results.get("host") or {}).get("hostname")
        self.other_host = host if host and host != os.uname().nodename else None

    @classmethod
    def load(cls, path: str, topo: Topology) -> "SweepExpectations":
        """From DIR/results.json (or the file itself)."""
        file = os.path.join(path, "results.json") if os.path.isdir(path) else path
        try:
            with open(file) as f:
                results = json.load(f)
        except OSError as e:
            raise ExpectationError(f"{file}: {e.strerror}") from None
        except ValueError as e:
            raise ExpectationError(f"{file}: not a sweep's results.json ({e})") from None
        if not isinstance(results, dict):
            raise ExpectationError(f"{file}: not a sweep's results.json")
        return cls(results, topo, file)

    def _side(self, kernel: int, app: int) -> tuple[float, str] | None:
        if (kernel, app) in self.cells:
            return self.cells[(kernel, app)], f"cell {kernel}:{app}"
        cls = classify(kernel, app, self.topo).cls
        return (self.classes[cls], f"class {cls}") if cls in self.classes else None

    def of(self, old_kernel: int | None, new_kernel: int, app: int | None) -> Expectation | None:
        """The flow read on APP with its stack on OLD_KERNEL, moved to NEW_KERNEL; None where the
        sweep holds neither those cells nor those classes (or a side is unknown)."""
        if old_kernel is None or app is None:
            return None
        before, after = self._side(old_kernel, app), self._side(new_kernel, app)
        if not before or not after or before[0] <= 0:
            return None
        basis = "cells" if before[1].startswith("cell") and after[1].startswith("cell") \
            else "classes"
        return Expectation(before[0], after[0], basis, before[1], after[1])
