"""Units of the figures steer reports, and their text: one definition of a gigabyte, of a cost
per GB, and of how a figure that does not exist is written, for the live view, the sweep's
report and its cells alike."""
from __future__ import annotations

import math
import re

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


_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def parse_int(text: str) -> int:
    """TEXT as a whole number, in ASCII digits alone: Python's int() also takes Arabic-Indic and
    other digits and underscores, which no user means in a CPU number."""
    t = text.strip()
    if not _INT.fullmatch(t):
        raise ValueError(f"not a whole number: {text!r}")
    return int(t)


def parse_float(text: str) -> float:
    """TEXT as a finite decimal number (float() also takes 'inf', 'nan' and other digits)."""
    t = text.strip()
    if not _FLOAT.fullmatch(t):
        raise ValueError(f"not a number: {text!r}")
    value = float(t)
    if not math.isfinite(value):
        raise ValueError(f"out of range: {text!r}")
    return value


def rate_text(bps: float) -> str:
    for unit, div in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= div:
            return f"{bps / div:.2f} {unit}"
    return f"{bps:.0f} bit/s"


def parse_rate(text: str) -> float:
    """'10k', '1.5M', '2G', '500' (bit/s) -> bit/s."""
    t = text.strip().lower().removesuffix("bit/s").removesuffix("bps").strip()
    scale = {"k": 1e3, "m": 1e6, "g": 1e9}.get(t[-1:], 1.0)
    try:
        value = parse_float(t[:-1] if scale != 1.0 else t) * scale
    except ValueError:
        raise ValueError(f"{text!r}: expected a rate in bit/s such as 500, 10k, 1.5M or 2G") \
            from None
    if value < 0:
        raise ValueError(f"{text!r}: a rate cannot be negative")
    return value
