"""Watching: the topology, one window of flows, the live view, the profile, steer check."""
from __future__ import annotations

import json
import sys
import time

from steer.cli.common import (EXIT_ERROR, MAX_INTERVAL, MAX_ROWS, UserError, bounded_int,
                              device_name, latency_option, need_matplotlib, netns_name, positive,
                              start_profiler, start_tracer, tracer_options, view_options,
                              view_state)


def add_parsers(sub, fmt) -> dict:
    """Adds this module's commands to SUB; returns {name: function}."""
    for add in (_add_topology, _add_flows, _add_top, _add_profile, _add_check):
        add(sub, fmt)
    return {"topology": cmd_topology, "flows": cmd_flows, "top": cmd_top, "profile": cmd_profile, "check": cmd_check}


def _add_topology(sub, fmt) -> None:
    t = sub.add_parser("topology", formatter_class=fmt, help="CPUs, cores, LLC domains, sockets",
                       description="Print the CPU topology steer classifies flows with.")
    t.add_argument("--json", action="store_true", help="JSON instead of a table")
    t.add_argument("--sysfs", metavar="ROOT", default="/sys", help="sysfs root to read (for inspecting a copy)")


def _add_flows(sub, fmt) -> None:
    f = sub.add_parser("flows", formatter_class=fmt, help="one snapshot of every flow over N seconds",
                       description="Trace for DURATION seconds, then print every TCP/UDP flow "
                       "received in that window: bytes, kernel and application CPU and time, "
                       "class. Needs root (CAP_BPF and CAP_PERFMON).")
    f.add_argument("--duration", type=positive(), default=5.0, metavar="SECONDS",
                   help="length of the window")
    f.add_argument("--json", action="store_true", help="JSON for scripts instead of a table")
    f.add_argument("--limit", metavar="N", type=positive(int, 0, MAX_ROWS), default=50, help="flows in the table")
    latency_option(f)
    view_options(f)
    tracer_options(f)


def _add_top(sub, fmt) -> None:
    from steer.defaults import DEFAULT_LIMIT
    top = sub.add_parser("top", formatter_class=fmt, help="live view of flows and CPUs",
                         description="Live view: per-CPU bars of NET_RX, cpumap kthread and "
                         "application receive time; the flows by rate with where their kernel "
                         "work and reader run, the CPU each takes, class, rate history, CPU-"
                         "seconds per GB and LLC misses, as the terminal's width allows. Keys: "
                         "r k a c w sort (rate, kernel, app, class, workload), / filter, i idle flows, p "
                         "pause, ? help, q quit. Off a terminal, one table per interval.")
    top.add_argument("--interval", type=positive(maximum=MAX_INTERVAL), default=1.0, metavar="SECONDS",
                     help="refresh period (each view covers one period)")
    top.add_argument("--duration", type=positive(), default=None, metavar="SECONDS",
                     help="quit after this long (default: run until Ctrl-C)")
    top.add_argument("--limit", metavar="N", type=positive(int, 0, MAX_ROWS), default=DEFAULT_LIMIT,
                     help="flows printed per interval off a terminal (on one, as many as fit)")
    latency_option(top)
    view_options(top)
    tracer_options(top)


def _add_profile(sub, fmt) -> None:
    from steer.defaults import DEFAULT_MAX_FLOWS, MAX_FLOWS_LIMIT, MAX_SAMPLE_HZ, PROFILE_HZ
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
    pr.add_argument("--duration", type=positive(), default=5.0, metavar="SECONDS",
                    help="length of the window")
    pr.add_argument("--sample-hz", "--frequency", dest="sample_hz",
                    type=bounded_int(1, MAX_SAMPLE_HZ), default=PROFILE_HZ, metavar="HZ",
                    help="samples per second per busy CPU (--frequency: the same)\n\n"
                         "samples per second per busy CPU, as --sample-hz of the other "
                         "commands (--frequency: the same): a side's split is from its "
                         "samples (a share p out of n samples is good to about "
                         "sqrt(p(1-p)/n)), and more cost more (docs/performance.md)")
    pr.add_argument("--json", action="store_true", help="JSON for scripts instead of a table")
    pr.add_argument("--svg", metavar="FILE",
                    help="also draw the split as stacked bars, one per flow and side (needs "
                         "matplotlib)")
    pr.add_argument("--limit", metavar="N", type=positive(int, 0, MAX_ROWS), default=20, help="flows in the table")
    pr.add_argument("--max-flows", type=bounded_int(1, MAX_FLOWS_LIMIT), default=DEFAULT_MAX_FLOWS, metavar="N",
                    help="bound of the kernel flow map, in (flow, CPU) entries")
    pr.add_argument("--btf", metavar="FILE",
                    help="kernel BTF for CO-RE relocations, for kernels without "
                         "/sys/kernel/btf/vmlinux (default: the running kernel's)")


