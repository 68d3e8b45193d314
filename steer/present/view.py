"""Rendering: a snapshot becomes rich renderables that fit a given width (pure functions). The
live loop with its keys is steer/present/live.py; `steer flows` prints the same tables once.

The flow table keeps, at any width, what a person reads a flow by: its rate with the unit, where
its kernel work and its reader run and how much CPU each takes, and its class. Other columns go
by priority as the width shrinks, and the flow's addresses are shortened to the room left."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text

from steer.defaults import DEFAULT_LIMIT, DEFAULT_MIN_RATE, SORTS
from steer.model.classify import CROSS_SOCKET, SAME_CORE, SAME_SOCKET
from steer.model.reports import FEW_SAMPLES, FlowReport, Snapshot
from steer.model.names import printable
from steer.trace.programs import FIGURE_NAMES
from steer.model.samples import FlowId
from steer.model.topology import Topology, format_cpulist
from steer.model.units import figure, rate_text

if TYPE_CHECKING:
    from steer.steering.xdp import DeviceState

MEANINGFUL_BYTES = 10**6      # a cost per GB of fewer bytes in one interval says nothing
HISTORY = 12                  # intervals of rate history a flow's sparkline shows
FLOW_MIN_WIDTH = 12

CLASS_STYLE = {SAME_CORE: "bold red", SAME_SOCKET: "green", CROSS_SOCKET: "yellow"}
CLASS_ORDER = {SAME_CORE: 0, CROSS_SOCKET: 1, SAME_SOCKET: 2}


@dataclass
class ViewState:
    """What the person chose: the order, the filter, idle flows shown or not."""
    sort: str = "rate"
    filter: str = ""
    show_idle: bool = False
    min_rate: float = DEFAULT_MIN_RATE
    paused: bool = False
    help: bool = False
    editing: bool = False     # typing a filter


@dataclass
class History:
    """Each flow's rate over its last HISTORY intervals, for the sparklines."""
    rates: dict[FlowId, list[float]] = field(default_factory=dict)

    def add(self, snap: Snapshot) -> None:
        seen = {f.flow: f.rate_bps for f in snap.flows}
        for flow in list(self.rates):
            if flow not in seen:
                self.rates[flow].append(0.0)
                if not any(self.rates[flow]):
                    del self.rates[flow]
        for flow, rate in seen.items():
            self.rates.setdefault(flow, []).append(rate)
        for flow, r in self.rates.items():
            del r[:-HISTORY]


SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int = HISTORY) -> str:
    values = list(values)[-width:]
    top = max(values, default=0.0)
    if top <= 0:
        return " " * (width - len(values)) + SPARKS[0] * len(values)
    return " " * (width - len(values)) + "".join(
        SPARKS[min(len(SPARKS) - 1, int(v / top * (len(SPARKS) - 1) + 0.5))] for v in values)


def share_text(fraction: float) -> str:
    """A share of one CPU: two significant figures below 10%, whole percents above."""
    pct = fraction * 100
    return f"{pct:.0f}%" if pct >= 9.95 else f"{pct:.1f}%" if pct >= 0.05 else "0%"


def _sampled(fraction: float, samples: int | None) -> str:
    """A share of a CPU, marked ~ where it rests on so few samples that it is rough."""
    rough = samples is not None and 0 < samples < FEW_SAMPLES
    return ("~" if rough else "") + share_text(fraction)


def _cpu(cpu: int | None, share: float | None) -> str:
    """The CPU that does most of a side's work, with its part of that work when it is split."""
    if cpu is None:
        return "-"
    return f"{cpu} ({share:.0%})" if share is not None and share < 0.995 else str(cpu)


def kernel_cpu_text(f: FlowReport) -> str:
    """kCPU: the CPU of most of the flow's kernel receive work, and where its packets go up the
    stack when that is another CPU (a steered flow: arrival 0, stack 1 is 0→1, of class of 1)."""
    if f.stack_cpu is not None and f.kernel_cpu is not None and f.stack_cpu != f.kernel_cpu:
        return f"{f.kernel_cpu}→{f.stack_cpu}"
    return _cpu(f.kernel_cpu, f.kernel_cpu_share)


def class_label(f: FlowReport) -> tuple[str, str]:
    p = f.placement
    if p.cls == SAME_SOCKET and p.shared_llc is False:
        return "same-socket/no-llc", "yellow"
    if p.cls == SAME_CORE and p.smt_sibling:
        return "same-core/smt", "yellow"
    return p.cls, CLASS_STYLE.get(p.cls, "dim")


