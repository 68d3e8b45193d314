"""The PMU events steer counts on every CPU: LLC misses and references (their ratio is the hit
ratio NDM'13 reads from Intel PCM), instructions retired and core cycles (the follow-up's
instructions per Gbps). One counting event per CPU and event, opened here, read two ways: the
tracer's BPF programs read them at their boundaries or samples and charge each delta to a flow's
side; userspace reads them whole (every task, kernel and user, idle included), as PCM reads a
core, which is what `whole_cpu` gives per CPU.

Hosts without a PMU (most VMs) get `unavailable: why`; `software` opens cpu-clock in each event's
place so that the whole path can be tested there (its counts are nanoseconds, not events)."""
from __future__ import annotations

import errno
from dataclasses import dataclass, field

from steer.defaults import COUNTER_MODES
from steer.kernel.errors import KernelError
from steer.model.capabilities import MISSING, WORKS, Figure
from steer.kernel.perf import (PERF_COUNT_HW_CACHE_MISSES, PERF_COUNT_HW_CACHE_REFERENCES,
                               PERF_COUNT_HW_CPU_CYCLES, PERF_COUNT_HW_INSTRUCTIONS,
                               PERF_COUNT_SW_CPU_CLOCK, PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE,
                               PerfCounter)

# event -> (its generic hardware config, the flowtrace map its per-CPU events go in); the order
# is the order of every per-CPU tuple of counts
EVENTS = {"llc_misses": (PERF_COUNT_HW_CACHE_MISSES, "llc_counters"),
          "llc_references": (PERF_COUNT_HW_CACHE_REFERENCES, "ref_counters"),
          "instructions": (PERF_COUNT_HW_INSTRUCTIONS, "instruction_counters"),
          "cycles": (PERF_COUNT_HW_CPU_CYCLES, "cycle_counters")}
PERF_NAMES = {"llc_misses": "cache-misses", "llc_references": "cache-references",
              "instructions": "instructions", "cycles": "cycles"}

class CounterError(Exception):
    """`hardware` asked for and the host cannot count it: one line, for the user."""


@dataclass
class CounterSet:
    """The events opened on each CPU: EVENT -> [PerfCounter per CPU], and why others are not."""
    mode: str
    counters: dict[str, list[PerfCounter]] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)   # event -> why it is not counted

    @classmethod
    def open(cls, mode: str, cpus: list[int]) -> "CounterSet":
        """MODE: auto (the hardware events the PMU has; none without one), hardware (all of
        them, or CounterError), software (cpu-clock stand-ins), off."""
        if mode not in COUNTER_MODES:
            raise CounterError(f"unknown --counters {mode!r}: choose from {', '.join(COUNTER_MODES)}")
        out = cls(mode)
        if mode == "off":
            out.missing = {e: "turned off (--counters off)" for e in EVENTS}
            return out
        for event, (config, _) in EVENTS.items():
            ptype, cfg = (PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK) if mode == "software" \
                else (PERF_TYPE_HARDWARE, config)
            opened: list[PerfCounter] = []
            try:
                for cpu in cpus:
                    opened.append(PerfCounter.open(ptype, cfg, cpu))
            except KernelError as e:
                for c in opened:
                    c.close()
                why = ("no hardware PMU (perf_event_open: ENOENT)" if e.errno == errno.ENOENT
                       else f"the PMU has no {PERF_NAMES[event]} event here" if e.errno == errno.EOPNOTSUPP
                       else str(e))
                if mode != "auto":
                    out.close()
                    raise CounterError(f"--counters {mode}: {PERF_NAMES[event]}: {why}") from None
                out.missing[event] = why
                continue
            out.counters[event] = opened
        return out

    def status(self, event: str) -> Figure:
        if event not in self.counters:
            return Figure(MISSING, self.missing.get(event, "not opened"))
        if self.mode == "software":
            return Figure(WORKS, f"software cpu-clock standing in for {PERF_NAMES[event]}")
        return Figure(WORKS, f"hardware {PERF_NAMES[event]}")

    def summary(self) -> Figure:
        """One figure for the set: what is counted."""
        if not self.counters:
            return Figure(MISSING, next(iter(self.missing.values()), "not opened"))
        names = ", ".join(PERF_NAMES[e] for e in self.counters)
        what = "software cpu-clock standing in for " if self.mode == "software" else "hardware "
        gone = "; ".join(f"{PERF_NAMES[e]}: {why}" for e, why in self.missing.items())
        return Figure(WORKS, f"{what}{names}, per CPU" + (f"; not {gone}" if gone else ""))

    def whole_cpu(self) -> dict[int, dict[str, int]]:
        """CPU -> event -> its count since opened, of everything the CPU ran."""
        out: dict[int, dict[str, int]] = {}
        for event, per_cpu in self.counters.items():
            for c in per_cpu:
                try:
                    out.setdefault(c.cpu, {})[event] = c.read()
                except OSError:
                    pass   # a CPU gone offline: its event reads no more
        return out

    def close(self) -> None:
        for per_cpu in self.counters.values():
            for c in per_cpu:
                c.close()
        self.counters = {}

