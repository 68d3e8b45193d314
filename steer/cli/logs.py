"""Log lines of the long-running commands (steer auto): on stderr, each with its time, as text
for a person or as one JSON object per line for a log shipper (journald, Loki, Fluent Bit)."""
from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from typing import Callable, TextIO

LOG_FORMATS = ("text", "json")


def level_of(message: str) -> str:
    if message.startswith("warning"):
        return "warning"
    if message.startswith(("policy error", "could not")):
        return "error"
    return "info"


def make_logger(fmt: str = "text", stream: TextIO | None = None,
                now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)
                ) -> Callable[..., None]:
    """log(message, **fields): text is `TIME message` (RFC 3339, UTC, milliseconds); json is
    {"time", "level", "msg", and FIELDS}."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format {fmt!r}: one of {', '.join(LOG_FORMATS)}")

    def log(message: str, **fields) -> None:
        out = stream or sys.stderr
        t = now().isoformat(timespec="milliseconds").replace("+00:00", "Z")
        if fmt == "json":
            line = json.dumps({"time": t, "level": level_of(message), "msg": message, **fields})
        else:
            line = f"{t} {message}"
        print(line, file=out, flush=True)
    return log