def _host(addr: str) -> str:
    try:
        return str(ipaddress.ip_address(addr))   # IPv6 compressed
    except ValueError:
        return addr


def _endpoint(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def _after_common_prefix(src: str, dst: str) -> str:
    """DST without the leading groups it shares with SRC: 198.18.0.2 next to 198.18.0.1 is .2."""
    sep = ":" if ":" in dst else "."
    a, b = src.split(sep), dst.split(sep)
    n = 0
    while n < min(len(a), len(b)) - 1 and a[n] == b[n]:
        n += 1
    return dst if n == 0 else sep + sep.join(b[n:])


def short_flow(flow: FlowId, width: int, clip: bool = True) -> str:
    """FLOW in at most WIDTH characters: the peer's address and port first, then this host's;
    shortened in steps (the protocol when it is TCP, the destination's prefix shared with the
    source, then the peer's address from the left: CLIP=False stops before that) so that this
    host's port, the one a service listens on, stays to the last."""
    src, dst = _host(flow.src), _host(flow.dst)
    proto = "" if flow.proto == "tcp" else flow.proto + " "
    local = _endpoint(dst, flow.dport)
    near = _endpoint(_after_common_prefix(src, dst), flow.dport) if ":" not in dst else \
        _endpoint(dst, flow.dport)
    peer = _endpoint(src, flow.sport)
    for text in (f"{flow.proto} {peer} -> {local}", f"{proto}{peer} -> {local}",
                 f"{proto}{peer}->{near}"):
        if len(text) <= width:
            return text
    text = f"{proto}{peer}->{near}"
    if not clip:
        return text
    return "…" + text[len(text) - width + 1:] if width > 1 else text[-width:]


@dataclass(frozen=True)
class Column:
    header: str
    cell: Callable[[FlowReport], str]
    priority: int              # 0: never dropped; higher numbers go first
    justify: str = "right"


def _per_gb(seconds_per_gb: float | None, f: FlowReport) -> str:
    if max(f.rx_bytes, f.app_bytes) < MEANINGFUL_BYTES:
        return "-"
    return figure(seconds_per_gb)


def columns(snap: Snapshot, history: History | None) -> list[Column]:
    d = snap.duration or 1.0
    cols = [
        Column("rate", lambda f: rate_text(f.rate_bps), 0),
        Column("kCPU", kernel_cpu_text, 0),
        Column("k%", lambda f: _sampled(f.kernel_seconds / d, f.kernel_samples), 0),
        Column("aCPU", lambda f: _cpu(f.app_cpu, f.app_cpu_share), 0),
        Column("a%", lambda f: _sampled(f.app_seconds / d, f.app_samples), 0),
        Column("class", lambda f: class_label(f)[0], 0, "left"),
    ]
    if history is not None:
        cols.append(Column("history", lambda f: sparkline(history.rates.get(f.flow, [])), 2,
                           "left"))
    cols += [
        Column("reader", reader_text, 3, "left"),
        Column("k s/GB", lambda f: _per_gb(f.kernel_seconds_per_gb, f), 4),
        Column("a s/GB", lambda f: _per_gb(f.app_seconds_per_gb, f), 4),
    ]
    if any(f.delays is not None for f in snap.flows):
        # --latency: how long its data waited from the stack to its reader, p50/p99
        cols.insert(6, Column("wait p50/p99", delays_text, 1))
    if snap.capabilities.llc.available:
        cols += [Column("LLC k", lambda f: figure(f.llc_misses_kernel, "{:,}"), 5),
                 Column("LLC a", lambda f: figure(f.llc_misses_app, "{:,}"), 5)]
    return cols


def delays_text(f: FlowReport) -> str:
    """p50/p99 of the flow's arrival-to-read delays in the interval ("-" where none was read)."""
    d = f.delays
    if d is None or not d.samples:
        return "-"
    return f"{duration_text(d.quantiles_ns[0.5])}/{duration_text(d.quantiles_ns[0.99])}"


def duration_text(ns: float) -> str:
    """A delay in three significant figures at most: 850ns, 12us, 3.4ms, 1.2s."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            v = ns / scale
            return f"{v:.1f}{unit}" if v < 10 else f"{v:.0f}{unit}"
    return f"{ns:.0f}ns"


def reader_text(f: FlowReport) -> str:
    """Who reads the flow: its workload where its cgroup names one (a pod, a container, a
    systemd unit), else its process name and pid; as text, whatever the host named it."""
    label = f.app_workload.label if f.app_workload else None
    if label:
        return printable(label)
    return f"{printable(f.app_comm or '')}/{f.app_pid}" if f.app_pid else "-"


def reader_words(f: FlowReport) -> str:
    """What the workload sort and the filter know a flow's reader by."""
    w = f.app_workload
    return " ".join(x for x in (w and w.label, f.app_cgroup, f.app_comm) if x)


def is_idle(f: FlowReport, min_rate: float) -> bool:
    """No payload either way (the ACKs of a flow this host sends), or slower than MIN_RATE."""
    return (not f.rx_bytes and not f.app_bytes) or f.rate_bps < min_rate


def _matches(f: FlowReport, text: str) -> bool:
    hay = f"{f.flow} {f.flow.dport} {reader_words(f)} {f.app_pid or ''} {f.placement.cls}"
    return text.lower() in hay.lower()


def select_flows(snap: Snapshot, state: ViewState) -> tuple[list[FlowReport], int, int]:
    """(the flows to show in STATE's order, how many are idle and hidden, how many the filter
    hides)."""
    flows = snap.flows
    idle = 0
    if not state.show_idle:
        shown = [f for f in flows if not is_idle(f, state.min_rate)]
        idle, flows = len(flows) - len(shown), shown
    filtered = 0
    if state.filter:
        shown = [f for f in flows if _matches(f, state.filter)]
        filtered, flows = len(flows) - len(shown), shown
    key = {"rate": lambda f: -f.rate_bps,
           "kernel": lambda f: -f.kernel_seconds,
           "app": lambda f: -f.app_seconds,
           "class": lambda f: (CLASS_ORDER.get(f.placement.cls, 3), -f.rate_bps),
           # flows without a known reader last, each workload's flows by rate
           "workload": lambda f: (not reader_words(f), reader_words(f), -f.rate_bps)}[state.sort]
    return sorted(flows, key=key), idle, filtered


def flow_table(snap: Snapshot, flows: list[FlowReport], width: int,
               history: History | None = None, rows: int | None = None) -> Table:
    """FLOWS (of SNAP, as select_flows gives them), at most ROWS, in WIDTH columns."""
    shown = flows if rows is None else flows[:max(rows, 0)]
    cols = columns(snap, history)
    cells = [[c.cell(f) for c in cols] for f in shown]
    widths = [max([len(c.header)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
    keep = list(range(len(cols)))
    # the flow column first gets room for its shortest unclipped form (or all it needs), by
    # dropping other columns, worst priority first; only then does it clip
    natural = max([len("flow")] + [len(short_flow(f.flow, 10**3)) for f in shown])
    unclipped = max([len("flow")] + [len(short_flow(f.flow, 0, clip=False)) for f in shown])
    want = min(natural, max(unclipped, FLOW_MIN_WIDTH))

    def room() -> int:   # left for the flow column: a space after each other column
        return width - sum(widths[i] + 1 for i in keep)

    while room() < want and any(cols[i].priority for i in keep):
        worst = max(cols[i].priority for i in keep)
        keep = [i for i in keep if cols[i].priority != worst]
    flow_width = max(FLOW_MIN_WIDTH, room())
    texts = [short_flow(f.flow, flow_width) for f in shown]
    flow_width = min(flow_width, max([len("flow")] + [len(t) for t in texts]))
    t = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False,
              header_style="bold reverse", expand=False, collapse_padding=True)
    t.add_column("flow", width=flow_width, no_wrap=True, overflow="crop")
    for i in keep:
        t.add_column(cols[i].header, justify=cols[i].justify, width=widths[i], no_wrap=True,
                     overflow="crop")
    for f, text, row in zip(shown, texts, cells):
        # Text, never markup: a reader named "[/x]" is a name, not a closing tag
        values = [Text(row[i], style=class_label(f)[1] if cols[i].header == "class" else "")
                  for i in keep]
        t.add_row(Text(text), *values)
    return t


def _bar(parts: Sequence[tuple[float, str, str]], width: int) -> Text:
    """A bar of WIDTH cells filled by (fraction, glyph, style) parts, in order, up to 100%."""
    out, used = Text(), 0
    for fraction, glyph, style in parts:
        n = min(width - used, int(round(max(fraction, 0.0) * width)))
        out.append(glyph * n, style=style)
        used += n
    out.append(" " * (width - used))
    return out


BAR_PARTS = (("█", "red", "NET_RX"), ("▓", "magenta", "cpumap kthread"), ("▒", "blue", "app receive"))


HEAT = " ▁▂▃▄▅▆▇█"   # a CPU's receive work (NET_RX, kthread, app) in eighths of its time


def socket_lines(snap: Snapshot, topo: Topology, width: int) -> list[Text]:
    """One line a socket, as htop and btop fold many CPUs: its CPUs' receive work summed (in
    CPUs' worth of time) and a heat strip of one character a CPU in CPU order, red where the
    kernel side leads and blue where the application's does; where the strip is wider than
    the line, each character is the busiest of the CPUs it stands for."""
    d = snap.duration or 1.0
    by_socket: dict = {}
    for c in snap.cpus:
        known = topo.cpus.get(c.cpu)
        by_socket.setdefault(known.socket if known else None, []).append(c)
    lines = []
    for sock, cpus in sorted(by_socket.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        kern = sum(c.net_rx_seconds + c.kthread_seconds for c in cpus) / d
        app = sum(c.app_seconds for c in cpus) / d
        line = Text(f"{'socket ' + str(sock) if sock is not None else 'other'}: "
                    f"{len(cpus)} CPUs, kernel {kern:.1f} app {app:.1f} CPUs ")
        room = max(8, width - len(line.plain))
        per = -(-len(cpus) // room)   # CPUs a character
        for i in range(0, len(cpus), per):
            group = cpus[i:i + per]
            busiest = max(group, key=lambda c: c.net_rx_seconds + c.kthread_seconds + c.app_seconds)
            k = (busiest.net_rx_seconds + busiest.kthread_seconds) / d
            a = busiest.app_seconds / d
            level = min(len(HEAT) - 1, int(round(min(1.0, k + a) * (len(HEAT) - 1))))
            line.append(HEAT[level], style="red" if k >= a else "blue")
        line.truncate(width)
        lines.append(line)
    return lines


def cpu_lines(snap: Snapshot, width: int, max_lines: int, topo: Topology | None = None) -> list[Text]:
    """Per CPU, a bar of its NET_RX, cpumap kthread and application receive time, as many CPUs to
    a line as fit; when they do not all fit in MAX_LINES, a line a socket (socket_lines, where
    TOPO is given and there is room for them) and the busiest CPUs in the lines left."""
    d = snap.duration or 1.0
    cell_width = 39
    per_line = max(1, (width + 2) // (cell_width + 2))
    cpus = list(snap.cpus)
    head: list[Text] = []
    if topo is not None and len(cpus) > max(1, max_lines) * per_line:
        sockets = socket_lines(snap, topo, width)
        if len(sockets) < max_lines:
            head, max_lines = sockets, max_lines - len(sockets)
    room = max(1, max_lines) * per_line
    hidden = 0
    if len(cpus) > room:
        busy = sorted(cpus, key=lambda c: -(c.net_rx_seconds + c.kthread_seconds + c.app_seconds))
        keep = {c.cpu for c in busy[:room - 1]}
        hidden = len(cpus) - len(keep)
        cpus = [c for c in cpus if c.cpu in keep]
    cells = []
    for c in cpus:
        rx, kt, app = c.net_rx_seconds / d, c.kthread_seconds / d, c.app_seconds / d
        cell = Text(f"{c.cpu:>3} ")
        cell.append_text(_bar([(rx, *BAR_PARTS[0][:2]), (kt, *BAR_PARTS[1][:2]),
                               (app, *BAR_PARTS[2][:2])], 10))
        cell.append(f" rx{share_text(rx):>5} kt{share_text(kt):>5} app{share_text(app):>5}")
        cells.append(cell)
    if hidden:
        cells.append(Text(f"+{hidden} quieter CPUs", style="dim"))
    lines = head
    for i in range(0, len(cells), per_line):
        line = Text()
        for j, cell in enumerate(cells[i:i + per_line]):
            if j:
                line.append("  ")
            line.append_text(cell)
        line.truncate(width)
        lines.append(line)
    return lines


def header_line(snap: Snapshot, topo: Topology, state: ViewState, width: int) -> Text:
    d = snap.duration or 1.0
    total = sum(f.rx_bytes for f in snap.flows) * 8 / d
    rx = sum(c.net_rx_seconds + c.kthread_seconds for c in snap.cpus) / d
    app = sum(c.app_seconds for c in snap.cpus) / d
    t = Text()
    t.append("steer", style="bold")
    sockets = len(topo.sockets)
    t.append(f"  {rate_text(total)}  kernel {share_text(rx)} app {share_text(app)} of a CPU  "
             f"{len(topo.online)} CPUs, {sockets} socket{'s' if sockets != 1 else ''}  "
             f"over {snap.duration:.1f} s")
    if state.paused:
        t.append("  PAUSED", style="bold reverse")
    t.truncate(width)
    return t


def degraded_line(snap: Snapshot, width: int) -> Text | None:
    """One line where this kernel's refusals cost figures: which, and why; None where none."""
    lost = snap.capabilities.lost
    if not lost:
        return None
    names = ", ".join(("partial " if f.available else "no ") + FIGURE_NAMES[n]
                      for n, f in lost.items())
    whys: list[str] = []
    for f in lost.values():
        if f.why not in whys:
            whys.append(f.why)
    t = Text("degraded: ", style="bold yellow")
    t.append(f"{names} ({'; '.join(whys)}); steer check", style="yellow")
    t.truncate(width, overflow="ellipsis")
    return t


# the footer names the receive time no flow was charged with from this share of a CPU on: the
# flows' kernel time and it are all the CPUs' NET_RX and receive-kthread time
UNATTRIBUTED_SHOWN = 0.01


def unattributed_share(snap: Snapshot) -> float:
    """The CPUs' NET_RX and cpumap-kthread time that no flow was charged with, in CPUs."""
    if snap.duration <= 0:
        return 0.0
    return sum(c.net_rx_unattributed_seconds + c.kthread_unattributed_seconds
               for c in snap.cpus) / snap.duration


def footer_lines(snap: Snapshot, state: ViewState, idle: int, filtered: int, more: int,
                 width: int, keys: bool, max_lines: int = 2) -> list[Text]:
    parts = []
    if more:
        parts.append(f"+{more} more below")
    if idle:
        parts.append(f"+{idle} idle flow{'s' if idle > 1 else ''} "
                     f"(below {rate_text(state.min_rate)}{'; i shows them' if keys else ''})")
    if state.filter or state.editing:
        parts.append(f"filter '{state.filter}{'_' if state.editing else ''}'"
                     + (f" hides {filtered}" if filtered else ""))
    parts.append(f"sort {SORTS[state.sort]}")
    caps = snap.capabilities
    if not caps.llc.available:
        parts.append(f"LLC {caps.llc.line()}")
    if not caps.app_side.available and not caps.lost:   # else degraded_line's
        parts.append(f"app side {caps.app_side.line()}")
    if snap.evictions:
        parts.append(f"{snap.evictions} flow entries evicted (map full)")
    if keys:
        parts.append("? help  q quit")
    # last: where room is short, the part that goes
    if (lone := unattributed_share(snap)) >= UNATTRIBUTED_SHOWN:
        parts.append(f"receive work no flow was charged with: {lone:.1%} of a CPU")
    lines: list[str] = []
    for part in parts:   # whole parts to a line, as many lines as allowed, the last one cut
        if lines and len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += " | " + part
        elif len(lines) < max_lines:
            lines.append(part)
        else:
            lines[-1] += " | " + part
    out = []
    for line in lines:
        t = Text(line, style="dim")
        t.truncate(width, overflow="ellipsis")
        out.append(t)
    return out


HELP = [
    ("r k a c w", "sort by rate, kernel CPU time, app CPU time, class, workload"),
    ("/", "filter: type text (address, port, command, class), Enter keeps it, Esc clears it"),
    ("i", "show or hide idle flows (no payload, or below the minimum rate)"),
    ("p, space", "pause or resume"),
    ("?", "this help; any key leaves it"),
    ("q", "quit"),
    ("", ""),
    ("kCPU, aCPU", "the CPU doing most of the flow's kernel receive work / running its reader, "
                   "with that CPU's part when the work is split"),
    ("k%, a%", "kernel receive / application receive time, as a share of one CPU; ~: from fewer "
               f"than {FEW_SAMPLES} samples (sampled timing), so rough: one standard error is "
               "over a third of it"),
    ("class", "same-core, same-socket (no-llc: no shared last-level cache), cross-socket"),
    ("history", f"the flow's rate over the last {HISTORY} intervals"),
    ("k s/GB, a s/GB", f"CPU seconds per GB received (where {MEANINGFUL_BYTES // 10**6} MB or "
                       "more moved in the interval)"),
    ("CPU bars", " ".join(f"{g} {what}" for g, _, what in BAR_PARTS)),
]


def help_table() -> Table:
    t = Table(box=None, show_header=False, padding=(0, 2, 0, 0))
    t.add_column(style="bold", no_wrap=True)
    t.add_column()
    for k, v in HELP:
        t.add_row(k, v)
    return t


def screen(snap: Snapshot, topo: Topology, state: ViewState, width: int, height: int,
           history: History | None = None, keys: bool = True) -> Group:
    """The whole live view in WIDTH x HEIGHT: header, CPU bars, flows, footer."""
    head = [header_line(snap, topo, state, width)]
    if (lost := degraded_line(snap, width)) is not None:
        head.append(lost)
    bars = cpu_lines(snap, width, max(1, (height - 6) // 3), topo)
    if state.help:
        return Group(*head, help_table())
    flows, idle, filtered = select_flows(snap, state)
    foot = footer_lines(snap, state, idle, filtered, 0, width, keys)
    rows = max(1, height - len(head) - len(bars) - len(foot) - 2)   # table header, last line
    if len(flows) > rows:
        foot = footer_lines(snap, state, idle, filtered, len(flows) - rows, width, keys)
    body = [flow_table(snap, flows, width, history, rows)] if flows else \
        [Text(_nothing(snap, idle, filtered), style="dim")]
    return Group(*head, *bars, *body, *foot)


def _nothing(snap: Snapshot, idle: int, filtered: int) -> str:
    if filtered:
        return "(no flow matches the filter)"
    if idle:
        return "(only idle flows in this interval)"
    return "(no TCP/UDP receive traffic in this interval)"


def render(snap: Snapshot, topo: Topology, limit: int = DEFAULT_LIMIT, width: int = 200,
           state: ViewState | None = None) -> Group:
    """One interval as plain output (`steer flows`, `steer top` off a terminal): the flows STATE
    selects (the LIMIT first), the CPU bars, a footer."""
    state = state or ViewState()
    flows, idle, filtered = select_flows(snap, state)
    title = Text(f"flows over {snap.duration:.1f} s, by {SORTS[state.sort]}", style="bold")
    body = [flow_table(snap, flows, width, None, limit)] if flows else \
        [Text(_nothing(snap, idle, filtered), style="dim")]
    lost = degraded_line(snap, width)
    return Group(header_line(snap, topo, state, width), *([lost] if lost else []),
                 *cpu_lines(snap, width, 16, topo), title,
                 *body, *footer_lines(snap, state, idle, filtered, max(0, len(flows) - limit),
                                      width, keys=False, max_lines=4))


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


def changed_lines(changed: list[dict]) -> list[str]:
    """`steer rules`, after the rules: the settings steer changed and reset puts back."""
    if not changed:
        return []
    out = ["settings steer changed, which steer reset puts back (as found):"]
    for c in changed:
        where = "" if c.get("netns") is None else f" in {printable(c['netns'])}"
        if c["kind"] == "irq":
            out.append(f"  IRQ {c['irq']}: CPUs {printable(str(c['found']))}")
        elif c["kind"] == "rps":
            out.append(f"  RPS of {printable(c['dev'])}{where} {printable(str(c['queue']))}: "
                       f"mask {printable(str(c['found']))}")
        else:
            which = "every NAPI" if c["napi_id"] is None else f"NAPI {c['napi_id']}"
            out.append(f"  {which} of {printable(c['dev'])}{where}: {c['found']}")
    return out


def rules_lines(devices: list[DeviceState], online: set[int]) -> list[str]:
    """`steer rules`: each device with pinned steering, its counters and its rules."""
    if not devices:
        return ["no pinned steering rules"]
    out = []
    for d in devices:
        where = printable(d.dev) + (f" in {printable(d.netns)}" if d.netns else "")
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
        elif not d.link_read:
            out.append("  attached or not: unknown (its link is root's to open)")
        for r in d.rules:
            off = "" if r.cpu in online else \
                "  (CPU offline: the kernel runs its cpumap thread on another CPU)"
            out.append(f"  rule {r.id:>4}  {str(r.spec):<60} -> CPU {r.cpu:<4} "
                       f"{r.packets:>12,} packets {r.bytes:>16,} bytes{off}")
    return out
