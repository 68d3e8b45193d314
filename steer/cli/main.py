"""steer: see, per flow, where a host's receive work runs and what it costs.

Errors are one line on stderr and a non-zero exit: 2 for bad arguments, 1 for everything the
host refused or lacks.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

from steer import __version__
from steer.kernel.signals import handle_sigint, interrupt

EXIT_ERROR, EXIT_USAGE = 1, 2


class UserError(Exception):
    """Something the user can fix; shown as one line."""


class UsageError(UserError):
    """An argument that does not parse or does not fit with the others: exit 2, as argparse's."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line (no usage block) and exits 2."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _positive(kind=float, minimum=0.0):
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not v > minimum:
            raise argparse.ArgumentTypeError(f"must be greater than {minimum:g}: {text!r}")
        return v
    return parse


MAX_FLOWS_PER_CELL = 64   # iperf3 pairs a lab cell starts at once


def _flow_counts(text):
    """'1,8,16,24' -> [1, 8, 16, 24]: parallel flows per sweep cell."""
    try:
        counts = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of flow counts: {text!r} (e.g. 1,8,16,24)") from None
    if not counts or any(not 1 <= n <= MAX_FLOWS_PER_CELL for n in counts):
        raise argparse.ArgumentTypeError(f"flow counts go from 1 to {MAX_FLOWS_PER_CELL}: {text!r}")
    return sorted(set(counts))


