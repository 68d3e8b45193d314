"""Units of the figures steer reports, and their text: one definition of a gigabyte, of a cost
per GB, and of how a figure that does not exist is written, for the live view, the sweep's
report and its cells alike."""
from __future__ import annotations

GB = 1e9   # CPU-seconds per GB use decimal gigabytes, as link rates do


def per_gb(value: float | None, nbytes: int) -> float | None:
    """VALUE (CPU-seconds, LLC misses) per GB of NBYTES; None where either is missing: a cost per
    byte of no bytes is not zero."""
    return None if value is None or not nbytes else value / (nbytes / GB)


def hit_ratio(misses: float | None, references: float | None) -> float | None:
    """1 - MISSES / REFERENCES: the share of LLC references that hit, as PCM reports it (None:
    not both counted, or no references)."""
    if misses is None or not references:
        return None
    return max(0.0, 1.0 - misses / references)


def figure(value: float | None, fmt: str = "{:.3f}") -> str:
    """VALUE as FMT, or "-" for a figure that was not measured."""
    return "-" if value is None else fmt.format(value)
