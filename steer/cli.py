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

from . import __version__

EXIT_ERROR, EXIT_USAGE = 1, 2


class UserError(Exception):
    """Something the user can fix; shown as one line."""


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


def _tracer_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("tracer")
    g.add_argument("--max-flows", type=_positive(int, 0), default=16384, metavar="N",
                   help="bound of the kernel flow map, in (flow, CPU) entries; the least recently "
                        "used are evicted beyond it, and counted (default: %(default)s)")
    g.add_argument("--llc-event", choices=["auto", "cache-misses", "cpu-clock", "off"],
                   default="auto",
                   help="counter for LLC misses: auto uses the hardware cache-misses event when "
                        "the host has a PMU and reports 'unavailable' otherwise; cpu-clock is a "
                        "software stand-in that checks the counter path on hosts without a PMU "
                        "(default: %(default)s)")
    g.add_argument("--btf", metavar="FILE",
                   help="kernel BTF for CO-RE relocations, for kernels without "
                        "/sys/kernel/btf/vmlinux (default: the running kernel's)")


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.ArgumentDefaultsHelpFormatter
    p = _Parser(
        prog="steer", description="Per-flow view of where receive work runs (kernel NET_RX and "
        "the reading application), its cost, and its affinity class.",
        epilog="Run 'steer COMMAND --help' for the options of each command.")
    p.add_argument("--version", action="version", version=f"steer {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)

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
    _tracer_options(f)

    top = sub.add_parser("top", formatter_class=fmt, help="live view of flows and CPUs",
                         description="Live view: flows by rate with kernel CPU, app CPU, class, "
                         "CPU-seconds per GB and LLC misses, and a per-CPU line. Ctrl-C quits.")
    top.add_argument("--interval", type=_positive(), default=1.0, metavar="SECONDS",
                     help="refresh period (each view covers one period)")
    top.add_argument("--duration", type=_positive(), default=None, metavar="SECONDS",
                     help="quit after this long (default: run until Ctrl-C)")
    top.add_argument("--limit", type=_positive(int, 0), default=20, help="flows shown")
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
                        "reader is pinned to APPCPU; repeat for more flows (default: 0:0 and 1:0, "
                        "one same-core flow and one on another core)")
    d.add_argument("--json", action="store_true", help="print the final summary as JSON")
    _tracer_options(d)
    return p


# -- commands ----------------------------------------------------------------------------------
def cmd_topology(args) -> int:
    from rich.console import Console
    from rich.table import Table
    from .topology import format_cpulist, read_topology
    try:
        topo = read_topology(args.sysfs)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read the CPU topology under {args.sysfs}: {e}") from None
    if args.json:
        print(json.dumps(topo.as_dict(), indent=2))
        return 0
    t = Table(title=f"{len(topo.cpus)} CPUs, {len(topo.sockets)} socket(s), LLC = L{topo.llc_level}",
              title_justify="left")
    for col in ("CPU", "core", "socket", "LLC", "NUMA", "SMT siblings", "LLC shared with", "online"):
        t.add_column(col, justify="right")
    dash = lambda v: "-" if v is None else str(v)  # noqa: E731
    for _, c in sorted(topo.cpus.items()):
        t.add_row(str(c.cpu), dash(c.core), dash(c.socket), dash(c.llc), dash(c.numa),
                  format_cpulist(c.siblings), format_cpulist(c.llc_cpus) or "-",
                  "yes" if c.online else "no")
    Console().print(t)
    return 0


def _start_tracer(args):
    from .tracer import Tracer
    return Tracer(max_flows=args.max_flows, llc_event=args.llc_event, btf=args.btf).start()


def cmd_flows(args) -> int:
    from .flows import build_snapshot
    from .topology import read_topology
    from .view import make_console, render
    topo = read_topology()
    tracer = _start_tracer(args)
    try:
        before = tracer.sample()
        time.sleep(args.duration)
        snap = build_snapshot(before, tracer.sample(), topo, tracer.capabilities)
    finally:
        tracer.stop()
    if args.json:
        print(json.dumps(snap.as_json(), indent=2))
    else:
        make_console().print(render(snap, topo, args.limit))
    return 0


