"""Rendering: a snapshot becomes rich tables (a pure function); the loops only feed Live or print."""
from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Callable

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .classify import CROSS_SOCKET, SAME_CORE, SAME_SOCKET
from .flows import FlowReport, Snapshot
from .topology import Topology, format_cpulist
from .units import figure

if TYPE_CHECKING:
    from .steering import DeviceState

DEFAULT_LIMIT = 20   # flows shown

CLASS_STYLE = {SAME_CORE: "bold red", SAME_SOCKET: "green", CROSS_SOCKET: "yellow"}


def _class_text(f: FlowReport) -> Text:
    p = f.placement
    label = p.cls
    style = CLASS_STYLE.get(p.cls, "dim")
    if p.cls == SAME_SOCKET and p.shared_llc is False:
        label, style = "same-socket/no-llc", "yellow"
    return Text(label, style=style)


def _rate(bps: float) -> str:
    for unit, div in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= div:
            return f"{bps / div:.2f} {unit}"
    return f"{bps:.0f} bit/s"


def _cpu(cpu: int | None, share: float | None) -> str:
    if cpu is None:
        return "-"
    return f"{cpu} ({share:.0%})" if share is not None and share < 0.995 else str(cpu)


def _llc(v: int | None) -> str:
    return "n/a" if v is None else f"{v:,}"


def flow_table(snap: Snapshot, limit: int = DEFAULT_LIMIT) -> Table:
    t = Table(title=f"flows over {snap.duration:.1f} s, by rate", title_justify="left",
              expand=False, header_style="bold")
    for name, justify in (("flow", "left"), ("rate", "right"), ("kernel CPU", "right"),
                          ("app CPU", "right"), ("class", "left"), ("kernel s/GB", "right"),
                          ("app s/GB", "right"), ("LLC miss k", "right"), ("LLC miss app", "right"),
                          ("reader", "left")):
        t.add_column(name, justify=justify, no_wrap=name in ("flow", "class"))
    for f in snap.flows[:limit]:
        reader = f"{f.app_comm}/{f.app_pid}" if f.app_pid else "-"
        t.add_row(str(f.flow), _rate(f.rate_bps), _cpu(f.kernel_cpu, f.kernel_cpu_share),
                  _cpu(f.app_cpu, f.app_cpu_share), _class_text(f),
                  figure(f.kernel_seconds_per_gb), figure(f.app_seconds_per_gb),
                  _llc(f.llc_misses_kernel), _llc(f.llc_misses_app), reader)
    if not snap.flows:
        t.add_row("(no TCP/UDP receive traffic in this interval)", *[""] * 9)
    return t


def cpu_table(snap: Snapshot) -> Table:
    t = Table(title="per CPU (share of the interval)", title_justify="left", header_style="bold")
    for name in ("CPU", "NET_RX/s", "NET_RX", "unattributed", "cpumap kthread", "app receive",
                 "LLC miss k", "LLC miss app"):
        t.add_column(name, justify="right")
    d = snap.duration or 1.0
    for c in snap.cpus:
        t.add_row(str(c.cpu), f"{c.net_rx_events / d:,.0f}", f"{c.net_rx_seconds / d:.1%}",
                  f"{c.net_rx_unattributed_seconds / d:.1%}", f"{c.kthread_seconds / d:.1%}",
                  f"{c.app_seconds / d:.1%}", _llc(c.llc_misses_kernel), _llc(c.llc_misses_app))
    return t


def status_line(snap: Snapshot, topo: Topology) -> Text:
    caps = snap.capabilities
    parts = [f"CPUs {format_cpulist(topo.online)} online, {len(topo.sockets)} socket(s)",
             f"flow entries {snap.live_entries}/{snap.max_entries}, evictions {snap.evictions}"]
    if not caps.llc_available:
        parts.append(f"LLC {caps.llc}")
    if not caps.app_side.startswith("available"):
        parts.append(f"app side {caps.app_side}")
    return Text(" | ".join(parts), style="dim")


def render(snap: Snapshot, topo: Topology, limit: int = DEFAULT_LIMIT) -> Group:
    return Group(flow_table(snap, limit), cpu_table(snap), status_line(snap, topo))


def make_console(stderr: bool = False) -> Console:
    """A console for the views: off a terminal (logs, pipes) wide enough that no column folds."""
    c = Console(stderr=stderr)
    return c if c.is_terminal else Console(stderr=stderr, width=200)


def run_live(next_snapshot: Callable[[], Snapshot], topo: Topology, *, interval: float,
             duration: float | None, limit: int = DEFAULT_LIMIT, console: Console | None = None,
             keep_going: Callable[[], bool] = lambda: True) -> Snapshot | None:
    """Refresh the view every INTERVAL seconds until DURATION (None: until Ctrl-C).

    On a terminal the view redraws in place; anywhere else each interval is printed once, as
    plain text, so logs and pipes stay readable."""
    console = console or make_console()
    end = None if duration is None else time.monotonic() + duration
    last = None

    def tick() -> Snapshot | None:
        wait = interval if end is None else min(interval, max(0.0, end - time.monotonic()))
        time.sleep(wait)
        return next_snapshot()

    if console.is_terminal:
        with Live(console=console, auto_refresh=False, transient=False) as live:
            while (end is None or time.monotonic() < end) and keep_going():
                last = tick()
                live.update(render(last, topo, limit), refresh=True)
    else:
        while (end is None or time.monotonic() < end) and keep_going():
            last = tick()
            console.print(render(last, topo, limit))
            sys.stdout.flush()
    return last


def topology_table(topo: Topology) -> Table:
    """`steer topology`: one row per CPU, with what it shares with which others."""
    t = Table(title=f"{len(topo.cpus)} CPUs, {len(topo.sockets)} socket(s), LLC = L{topo.llc_level}",
              title_justify="left")
    for col in ("CPU", "core", "socket", "LLC", "NUMA", "SMT siblings", "LLC shared with", "online"):
        t.add_column(col, justify="right")
    for _, c in sorted(topo.cpus.items()):
        t.add_row(str(c.cpu), figure(c.core, "{}"), figure(c.socket, "{}"), figure(c.llc, "{}"),
                  figure(c.numa, "{}"), format_cpulist(c.siblings),
                  format_cpulist(c.llc_cpus) or "-", "yes" if c.online else "no")
    return t


def rules_lines(devices: list[DeviceState], online: set[int]) -> list[str]:
    """`steer rules`: each device with pinned steering, its counters and its rules."""
    if not devices:
        return ["no pinned steering rules"]
    out = []
    for d in devices:
        where = d.dev + (f" in {d.netns}" if d.netns else "")
        if d.error:
            out.append(f"{where}: {d.error}")
            continue
        c = d.counters
        out.append(f"{where} ({d.mode} XDP): redirected {c['redirected']:,}, passed "
                   f"{c['passed']:,}, unparsed {c['unparsed']:,}, failed redirects "
                   f"{c['redirect_failed']:,}")
        if d.detached:
            out.append(f"  DETACHED: {d.detached}; `steer pin` moves these rules to a new device "
                       "of that name, `steer reset` removes them")
        for r in d.rules:
            off = "" if r.cpu in online else \
                "  (CPU offline: the kernel runs its cpumap thread on another CPU)"
            out.append(f"  rule {r.id:>4}  {str(r.spec):<60} -> CPU {r.cpu:<4} "
                       f"{r.packets:>12,} packets {r.bytes:>16,} bytes{off}")
    return out