def _add_check(sub, fmt) -> None:
    ck = sub.add_parser("check", formatter_class=fmt,
                        help="what this kernel lets steer measure, tried, and what to change",
                        description="Load and attach each timing mode and receive hook as the "
                        "commands would (then detach them: nothing stays attached), open the PMU "
                        "events and the steering program, and print per figure whether it works, "
                        "is degraded or is missing on this host, why, and what would change it; "
                        "then every BPF program and whether the kernel runs it. Exit status 0 "
                        "when the default mode runs here, 1 when not even its core loads.")
    ck.add_argument("--json", action="store_true", help="the report as JSON, for fleets")
    ck.add_argument("--dev", type=device_name, metavar="IFACE",
                    help="the device whose ways to move receive work are listed (default: "
                         "every device of this namespace backed by hardware)")
    ck.add_argument("--netns", type=netns_name, metavar="NAME",
                    help="network namespace of IFACE (a name under /run/netns, or a path)")


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


def cmd_flows(args) -> int:
    from steer.model.flows import build_snapshot
    from steer.model.reports import attach_devices, attach_workloads
    from steer.trace.workloads import WorkloadResolver
    from steer.trace.netdevs import DeviceResolver
    from steer.model.topology import read_topology
    from steer.present.live import make_console
    from steer.present.view import render
    from steer.model.latency import interval_delays
    from steer.model.reports import attach_delays
    from steer.present.latency_view import delays_table
    topo = read_topology()
    tracer = start_tracer(args)
    workloads = WorkloadResolver()
    lat0 = lat1 = None
    try:
        before = tracer.sample()
        began = time.time()
        lat0 = tracer.latency_totals() if args.latency else None
        workloads.prime()   # a container that ends within the window is still named
        time.sleep(args.duration)
        after = tracer.sample()
        ended = time.time()
        snap = build_snapshot(before, after, topo, tracer.capabilities)
        lat1 = tracer.latency_totals() if args.latency else None
    finally:
        tracer.stop()
    snap = attach_workloads(attach_devices(snap, topo, DeviceResolver()), workloads)
    delays = interval_delays(lat0, lat1) if args.latency else None
    snap = attach_delays(snap, delays)
    if args.json:
        # the window in wall-clock time, to line it up with another record of the same
        # traffic (a Prometheus range, a benchmark's log): its reads end at these instants
        print(json.dumps({**snap.as_json(), "window": {"start": round(began, 3),
                                                       "end": round(ended, 3)}}, indent=2))
    else:
        console = make_console()
        console.print(render(snap, topo, args.limit, console.width, view_state(args)))
        if delays is not None:
            console.print(delays_table(delays, args.limit), markup=False, highlight=False,
                          soft_wrap=True)
    return 0


def cmd_top(args) -> int:
    from steer.model.flows import Intervals
    from steer.model.topology import read_topology
    from steer.present.live import run_live
    from steer.trace.workloads import WorkloadResolver
    topo = read_topology()
    tracer = start_tracer(args)
    try:
        run_live(Intervals(tracer, topo, smooth=True, workloads=WorkloadResolver()), topo,
                 interval=args.interval,
                 duration=args.duration,
                 limit=args.limit, state=view_state(args))
    except KeyboardInterrupt:
        pass
    finally:
        tracer.stop()
    return 0


def cmd_profile(args) -> int:
    from steer.present.live import make_console
    from steer.present.profile_view import render_table, write_svg
    from steer.trace.profile import run_profile
    if args.svg:
        need_matplotlib("steer profile --svg")
    tracer = start_profiler(args, args.sample_hz)
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


def cmd_check(args) -> int:
    import shutil
    from steer.trace.check import device_methods, hardware_devices, run_checks, text_lines
    if args.dev:   # a device asked for by name must be there, before the minute of checks
        from steer.kernel.errors import KernelError
        from steer.steering.methods import describe
        from steer.steering.xdp import SteerError
        try:
            describe(args.dev, args.netns)
        except (SteerError, KernelError, OSError) as e:
            raise UserError(f"--dev {args.dev}: {e}") from None
    report = run_checks()
    report["methods"] = device_methods([args.dev] if args.dev else hardware_devices(),
                                       args.netns, report["steering"])
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print("\n".join(text_lines(report, max(60, shutil.get_terminal_size().columns))))
    if not report["default"]["runs"]:
        print(f"steer check: error: {report['default']['error']}", file=sys.stderr)
        return EXIT_ERROR
    return 0