class _Interval:
    """Successive snapshots, each covering the time since the previous one."""

    def __init__(self, tracer, topo):
        from .flows import build_snapshot
        self._build, self.tracer, self.topo = build_snapshot, tracer, topo
        self.first = self.last = tracer.sample()

    def __call__(self):
        now = self.tracer.sample()
        snap = self._build(self.last, now, self.topo, self.tracer.capabilities)
        self.last = now
        return snap

    def total(self):
        return self._build(self.first, self.last, self.topo, self.tracer.capabilities)


def cmd_top(args) -> int:
    from .topology import read_topology
    from .view import run_live
    topo = read_topology()
    tracer = _start_tracer(args)
    try:
        run_live(_Interval(tracer, topo), topo, interval=args.interval, duration=args.duration,
                 limit=args.limit)
    except KeyboardInterrupt:
        pass
    finally:
        tracer.stop()
    return 0


def _parse_lab_flows(specs: list[str] | None):
    from .lab import LabFlow
    if not specs:
        ncpu = len(os.sched_getaffinity(0))
        return [LabFlow(0, 0), LabFlow(1, 0)] if ncpu > 1 else [LabFlow(0, 0)]
    out = []
    for s in specs:
        k, sep, a = s.partition(":")
        if not sep or not k.strip().isdigit() or not a.strip().isdigit():
            raise UserError(f"--flow {s!r}: expected KCPU:APPCPU, two CPU numbers such as 0:1")
        out.append(LabFlow(int(k), int(a)))
    return out


def cmd_demo(args) -> int:
    from .lab import Lab
    from .topology import read_topology
    from .view import make_console, render, run_live
    topo = read_topology()
    flows = _parse_lab_flows(args.flows)
    for f in flows:
        for c in (f.kernel_cpu, f.app_cpu):
            try:
                topo.check_online(c)
            except ValueError as e:
                raise UserError(f"--flow {f.kernel_cpu}:{f.app_cpu}: {e}") from None
    console = make_console(stderr=args.json)
    tracer = _start_tracer(args)
    lab = Lab(flows, seconds=args.duration)
    interrupted = False
    try:
        lab.up()
        lab.start_servers()
        interval = _Interval(tracer, topo)
        lab.start_clients()
        console.print(f"[bold]steer demo[/]: {len(flows)} iperf3 flow(s) for {args.duration:g} s "
                      f"between namespaces {lab.tx} and {lab.rx} (198.18.0.0/30); Ctrl-C stops")
        try:
            run_live(interval, topo, interval=args.interval, duration=args.duration + 0.5,
                     console=console, keep_going=lab.running)
        except KeyboardInterrupt:
            interrupted = True
        interval()
        results = lab.wait(timeout=5) if not interrupted else []
        total = interval.total()
    finally:
        lab.down()
        tracer.stop()
    summary = []
    for r in results:
        match = next((f for f in total.flows if f.flow.sport == r.sender_port
                      and f.flow.dport == r.flow.port), None)
        summary.append({
            "lab_kernel_cpu": r.flow.kernel_cpu, "lab_app_cpu": r.flow.app_cpu,
            "port": r.flow.port, "iperf3_received_bytes": r.received_bytes, "error": r.error,
            "traced": match.as_json() if match else None})
    if args.json:
        print(json.dumps({"interrupted": interrupted, "flows": summary,
                          "snapshot": total.as_json()}, indent=2))
        return 0
    console.rule("summary over the whole run")
    console.print(render(total, topo))
    for s in summary:
        t = s["traced"]
        if t:
            console.print(f"lab flow {s['lab_kernel_cpu']}:{s['lab_app_cpu']} (port {s['port']}): "
                          f"iperf3 received {s['iperf3_received_bytes']:,} B, steer saw "
                          f"{t['rx_bytes']:,} B in the kernel and {t['app_bytes']:,} B read; "
                          f"kernel CPU {t['kernel_cpu']}, app CPU {t['app_cpu']}: {t['class']}")
        else:
            console.print(f"lab flow {s['lab_kernel_cpu']}:{s['lab_app_cpu']}: {s['error']}")
    if interrupted:
        console.print("interrupted: lab torn down")
    return 0


COMMANDS = {"topology": cmd_topology, "flows": cmd_flows, "top": cmd_top, "demo": cmd_demo}


def _sigterm(signum, frame):
    raise KeyboardInterrupt   # the same orderly teardown as Ctrl-C


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _sigterm)
    from .kernel import KernelError
    from .lab import LabError
    from .tracer import TracerError
    try:
        return COMMANDS[args.command](args)
    except (UserError, TracerError, KernelError, LabError) as e:
        print(f"steer {args.command}: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