def _pause_values(text):
    from steer.experiment.devsettings import parse_pause
    try:
        return parse_pause(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _offload_settings(text):
    from steer.experiment.devsettings import parse_offloads
    try:
        return parse_offloads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _rate(text):
    from steer.present.view import parse_rate
    try:
        return parse_rate(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _bounded_int(lo: int, hi: int):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be from {lo} to {hi}: {text!r}")
        return v
    return parse


def _tracer_options(p: argparse.ArgumentParser, timing: str | None = None) -> None:
    """TIMING: this command's default timing mode, where it is not the always-on one."""
    from steer.trace.counters import MODES as COUNTER_MODES
    from steer.trace.programs import HOOK_CHOICES, TIMING_CHOICES
    from steer.trace.tracer import (DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_FLOWS, DEFAULT_SAMPLE_HZ,
                                    DEFAULT_TIMING, MAX_SAMPLE_HZ)
    g = p.add_argument_group("tracer")
    g.add_argument("--timing", choices=TIMING_CHOICES, default=timing or DEFAULT_TIMING,
                   help="how CPU time is measured. sampled: a cpu-clock sample per CPU every "
                        "1/--sample-hz s, charged to the flow the CPU works on; per-flow seconds "
                        "are estimates, bytes are exact, and nothing runs on unrelated system "
                        "calls (cheap enough to leave on). exact: clock reads at every softirq, "
                        "skb and receive syscall; exact to the nanosecond, but it hooks every "
                        "system call of the host (about 2x the cost of a trivial one) and every "
                        "packet (docs/performance.md). counts: bytes, packets and the CPUs that "
                        "processed them, no CPU time. auto: the first of sampled, exact, counts "
                        "whose core programs this kernel runs (capabilities and `steer check` "
                        "say which it took, and why) (default: %(default)s)")
    g.add_argument("--sample-hz", type=_bounded_int(1, MAX_SAMPLE_HZ), default=DEFAULT_SAMPLE_HZ,
                   metavar="HZ",
                   help="samples per second per busy CPU with --timing sampled; more is more "
                        "precise for small flows and costs more (default: %(default)s)")
    g.add_argument("--max-flows", type=_positive(int, 0), default=DEFAULT_MAX_FLOWS, metavar="N",
                   help="bound of the kernel flow map, in (flow, CPU) entries; the least recently "
                        "used are evicted beyond it, and counted (default: %(default)s)")
    g.add_argument("--counters", choices=COUNTER_MODES, default="auto",
                   help="PMU events per CPU: LLC misses and references (the hit ratio), "
                        "instructions, cycles; charged to each flow's kernel and application "
                        "side (with --timing exact, LLC misses alone). auto: those the host's "
                        "PMU has, 'unavailable' and why otherwise (most VMs); hardware: all of "
                        "them or an error; software: cpu-clock in each event's place, to check "
                        "the path where there is no PMU (default: %(default)s)")
    g.add_argument("--idle-timeout", type=_positive(), default=DEFAULT_IDLE_TIMEOUT,
                   metavar="SECONDS",
                   help="drop a flow's entries after this long without packets or reads (they are "
                        "reported one last time first)")
    g.add_argument("--app-hook", choices=HOOK_CHOICES, default="auto",
                   help="how the reader's bytes are counted. counters (sampled timing): no "
                        "program per read; a TCP reader's bytes are its socket's own count, its "
                        "CPU and process come from the samples, UDP reads are counted by fexit on "
                        "udp_recvmsg where the kernel allows it; no count of calls. tracepoint "
                        "(sock:sock_recv_length, kernel 6.3+), fexit or kprobe (a kretprobe on "
                        "tcp_recvmsg/udp_recvmsg/udpv6_recvmsg): a program per receive call of "
                        "every socket, which counts calls and names the reader's CPU at each "
                        "read. auto: counters with sampled timing; with exact timing the first "
                        "of tracepoint, fexit, kprobe this kernel runs, else the application side "
                        "is reported unavailable, with why (default: %(default)s)")
    g.add_argument("--btf", metavar="FILE",
                   help="kernel BTF for CO-RE relocations, for kernels without "
                        "/sys/kernel/btf/vmlinux (default: the running kernel's)")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends an option's default where it has a value to show and the help does not already
    say what happens without the option (no "(default: None)" or "(default: False)")."""

    def _get_help_string(self, action):
        if action.default in (None, False) or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    from steer.present.exporter import DEFAULT_FLOW_LABELS, DEFAULT_LISTEN, DEFAULT_TOP_K, FLOW_LABEL_SETS
    from steer.trace.profile import DEFAULT_FREQUENCY as DEFAULT_PROFILE_HZ
    from steer.trace.tracer import DEFAULT_MAX_FLOWS, MAX_SAMPLE_HZ
    from steer.cli.logs import LOG_FORMATS
    from steer.present.view import DEFAULT_LIMIT, DEFAULT_MIN_RATE, SORTS, rate_text
    fmt = _HelpFormatter
    p = _Parser(
        prog="steer", description="Per-flow view of where receive work runs (kernel NET_RX and "
        "the reading application), its cost, and its affinity class.",
        epilog="Run 'steer COMMAND --help' for the options of each command.")
    p.add_argument("--version", action="version", version=f"steer {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)

    def view_options(sp):
        sp.add_argument("--sort", choices=list(SORTS), default="rate",
                        help="order of the flows (in the live view, keys r k a c change it)")
        sp.add_argument("--min-rate", type=_rate, default=DEFAULT_MIN_RATE, metavar="RATE",
                        help="flows slower than this (bit/s; 10k, 1.5M, 2G), and flows with no "
                             "payload (the ACKs of what this host sends), are idle: hidden and "
                             f"counted (default {rate_text(DEFAULT_MIN_RATE)})")
        sp.add_argument("--all", action="store_true",
                        help="show idle flows too (in the live view, key i)")

    t = sub.add_parser("topology", formatter_class=fmt, help="CPUs, cores, LLC domains, sockets",
                       description="Print the CPU topology steer classifies flows with.")
    t.add_argument("--json", action="store_true", help="JSON instead of a table")
    t.add_argument("--sysfs", default="/sys", help="sysfs root to read (for inspecting a copy)")

    f = sub.add_parser("flows", formatter_class=fmt, help="one snapshot of every flow over N seconds",
                       description="Trace for DURATION seconds, then print every TCP/UDP flow "
                       "received in that window: bytes, kernel and application CPU and time, "
                       "class. Needs root (CAP_BPF and CAP_PERFMON).")
    f.add_argument("--duration", type=_positive(), default=5.0, metavar="SECONDS",
                   help="length of the window")
    f.add_argument("--json", action="store_true", help="JSON for scripts instead of a table")
    f.add_argument("--limit", type=_positive(int, 0), default=50, help="flows in the table")
    view_options(f)
    _tracer_options(f)

    top = sub.add_parser("top", formatter_class=fmt, help="live view of flows and CPUs",
                         description="Live view: per-CPU bars of NET_RX, cpumap kthread and "
                         "application receive time; the flows by rate with where their kernel "
                         "work and reader run, the CPU each takes, class, rate history, CPU-"
                         "seconds per GB and LLC misses, as the terminal's width allows. Keys: "
                         "r k a c sort (rate, kernel, app, class), / filter, i idle flows, p "
                         "pause, ? help, q quit. Off a terminal, one table per interval.")
    top.add_argument("--interval", type=_positive(), default=1.0, metavar="SECONDS",
                     help="refresh period (each view covers one period)")
    top.add_argument("--duration", type=_positive(), default=None, metavar="SECONDS",
                     help="quit after this long (default: run until Ctrl-C)")
    top.add_argument("--limit", type=_positive(int, 0), default=DEFAULT_LIMIT,
                     help="flows printed per interval off a terminal (on one, as many as fit)")
    view_options(top)
    _tracer_options(top)

    d = sub.add_parser("demo", formatter_class=fmt, help="the built-in lab with the live view",
                       description="Bring up the lab (two network namespaces on a veth pair, "
                       "198.18.0.0/15, iperf3 flows with different sender and receiver CPUs), show "
                       "the live view, print a summary, and tear everything down.")
    d.add_argument("--duration", type=_positive(), default=15.0, metavar="SECONDS",
                   help="traffic time (Ctrl-C stops earlier)")
    d.add_argument("--interval", type=_positive(), default=1.0, metavar="SECONDS",
                   help="refresh period of the live view")
    d.add_argument("--flow", action="append", metavar="KCPU:APPCPU", dest="flows",
                   help="a lab flow whose receive softirq runs on KCPU (the sender's CPU) and whose "
                        "reader is pinned to APPCPU; repeat for more flows (default: with A and B the "
                        "first two CPUs this process may run on, A:A, same core, and B:A, another "
                        "core)")
    d.add_argument("--json", action="store_true", help="print the final summary as JSON")
    view_options(d)
    _tracer_options(d)
    def steer_target(sp):
        sp.add_argument("--dev", required=True, metavar="IFACE", help="receiving interface")
        sp.add_argument("--netns", metavar="NAME",
                        help="network namespace of IFACE (a name under /run/netns, or a path)")

    pin = sub.add_parser("pin", formatter_class=fmt, help="steer flows to a CPU (XDP + cpumap)",
                         description="Redirect the flows matching FLOWSPEC, as they arrive on "
                         "IFACE, to CPU N, where the kernel's receive processing then runs. The "
                         "rule stays after the command exits, pinned under /sys/fs/bpf/steer, "
                         "until steer unpin or steer reset. Pinning a FLOWSPEC again moves it.")
    pin.add_argument("flowspec", metavar="FLOWSPEC",
                     help="comma-separated key=value from proto, src, sport, dst, dport, in the "
                          "receive direction (src = the sender); all five make an exact rule. "
                          "Example: proto=tcp,dport=5201")
    pin.add_argument("--cpu", required=True, type=int, help="target CPU (must be online)")
    steer_target(pin)
    pin.add_argument("--mode", choices=["auto", "generic", "native"], default="auto",
                     help="XDP attach mode; auto picks native where the driver has it, generic on "
                          "veth (native veth XDP drops locally generated packets unless the peer "
                          "has tx checksum offload off)")

    unpin = sub.add_parser("unpin", formatter_class=fmt, help="remove a steering rule",
                           description="Remove the rule of FLOWSPEC; with the last rule of a "
                           "device its XDP program is detached and its pins removed.")
    unpin.add_argument("flowspec", metavar="FLOWSPEC", help="as given to steer pin")
    steer_target(unpin)

    rules = sub.add_parser("rules", formatter_class=fmt, help="list pinned steering rules",
                           description="Every device with pinned steering: mode, rules with their "
                           "packet and byte counters, and the passed/unparsed/redirect counters.")
    rules.add_argument("--json", action="store_true", help="JSON instead of a table")

    app = sub.add_parser("app", formatter_class=fmt, help="pin an application to CPUs",
                         description="Set the CPU affinity of every thread of a process.")
    app.add_argument("--pid", required=True, type=int, help="process id")
    app.add_argument("--cpu", required=True, metavar="LIST", help="CPU list, e.g. 2 or 2-3,6")

    irq = sub.add_parser("irq", formatter_class=fmt, help="point a device's receive IRQs at CPUs",
                         description="Write smp_affinity_list of the IRQs of IFACE that serve "
                         "receive (RX or combined queues; TX-only and control vectors stay), or of "
                         "one RX queue's IRQ. The IRQ's CPU is where the driver's NAPI poll, and "
                         "so the flows' receive softirq, runs, unless RPS or threaded NAPI move it "
                         "on. The old values are kept in /run/steer and restored by steer reset. "
                         "irqbalance, where it runs, moves IRQs back: stop it first.")
    irq.add_argument("--dev", required=True, metavar="IFACE", help="the device whose IRQs move")
    irq.add_argument("--queue", type=int, metavar="N",
                     help="only the IRQ of RX queue N (a flow's queue: steer flows --json, rx.queue)")
    irq.add_argument("--cpu", required=True, metavar="LIST", help="CPU list")

    rps = sub.add_parser("rps", formatter_class=fmt, help="set RPS CPUs of a device",
                         description="Write rps_cpus of every RX queue of IFACE. The old values "
                         "are restored by steer reset.")
    steer_target(rps)
    rps.add_argument("--cpu", required=True, metavar="LIST", help="CPU list")

    auto = sub.add_parser("auto", formatter_class=fmt, help="steer flows by a policy, continuously",
                          description="Every INTERVAL, trace the flows, ask the policy where each "
                          "should be processed, and move the ones it wants elsewhere (exact XDP "
                          "rules on IFACE). A move needs the same answer CONFIRM times in a row "
                          "and HOLD seconds since the flow's last move. Every change is logged. "
                          "The rules live as long as this process: Ctrl-C or kill removes them.")
    auto.add_argument("--policy", default="llc-peer", metavar="NAME|FILE",
                      help="llc-peer, same-core, spread, static:FILE.toml (or FILE.toml), or "
                           "FILE.py defining place(snapshot, topology)")
    steer_target(auto)
    auto.add_argument("--interval", type=_positive(), default=2.0, metavar="SECONDS",
                      help="how often the flows are traced and the policy asked")
    auto.add_argument("--duration", type=_positive(), default=None, metavar="SECONDS",
                      help="stop after this long (default: until Ctrl-C)")
    auto.add_argument("--confirm", type=_positive(int, 0), default=2, metavar="N",
                      help="intervals in a row a move must be asked for")
    auto.add_argument("--hold", type=float, default=10.0, metavar="SECONDS",
                      help="minimum time between two moves of one flow")
    auto.add_argument("--min-rate", type=float, default=1e6, metavar="BPS",
                      help="flows slower than this (bit/s) are left alone")
    auto.add_argument("--dry-run", action="store_true", help="log the changes, make none")
    auto.add_argument("--log-format", choices=list(LOG_FORMATS), default="text",
                      help="the log on stderr: text (a UTC timestamp, then the line) or json (one "
                           "object per line: time, level, msg, and for a move flow, old_cpu, "
                           "new_cpu, reason, dry_run)")
    auto.add_argument("--mode", choices=["auto", "generic", "native"], default="auto",
                      help="XDP attach mode, as for steer pin")
    _tracer_options(auto)

    auto.add_argument("--listen", metavar="HOST:PORT",
                      help="also serve Prometheus metrics here, with steer_auto_moves_total "
                           "(:PORT: every address)")
    auto.add_argument("--top-k", type=_positive(int, 0), default=DEFAULT_TOP_K,
                      help="per-flow series with --listen")
    auto.add_argument("--flow-labels", choices=list(FLOW_LABEL_SETS), default=DEFAULT_FLOW_LABELS,
                      help="labels of the per-flow series with --listen (see steer export)")

    ex = sub.add_parser("export", formatter_class=fmt, help="Prometheus exporter",
                        description="Serve Prometheus metrics, read from the BPF maps at every "
                        "scrape: per-class and per-CPU totals, the top-K flows, steering rule "
                        "counters, tracer health and capabilities. Listens on loopback unless "
                        "another address is given.")
    ex.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                    help="address to serve /metrics on; :PORT listens on every address (IPv6 "
                         "and IPv4), as Go exporters do (default %(default)s)")
    ex.add_argument("--top-k", type=_positive(int, 0), default=DEFAULT_TOP_K, metavar="K",
                    help="flows (by rate) that get per-flow series")
    ex.add_argument("--flow-labels", choices=list(FLOW_LABEL_SETS), default=DEFAULT_FLOW_LABELS,
                    help="labels of the per-flow series: five-tuple (a series per connection), or "
                         "service (proto, dst, dport: the connections to one local port summed, and "
                         "the replies this host gets as a client summed under "
                         "dport=\"ephemeral\", so that series do not come and go with every "
                         "connection)")
    ex.add_argument("--duration", type=_positive(), default=None, metavar="SECONDS",
                    help="stop after this long (default: until Ctrl-C or SIGTERM)")
    ex.add_argument("--keep-privileges", action="store_true",
                    help="keep the process's capabilities after start-up (by default it drops "
                         "them all once its programs are loaded and its port is bound)")
    _tracer_options(ex)

    sw = sub.add_parser("sweep", formatter_class=fmt, help="the papers' affinity matrix, measured",
                        description="For every (kernel CPU, app CPU) pair of --cpus: move the flow's "
                        "kernel receive processing, pin the reader, run traffic, and record "
                        "throughput, CPU-seconds per GB on each side, LLC misses where a PMU "
                        "exists, and the class. Writes results.json, results.csv, PNG and SVG "
                        "figures and report.md to --out. Ctrl-C keeps the finished cells; "
                        "--resume continues. Without --dev the built-in lab makes the traffic.")
    sw.add_argument("--out", required=True, metavar="DIR", help="output directory")
    sw.add_argument("--cpus", metavar="LIST",
                    help="CPUs to sweep (default: every online CPU this process may run on)")
    sw.add_argument("--seconds", type=_positive(), default=None,
                    help="traffic per run (default: 5, or 30 with --paper)")
    sw.add_argument("--repeat", type=_positive(int, 0), default=None,
                    help="runs per cell, the median kept (default: 1, or 3 with --paper)")
    sw.add_argument("--paper", action="store_true",
                    help="the papers' method where the lab can follow it: one flow, iperf3 -Z "
                         "(the sender copies nothing), the first 2 s of each run left out (-O, "
                         "and by the tracer), 30 s runs, 3 per cell, the sender pinned to a CPU "
                         "outside the swept pair where there is one; the report names it. On a "
                         "real host, run length and repeats (the client is yours to start)")
    sw.add_argument("--resume", action="store_true", help="continue the sweep in --out")
    sw.add_argument("--method", choices=["rps", "xdp", "irq"], default=None,
                    help="how the kernel side is moved. irq (with --dev): the papers' way, the "
                         "NIC's receive IRQs pointed at the kernel CPU, where the driver's NAPI "
                         "poll then runs (needs irqbalance stopped, RPS and threaded NAPI off; "
                         "the IRQs are put back after). xdp (--dev default): XDP cpumap steering "
                         "of the flow. rps (the lab's only way: its veth has no IRQ): RPS on the "
                         "receiving veth")
    sw.add_argument("--dev", metavar="IFACE", help="sweep a real host: the receiving interface")
    sw.add_argument("--netns", metavar="NAME", help="network namespace of --dev")
    sw.add_argument("--server-cmd", metavar="CMD",
                    help="with --dev: the receiver to start and pin, e.g. 'iperf3 -s -p 5201'; "
                         "a client on another host must send to it for the whole sweep")
    sw.add_argument("--port", type=int, default=5201, help="TCP port of the swept flow")
    sw.add_argument("--flows", type=_flow_counts, default=[1], metavar="N[,N...]",
                    help="parallel flows per cell, each count a matrix of its own (lab only; "
                         "flow i on --port + i): all are steered to the cell's kernel CPU and read "
                         "on its app CPU, as Cai et al. measure 1, 8, 16 and 24 flows per core")
    sw.add_argument("--pause", type=_pause_values, default=None, metavar="on,off",
                    help="sweep the receiving NIC's Ethernet flow control (pause frames, rx and "
                         "tx together), as the NDM'13 follow-up did: every cell under each value, "
                         "in the order given (with --dev, on a NIC that has pause frames; the "
                         "lab's veth has none). The NIC is put back as found after")
    sw.add_argument("--offloads", type=_offload_settings, default=None,
                    metavar="F=on|off[+F=on|off][,...]",
                    help="sweep the receiving device's offloads: each comma-separated setting "
                         "names features of gro, gro-hw, lro, tso, gso (gro=on,gro=off; "
                         "gro=on+lro=on,gro=off+lro=off) and every cell is measured under each, "
                         "in the order given; features a setting does not name stay as found, "
                         "and all are put back after. In the lab the sender's TSO is then off, "
                         "so that packets arrive wire-sized, as from a NIC")
    sw.add_argument("--profile", action="store_true",
                    help="also say where each cell's CPU went, by category (steer profile at "
                         "999 Hz, beside the tracer): cells carry profile.kernel and profile.app "
                         "shares and the report a table. Profiling costs throughput (about 8%% "
                         "of a bulk flow here), so compare profiled sweeps with each other")
    # an experiment, not an always-on watch: it wants exact per-cell times and the stack CPU
    _tracer_options(sw, timing="exact")

    pr = sub.add_parser("profile", formatter_class=fmt,
                        help="where each flow's receive CPU goes, by category",
                        description="Sample every CPU's kernel stack for DURATION seconds (a "
                        "cpu-clock event: no PMU needed) and charge each sample that receive work "
                        "took to the flow and side it worked for (the kernel's receive "
                        "processing, or the reader inside its receive call) and to a category of "
                        "Cai et al. (SIGCOMM'21) by the kernel function it landed in: data copy, "
                        "TCP/IP, netdevice, skb management, memory, lock, scheduling, other. The "
                        "table shows each side's split in percent; --json gives seconds. Needs "
                        "root (CAP_BPF, CAP_PERFMON, CAP_SYSLOG for the addresses in "
                        "/proc/kallsyms).")
    pr.add_argument("--duration", type=_positive(), default=5.0, metavar="SECONDS",
                    help="length of the window")
    pr.add_argument("--frequency", type=_bounded_int(1, MAX_SAMPLE_HZ),
                    default=DEFAULT_PROFILE_HZ, metavar="HZ",
                    help="samples per second per busy CPU: a side's split is from its samples "
                         "(a share p out of n samples is good to about sqrt(p(1-p)/n)), and more "
                         "cost more (docs/performance.md)")
    pr.add_argument("--json", action="store_true", help="JSON for scripts instead of a table")
    pr.add_argument("--svg", metavar="FILE",
                    help="also draw the split as stacked bars, one per flow and side (needs "
                         "matplotlib)")
    pr.add_argument("--limit", type=_positive(int, 0), default=20, help="flows in the table")
    pr.add_argument("--max-flows", type=_positive(int, 0), default=DEFAULT_MAX_FLOWS, metavar="N",
                    help="bound of the kernel flow map, in (flow, CPU) entries")
    pr.add_argument("--btf", metavar="FILE",
                    help="kernel BTF for CO-RE relocations, for kernels without "
                         "/sys/kernel/btf/vmlinux (default: the running kernel's)")

    ck = sub.add_parser("check", formatter_class=fmt,
                        help="what this kernel lets steer measure, tried, and what to change",
                        description="Load and attach each timing mode and receive hook as the "
                        "commands would (then detach them: nothing stays attached), open the PMU "
                        "events and the steering program, and print per figure whether it works, "
                        "is degraded or is missing on this host, why, and what would change it; "
                        "then every BPF program and whether the kernel runs it. Exit status 0 "
                        "when the default mode runs here, 1 when not even its core loads.")
    ck.add_argument("--json", action="store_true", help="the report as JSON, for fleets")

    sub.add_parser("reset", formatter_class=fmt, help="remove everything steer left in the kernel",
                   description="Detach and unpin every pinned steering program, restore IRQ and "
                   "RPS settings steer changed, and remove lab namespaces of dead processes.")

    comp = sub.add_parser("completion", formatter_class=fmt, help="shell completion script",
                          description="Print a completion script for SHELL, generated from this "
                          "parser: commands, options, and the values of options with choices, "
                          "files, devices or namespaces. Install it with: steer completion bash "
                          "> /usr/share/bash-completion/completions/steer")
    comp.add_argument("shell", choices=["bash"], help="the shell")
    sub.add_parser("manpage", formatter_class=fmt, help="the steer(1) man page",
                   description="Print steer(1), generated from this parser (every command and "
                   "option as --help gives them, exit codes, files). Read it with: steer manpage "
                   "| man -l -")
    return p


# -- commands ----------------------------------------------------------------------------------
def cmd_topology(args) -> int:
    from rich.console import Console
    from steer.model.topology import read_topology
    from steer.present.view import topology_table
    try:
        topo = read_topology(args.sysfs)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read the CPU topology under {args.sysfs}: {e}") from None
    if args.json:
        print(json.dumps(topo.as_dict(), indent=2))
        return 0
    Console().print(topology_table(topo))
    return 0


def _check_tracer_options(args) -> None:
    """What argparse cannot see: tracer options that do not go together."""
    if getattr(args, "app_hook", None) == "counters" and getattr(args, "timing", None) == "exact":
        raise UsageError("--app-hook counters needs --timing sampled: exact timing brackets each "
                         "receive call, which takes a program per read")


def _start_tracer(args):
    from steer.trace.tracer import Tracer
    return Tracer(max_flows=args.max_flows, counters=args.counters, btf=args.btf,
                  idle_timeout=args.idle_timeout, app_hook=args.app_hook, timing=args.timing,
                  sample_hz=args.sample_hz).start()


def cmd_flows(args) -> int:
    from steer.model.flows import attach_devices, build_snapshot
    from steer.trace.netdevs import DeviceResolver
    from steer.model.topology import read_topology
    from steer.present.live import make_console
    from steer.present.view import render
    topo = read_topology()
    tracer = _start_tracer(args)
    try:
        before = tracer.sample()
        time.sleep(args.duration)
        snap = build_snapshot(before, tracer.sample(), topo, tracer.capabilities)
    finally:
        tracer.stop()
    snap = attach_devices(snap, topo, DeviceResolver())
    if args.json:
        print(json.dumps(snap.as_json(), indent=2))
    else:
        console = make_console()
        console.print(render(snap, topo, args.limit, console.width, _view_state(args)))
    return 0


def _view_state(args):
    from steer.present.view import ViewState
    return ViewState(sort=args.sort, min_rate=args.min_rate, show_idle=args.all)


def _need_matplotlib(what: str) -> None:
    try:
        import matplotlib  # noqa: F401  (an extra: the rest of steer runs without it)
    except ImportError:
        raise UserError(f"{what} draws its figures with matplotlib, which is not installed: "
                        "pip install 'steer[sweep]' (Debian: apt-get install "
                        "python3-matplotlib)") from None


def _start_profiler(args, hz: int):
    """The sampled tracer with profiling on, at HZ per CPU: steer profile's, and the one a
    profiled sweep runs beside its tracer."""
    from steer.trace.tracer import Tracer
    return Tracer(max_flows=args.max_flows, btf=args.btf, timing="sampled", sample_hz=hz,
                  counters="off", profile=True).start()


def cmd_profile(args) -> int:
    from steer.present.live import make_console
    from steer.present.profile_view import render_table, write_svg
    from steer.trace.profile import run_profile
    if args.svg:
        _need_matplotlib("steer profile --svg")
    tracer = _start_profiler(args, args.frequency)
    try:
        prof = run_profile(tracer, lambda: time.sleep(args.duration))
    finally:
        tracer.stop()
    if args.svg:
        write_svg(prof, args.svg)
    if args.json:
        print(json.dumps(prof.as_json(), indent=2))
    else:
        console = make_console()
        console.print(render_table(prof, args.limit))
        if args.svg:
            console.print(f"wrote {args.svg}")
    return 0


def cmd_top(args) -> int:
    from steer.model.flows import Intervals
    from steer.model.topology import read_topology
    from steer.present.live import run_live
    topo = read_topology()
    tracer = _start_tracer(args)
    try:
        run_live(Intervals(tracer, topo, smooth=True), topo, interval=args.interval,
                 duration=args.duration,
                 limit=args.limit, state=_view_state(args))
    except KeyboardInterrupt:
        pass
    finally:
        tracer.stop()
    return 0


def _parse_lab_flows(specs: list[str] | None):
    from steer.experiment.lab import LabFlow, default_flows
    if not specs:
        return default_flows()
    out = []
    for s in specs:
        k, sep, a = s.partition(":")
        if not sep or not k.strip().isdigit() or not a.strip().isdigit():
            raise UsageError(f"--flow {s!r}: expected KCPU:APPCPU, two CPU numbers such as 0:1")
        out.append(LabFlow(int(k), int(a)))
    return out


def cmd_demo(args) -> int:
    from steer.model.flows import Intervals
    from steer.experiment.lab import Lab, traced_results
    from steer.model.topology import read_topology
    from steer.present.live import make_console, run_live
    from steer.present.view import render
    topo = read_topology()
    flows = _parse_lab_flows(args.flows)
    for f in flows:
        for c in (f.kernel_cpu, f.app_cpu):
            try:
                topo.check_online(c)
            except ValueError as e:
                raise UserError(f"--flow {f.kernel_cpu}:{f.app_cpu}: {e}") from None
        _check_usable((f.kernel_cpu, f.app_cpu), f"--flow {f.kernel_cpu}:{f.app_cpu}")
    console = make_console(stderr=args.json)
    tracer = _start_tracer(args)
    lab = Lab(flows, seconds=args.duration)
    interrupted = False
    try:
        lab.up()
        lab.start_servers()
        interval = Intervals(tracer, topo, smooth=True)
        lab.start_clients()
        console.print(f"[bold]steer demo[/]: {len(flows)} iperf3 flow(s) for {args.duration:g} s "
                      f"between namespaces {lab.tx} and {lab.rx} (198.18.0.0/30); Ctrl-C stops")
        try:
            # q in the live view stops the demo as Ctrl-C does
            interrupted = run_live(interval, topo, interval=args.interval,
                                   duration=args.duration + 0.5, console=console,
                                   keep_going=lab.running, state=_view_state(args))
        except KeyboardInterrupt:
            interrupted = True
        interval()
        results = lab.wait(timeout=5) if not interrupted else []
        total = interval.total()
    finally:
        lab.down()
        tracer.stop()
    summary = traced_results(results, total)
    if args.json:
        print(json.dumps({"interrupted": interrupted, "flows": summary,
                          "snapshot": total.as_json()}, indent=2))
        return 0
    console.rule("summary over the whole run")
    console.print(render(total, topo, width=console.width, state=_view_state(args)))
    for s in summary:
        t = s["traced"]
        if t:
            read = "the reader's bytes not counted here (steer check)" \
                if t["app_bytes"] is None else f"{t['app_bytes']:,} B read"
            console.print(f"lab flow {s['lab_kernel_cpu']}:{s['lab_app_cpu']} (port {s['port']}): "
                          f"iperf3 received {s['iperf3_received_bytes']:,} B, steer saw "
                          f"{t['rx_bytes']:,} B in the kernel and {read}; "
                          f"kernel CPU {t['kernel_cpu']}, app CPU {t['app_cpu']}: {t['class']}")
        else:
            console.print(f"lab flow {s['lab_kernel_cpu']}:{s['lab_app_cpu']}: {s['error']}")
    if interrupted:
        console.print("interrupted: lab torn down")
    return 0


def _cpus_online(text: str, what: str = "--cpu") -> list[int]:
    from steer.model.topology import parse_cpulist, read_topology
    try:
        cpus = parse_cpulist(text)
    except ValueError as e:
        raise UsageError(f"{what}: {e}") from None
    if not cpus:
        raise UsageError(f"{what}: no CPU given")
    topo = read_topology()
    for c in cpus:
        try:
            topo.check_online(c)
        except ValueError as e:
            raise UserError(f"{what}: {e}") from None
    return cpus


def _check_usable(cpus, what: str) -> None:
    """The lab and the sweep start their processes on these CPUs: refuse, before anything is set
    up, the ones this process may not run on (taskset or a cgroup cpuset can exclude online CPUs)."""
    from steer.experiment.lab import usable_cpus
    from steer.model.topology import format_cpulist
    usable = usable_cpus()
    for c in cpus:
        if c not in usable:
            raise UserError(f"{what}: CPU {c} is not usable by this process, which may run on CPUs "
                            f"{format_cpulist(usable)} (taskset or cgroup cpuset)")


def _spec(text: str):
    from steer.model.flowspec import FlowSpec, FlowSpecError
    try:
        return FlowSpec.parse(text)
    except FlowSpecError as e:
        raise UsageError(f"FLOWSPEC {text!r}: {e}") from None


def cmd_pin(args) -> int:
    from steer.steering.xdp import XdpSteering
    spec = _spec(args.flowspec)
    (cpu,) = _cpus_online(str(args.cpu))
    st = XdpSteering(args.dev, args.netns, mode=args.mode).open(reattach=True)
    try:
        where = f"{args.dev}" + (f" in {args.netns}" if args.netns else "")
        _say_reattached(st, where)
        old, rid = st.pin(spec, cpu)
        moved = f" (was CPU {old})" if old is not None and old != cpu else ""
        print(f"pinned {spec} on {where} to CPU {cpu}{moved}: rule {rid}, {st.attached_mode} XDP")
    finally:
        st.close()
    return 0


def _say_reattached(st, where: str) -> None:
    if st.reattached:
        gone, n = st.reattached
        print(f"{where} is a new device since its rules were pinned ({gone}): {st.attached_mode} "
              f"XDP attached to it, {n} earlier rule(s) kept")


def cmd_unpin(args) -> int:
    from steer.steering.xdp import DeviceGone, XdpSteering, has_pins
    spec = _spec(args.flowspec)
    if not has_pins(args.dev, args.netns):
        raise UserError(f"no pinned steering on {args.dev}" + (f" in {args.netns}" if args.netns else ""))
    try:   # rules whose device was recreated apply to the new one, as steer pin does
        st = XdpSteering(args.dev, args.netns).open(reattach=True)
    except DeviceGone:   # no device of that name now: the rule goes from the pins all the same
        st = XdpSteering(args.dev, args.netns).open()
    try:
        _say_reattached(st, args.dev + (f" in {args.netns}" if args.netns else ""))
        cpu = st.unpin(spec)
        left = st.rules()
        if not left:
            st.detach()
    finally:
        st.close()
    print(f"unpinned {spec} (was CPU {cpu})" + ("; no rules left: XDP detached" if not left else ""))
    return 0


def cmd_rules(args) -> int:
    from steer.steering.xdp import pinned_state, require_steering_caps
    from steer.model.topology import online_cpus
    from steer.present.view import rules_lines
    require_steering_caps()
    out = pinned_state()
    if args.json:
        print(json.dumps({"devices": [d.as_json() for d in out]}, indent=2))
        return 0
    print("\n".join(rules_lines(out, set(online_cpus()))))
    return 0


def cmd_app(args) -> int:
    from steer.steering.affinity import set_app_affinity
    cpus = _cpus_online(args.cpu)
    before = set_app_affinity(args.pid, set(cpus))
    from steer.model.topology import format_cpulist
    olds = {format_cpulist(v) for v in before.values()}
    print(f"pid {args.pid}: {len(before)} thread(s) now on CPU {format_cpulist(cpus)} "
          f"(were on {', '.join(sorted(olds))})")
    return 0


def cmd_irq(args) -> int:
    from steer.steering.affinity import receive_irqs, set_irq_affinity
    from steer.kernel.privileges import CAP_SYS_ADMIN, require_caps
    from steer.model.topology import format_cpulist
    cpus = _cpus_online(args.cpu)   # a bad argument is exit 2 whoever runs it
    if args.queue is not None and args.queue < 0:
        raise UsageError(f"--queue {args.queue}: a queue number is 0 or more")
    require_caps([CAP_SYS_ADMIN], "changing IRQ affinity")
    irqs = receive_irqs(args.dev, queue=args.queue)
    before = set_irq_affinity(irqs, cpus)
    print(f"{args.dev}: IRQ{'s' if len(irqs) > 1 else ''} "
          f"{', '.join(f'{i.irq} ({i.name})' if i.name else str(i.irq) for i in irqs)} now on CPU "
          f"{format_cpulist(cpus)} (were on {', '.join(sorted(set(before.values())))})")
    return 0


def cmd_rps(args) -> int:
    from steer.steering.affinity import set_rps
    from steer.kernel.privileges import CAP_SYS_ADMIN, require_caps
    cpus = _cpus_online(args.cpu)   # a bad argument is exit 2 whoever runs it
    require_caps([CAP_SYS_ADMIN], "changing RPS")
    before = set_rps(args.dev, cpus, args.netns)
    print(f"{args.dev}: RPS of {', '.join(sorted(before))} now CPU {args.cpu}")
    return 0


def cmd_auto(args) -> int:
    from steer.steering import auto
    from steer.model.flows import Intervals
    from steer.cli.logs import make_logger
    from steer.steering.policies import PolicyError, load_policy
    from steer.steering.xdp import XdpSteering
    from steer.model.topology import read_topology
    if args.listen:
        from steer.present.exporter import parse_listen
        try:
            parse_listen(args.listen)
        except ValueError as e:
            raise UsageError(str(e)) from None
    try:
        name, policy = load_policy(args.policy, args.min_rate)
    except PolicyError as e:
        raise UserError(str(e)) from None
    log = make_logger(args.log_format)
    topo = read_topology()
    steering = None if args.dry_run else XdpSteering(args.dev, args.netns, mode=args.mode,
                                                      pinned=False).open()
    tracer = None
    try:
        from steer.trace.netdevs import DeviceResolver
        tracer = _start_tracer(args)
        intervals = Intervals(tracer, topo, devices=DeviceResolver())
        engine = auto.AutoSteer(policy, steering, topo, confirm=args.confirm, hold=args.hold,
                                log=log)
        if args.listen:
            from steer.present.exporter import SteerCollector
            _serve(SteerCollector(tracer, topo, top_k=args.top_k, flow_labels=args.flow_labels,
                                  steering=lambda: [steering.state()] if steering else [],
                                  actions=lambda: {name: engine.moves}), args.listen)
        mode = "dry run" if steering is None else f"{steering.attached_mode} XDP on {args.dev}"
        log(f"steer auto: policy {name}, every {args.interval:g} s, {mode}")
        auto.run(engine, intervals, period=args.interval, duration=args.duration,
                 detached=steering.detached if steering else lambda: None)
    except auto.AutoStopped as e:
        raise UserError(str(e)) from None
    finally:
        if tracer:
            tracer.stop()
        if steering:
            steering.close()
    log(f"steer auto: stopped; {len(engine.placed) if tracer else 0} rule(s) removed with it")
    return 0


def _serve(collector, listen):
    from steer.present.exporter import serve
    try:
        return serve(collector, listen)
    except ValueError as e:
        raise UserError(str(e)) from None


def cmd_export(args) -> int:
    from steer.present.exporter import SteerCollector, parse_listen
    from steer.steering.xdp import pinned_state
    from steer.model.topology import read_topology
    try:
        parse_listen(args.listen)
    except ValueError as e:
        raise UsageError(str(e)) from None
    topo = read_topology()
    tracer = _start_tracer(args)
    try:
        collector = SteerCollector(tracer, topo, top_k=args.top_k, steering=pinned_state,
                                   flow_labels=args.flow_labels)
        _serve(collector, args.listen)
        if not args.keep_privileges:
            # everything that needs a capability is done: the programs are loaded and attached,
            # the maps and counters open, the port bound; scrapes only read through those fds
            from steer.kernel.gateway import drop_all_capabilities
            drop_all_capabilities()
        print(f"steer export: serving http://{args.listen}/metrics", flush=True)
        end = None if args.duration is None else time.monotonic() + args.duration
        try:
            while end is None or time.monotonic() < end:
                time.sleep(0.2)
        except KeyboardInterrupt:
            pass
    finally:
        tracer.stop()
    return 0


def cmd_sweep(args) -> int:
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    from steer.experiment.sweep import (SweepConfig, SweepError, SweepStopped, cells_of, describe, run_sweep,
                                        write_outputs)
    from steer.model.topology import read_topology
    topo = read_topology()
    if args.cpus:
        cpus = _cpus_online(args.cpus, "--cpus")
        _check_usable(cpus, "--cpus")
    else:
        from steer.experiment.lab import usable_cpus
        cpus = [c for c in topo.online if c in usable_cpus()]
    if bool(args.dev) != bool(args.server_cmd):
        raise UsageError("--dev and --server-cmd go together: a real host needs its receiver command")
    if args.dev and args.method == "rps":
        raise UsageError("--method rps is for the lab; a real host is swept with --method irq "
                         "or xdp")
    if not args.dev and args.method == "irq":
        raise UsageError("--method irq moves the receiving NIC's IRQs, and the lab's veth has "
                         "none: give --dev IFACE --server-cmd CMD, or use --method rps in the lab")
    if not 0 < args.port < 65536:
        raise UsageError(f"--port {args.port}: not a port number")
    if args.dev and args.flows != [1]:
        raise UsageError("--flows is for the lab; on a real host the client decides how many flows")
    if args.paper and args.flows != [1]:
        raise UsageError("--paper measures one flow per cell, as the papers did: drop --flows")
    from steer.experiment.report import PAPER_PRESET
    from steer.experiment.sweep import paper_sender_cpu
    seconds = args.seconds or (PAPER_PRESET["seconds"] if args.paper else 5.0)
    repeat = args.repeat or (PAPER_PRESET["repeat"] if args.paper else 1)
    sender = None
    if args.paper and not args.dev:
        from steer.experiment.lab import usable_cpus
        sender = paper_sender_cpu(cpus, usable_cpus())
    if args.pause and not args.dev:
        raise UsageError("--pause switches a NIC's Ethernet flow control, and the lab's veth has "
                         "none: give --dev IFACE --server-cmd CMD")
    if args.port + max(args.flows) - 1 > 65535:
        raise UsageError(f"--port {args.port} with --flows {max(args.flows)}: ports past 65535")
    _need_matplotlib("steer sweep")
    cfg = SweepConfig(cpus=cpus, seconds=seconds, repeat=repeat,
                      method=args.method or ("xdp" if args.dev else "rps"),
                      mode="host" if args.dev else "lab", dev=args.dev, netns=args.netns,
                      server_cmd=args.server_cmd, port=args.port, flows=args.flows,
                      profile=args.profile, paper=args.paper, sender_cpu=sender,
                      pause=args.pause, offloads=args.offloads)
    if os.path.exists(os.path.join(args.out, "results.json")) and not args.resume:
        raise UserError(f"{args.out} already holds a sweep: --resume continues it, or choose "
                        "another --out")
    from steer.present.live import make_console
    console = make_console()
    stop = _GracefulStop(console, "stopping after tearing down the run under way (Ctrl-C again "
                                  "to stop at once)")
    tracer = _start_tracer(args)
    profiler = None
    interrupted = False
    try:
        if args.profile:
            from steer.trace.profile import DEFAULT_FREQUENCY
            profiler = _start_profiler(args, DEFAULT_FREQUENCY)
        console.print(f"steer sweep: {describe(cfg)}")
        with stop, Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                            console=console) as progress:
            try:
                results = run_sweep(cfg, args.out, tracer, topo, resume=args.resume,
                                    progress=progress, should_stop=stop.requested,
                                    profiler=profiler)
            except (SweepStopped, KeyboardInterrupt):
                interrupted = True
    except SweepError as e:
        raise UserError(str(e)) from None
    finally:
        if profiler:
            profiler.stop()
        tracer.stop()
    if interrupted:
        if not os.path.exists(os.path.join(args.out, "results.json")):
            console.print("interrupted before the first cell: nothing to keep")
            return interrupted_status()
        with open(os.path.join(args.out, "results.json")) as f:
            results = json.load(f)
    files = write_outputs(results, args.out, topo)
    done = len(results["cells"])
    if interrupted:
        console.print(f"interrupted after {done} of {len(cells_of(cfg))} cells; the lab is torn down. "
                      f"`steer sweep --resume --out {args.out}` with the same options continues.")
        return interrupted_status()
    console.print(f"wrote {len(files)} files to {args.out}: " + ", ".join(os.path.basename(f) for f in files))
    return 0


class _GracefulStop:
    """While active: the first Ctrl-C or SIGTERM asks to stop at the next safe point, a second
    Ctrl-C interrupts at once."""

    def __init__(self, console, message: str):
        self.console, self.message, self._asked = console, message, False

    def requested(self) -> bool:
        return self._asked

    def _handler(self, signum, frame):
        _STOP_SIGNAL[0] = signum
        if self._asked and signum == signal.SIGINT:
            interrupt(frame)   # raises, or holds it for when libbpf returns
            return
        self._asked = True
        self.console.print(self.message)

    def __enter__(self):
        self._old = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc):
        for s, h in self._old.items():
            signal.signal(s, h)


def cmd_reset(args) -> int:
    from steer.steering.affinity import restore
    from steer.experiment.lab import remove_stale_labs
    from steer.steering.xdp import remove_pinned, require_steering_caps
    require_steering_caps()
    done = remove_pinned() + restore()
    done += [f"removed stale lab namespace {n}" for n in remove_stale_labs()]
    print("\n".join(done) if done else "nothing to reset")
    return 0


def cmd_check(args) -> int:
    import shutil
    from steer.trace.check import run_checks, text_lines
    report = run_checks()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print("\n".join(text_lines(report, max(60, shutil.get_terminal_size().columns))))
    if not report["default"]["runs"]:
        print(f"steer check: error: {report['default']['error']}", file=sys.stderr)
        return EXIT_ERROR
    return 0


def cmd_completion(args) -> int:
    from steer.cli.manual import bash_completion
    sys.stdout.write(bash_completion(build_parser()))
    return 0


def cmd_manpage(args) -> int:
    from steer.cli.manual import man_page
    sys.stdout.write(man_page(build_parser()))
    return 0


COMMANDS = {"topology": cmd_topology, "flows": cmd_flows, "top": cmd_top, "demo": cmd_demo,
            "pin": cmd_pin, "unpin": cmd_unpin, "rules": cmd_rules, "app": cmd_app,
            "irq": cmd_irq, "rps": cmd_rps, "auto": cmd_auto, "export": cmd_export, "sweep": cmd_sweep,
            "profile": cmd_profile, "check": cmd_check, "reset": cmd_reset, "completion": cmd_completion, "manpage": cmd_manpage}


_STOP_SIGNAL = [signal.SIGINT]   # the signal that last asked this process to stop


def _sigterm(signum, frame):
    _STOP_SIGNAL[0] = signum
    interrupt(frame)   # the same orderly teardown as Ctrl-C


def interrupted_status() -> int:
    """The exit status of a command stopped before it finished: 128 + the signal, as a shell
    reports a process that signal killed (130 for Ctrl-C, 143 for SIGTERM), after the same
    teardown either way. The commands that run until stopped (top, demo, auto, export) stop
    cleanly on either and exit 0."""
    return 128 + _STOP_SIGNAL[0]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:   # the handlers go in inside it: a stop from the first moment they are in ends here
        signal.signal(signal.SIGTERM, _sigterm)
        handle_sigint()
        return _run(args)
    except KeyboardInterrupt:
        return interrupted_status()
    except BrokenPipeError:
        return 0


def _run(args) -> int:
    from steer.kernel.gateway import KernelError
    from steer.experiment.lab import LabError
    from steer.steering.xdp import SteerError
    from steer.kernel.privileges import PrivilegeError
    from steer.trace.tracer import TracerError
    try:
        _check_tracer_options(args)
        return COMMANDS[args.command](args)
    except UsageError as e:
        print(f"steer {args.command}: error: {e} (see steer {args.command} --help)", file=sys.stderr)
        return EXIT_USAGE
    except (UserError, PrivilegeError, TracerError, KernelError, LabError, SteerError) as e:
        print(f"steer {args.command}: error: {e}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
