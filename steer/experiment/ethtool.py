"""ethtool, run in a device's network namespace: the one way the sweep reads and changes what
sysfs does not show (offloads, pause frames, rings, channels, coalescing). Shared by the host's
recorded configuration (hostconfig) and the settings a sweep varies (devsettings)."""
from __future__ import annotations

import re
import shutil
import subprocess

ETHTOOL_TIMEOUT = 10


def parse_ethtool_sections(text: str) -> dict:
    """`ethtool -g`/`-l` text -> {"max": {...}, "current": {...}}; `-c` text (no sections) ->
    {"current": {...}}. Values: int, or the string ethtool printed (n/a, on, off)."""
    out: dict[str, dict] = {}
    section = "current"
    for line in text.splitlines():
        low = line.strip().lower()
        if low.startswith("pre-set maximums"):
            section = "max"
            continue
        if low.startswith("current hardware settings"):
            section = "current"
            continue
        if low.startswith("adaptive rx:"):   # `-c`: "Adaptive RX: off  TX: off"
            m = re.match(r"adaptive rx:\s*(\S+)\s+tx:\s*(\S+)", low)
            if m:
                out.setdefault(section, {}).update({"adaptive-rx": m.group(1), "adaptive-tx": m.group(2)})
            continue
        key, sep, value = line.partition(":")
        if not sep or not value.strip() or line.rstrip().endswith(":"):
            continue
        value = value.strip()
        out.setdefault(section, {})[key.strip().lower()] = int(value) if value.isdigit() else value
    return out


def ethtool(args: list[str], netns: str | None = None) -> tuple[str | None, str | None]:
    """(stdout, None) or (None, why) of one ethtool command, run in the network namespace at path
    NETNS (None: this process's)."""
    if not shutil.which("ethtool"):
        return None, "unavailable: ethtool not installed (apt-get install ethtool)"
    enter = None
    if netns:
        from steer.kernel.namespaces import enter_netns
        enter = lambda: enter_netns(netns)   # noqa: E731  (the child, before exec)
    try:
        r = subprocess.run(["ethtool", *args], capture_output=True, text=True,
                           timeout=ETHTOOL_TIMEOUT, preexec_fn=enter)
    except subprocess.TimeoutExpired:
        return None, f"unavailable: ethtool {' '.join(args)} did not answer in {ETHTOOL_TIMEOUT} s"
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[0]
        if "not supported" in why.lower():
            return None, f"unsupported by the driver ({why})"
        return None, f"unavailable: {why}"
    return r.stdout, None
