"""What the tracer could measure on this kernel, kept as data: each mechanism and each figure a
Figure (works, degraded or missing; how; why; whether the kernel is the cause). Words are made
of them only where they are shown: the live view, JSON, the exporter and `steer check`."""
from __future__ import annotations

from dataclasses import dataclass, field

WORKS, DEGRADED, MISSING = "works", "degraded", "missing"


@dataclass(frozen=True)
class Figure:
    state: str      # WORKS, DEGRADED or MISSING
    how: str        # where it comes from; degraded or missing: what is lost
    why: str = ""   # the refusals behind it (also behind a fallback that works)
    kernel: bool = False   # not working because of what the kernel refused or lacks, not an option

    @property
    def available(self) -> bool:
        """Measured at all, if only in part."""
        return self.state != MISSING

    @property
    def lost_to_kernel(self) -> bool:
        return self.state != WORKS and self.kernel

    def as_dict(self) -> dict:
        return {"state": self.state, "how": self.how, "why": self.why, "kernel": self.kernel}

    @classmethod
    def from_dict(cls, d: dict) -> "Figure":
        return cls(d["state"], d["how"], d.get("why", ""), d.get("kernel", False))

    def line(self) -> str:
        """As one line: 'available (how (why))' or 'unavailable: how (why)'."""
        if self.state == MISSING:
            return f"unavailable: {self}"
        return f"available ({self})"

    def __str__(self) -> str:
        return self.how + (f" ({self.why})" if self.why else "")


def lost_to_kernel(figures: dict[str, Figure]) -> dict[str, Figure]:
    """Of FIGURES, those not working because of what the kernel refused or lacks, not because
    of an option."""
    return {n: f for n, f in figures.items() if f.lost_to_kernel}


# the mechanisms, in the order JSON shows them
MECHANISMS = ("kernel_side", "app_side", "cpumap_context", "llc", "timing", "app_calls", "drops",
              "counters", "counters_per_flow")


@dataclass(frozen=True)
class Capabilities:
    """Each mechanism as a Figure; the timing mode the tracer took; each figure's Figure
    (steer.trace.programs.FIGURES); and the programs the kernel refused (name -> why)."""
    kernel_side: Figure
    app_side: Figure
    cpumap_context: Figure
    llc: Figure
    timing: Figure = Figure(WORKS, "exact")
    app_calls: Figure = Figure(WORKS, "a program per receive call")
    drops: Figure = Figure(MISSING, "not traced")
    counters: Figure = Figure(MISSING, "not opened")   # PMU events per CPU (steer.trace.counters)
    counters_per_flow: Figure = Figure(MISSING, "not opened")   # references, instructions, cycles
    mode: str = "exact"
    figures: dict = field(default_factory=dict)
    refused: dict = field(default_factory=dict)

    def missing(self, figure: str) -> bool:
        """Whether FIGURE (steer.trace.programs.FIGURES) is not measured at all on this kernel."""
        f = self.figures.get(figure)
        return f is not None and f.state == MISSING

    @property
    def lost(self) -> dict[str, Figure]:
        """The figures this kernel's refusals cost, not those an option left out."""
        return lost_to_kernel(self.figures)

    def as_dict(self) -> dict:
        """For JSON: each mechanism as its line, each figure as its fields."""
        out: dict = {m: getattr(self, m).line() for m in MECHANISMS}
        out["mode"] = self.mode
        out["figures"] = {n: f.as_dict() for n, f in self.figures.items()}
        out["refused"] = dict(self.refused)
        return out
