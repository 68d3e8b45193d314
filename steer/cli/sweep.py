"""steer sweep: the papers' affinity matrix, measured."""
from __future__ import annotations

import json
import os

from steer.cli.common import (MAX_INTERVAL, GracefulStop, UsageError, UserError, bounded_int,
                              check_usable, cpus_online, device_name, flow_counts,
                              interrupted_status, need_matplotlib, netns_name, offload_settings,
                              pause_values, positive, start_profiler, start_tracer,
                              tracer_options)


def add_parsers(sub, fmt) -> dict:
    """Adds this module's commands to SUB; returns {name: function}."""
    sw = sub.add_parser("sweep", formatter_class=fmt, help="the papers' affinity matrix, measured",
                        description="For every (kernel CPU, app CPU) pair of --cpus: move the flow's "
                        "kernel receive processing, pin the reader, run traffic, and record "
                        "throughput, CPU-seconds per GB on each side, LLC misses where a PMU "
                        "exists, and the class. Writes results.json, results.csv, PNG and SVG "
                        "figures and report.md to --out. Ctrl-C keeps the finished cells; "
                        "--resume continues. Without --dev the built-in lab makes the traffic.")
    _cell_options(sw)
    _method_options(sw)
    # an experiment, not an always-on watch: it wants exact per-cell times and the stack CPU
    tracer_options(sw, timing="exact")
    return {"sweep": cmd_sweep}


def _cell_options(sw) -> None:
    """Which cells, and how long each is measured."""
    sw.add_argument("--out", metavar="DIR", help="output directory (required but with --plan)")
    sw.add_argument("--cpus", metavar="LIST|all",
                    help="CPUs to sweep, every pair of them a cell; all: every online CPU "
                         "this process may run on\n\n"
                         "CPUs to sweep, every pair of them a cell; all: every online CPU "
                         "this process may run on (default: those, up to 8; on a bigger host "
                         "a CPU of each socket with its SMT sibling, a core sharing its LLC "
                         "and one under another LLC, whose pairs hold every placement: at "
                         "most 64 cells on 2 sockets, where every pair of 192 CPUs is 36,864)")
    sw.add_argument("--plan", action="store_true",
                    help="print the cells (kernel CPU, app CPU, class) and the estimated time as "
                         "JSON, and run nothing")
    sw.add_argument("--sysfs", metavar="ROOT",
                    help="with --plan: plan for the machine whose sysfs tree is under ROOT (as "
                         "steer topology --sysfs reads it), all its online CPUs usable")
    sw.add_argument("--seconds", type=positive(maximum=MAX_INTERVAL), default=None,
                    help="traffic per run (default: 5, or 30 with --paper)")
    sw.add_argument("--repeat", metavar="N", type=bounded_int(1, 1000), default=None,
                    help="runs per cell, the median kept (default: 1, or 3 with --paper)")
    sw.add_argument("--paper", action="store_true",
                    help="the papers' method: one iperf3 -Z flow, 30 s runs less the first 2 "
                         "s, 3 per cell\n\n"
                         "the papers' method where the lab can follow it: one flow, iperf3 -Z"
                         " (the sender copies nothing), the first 2 s of each run left out "
                         "(-O, and by the tracer), 30 s runs, 3 per cell, the sender pinned "
                         "to a CPU outside the swept pair where there is one; the report "
                         "names it. On a real host, run length and repeats (the client is "
                         "yours to start)")
    sw.add_argument("--resume", action="store_true", help="continue the sweep in --out")


def _method_options(sw) -> None:
    """How each cell's placement is made, on which host, under which device settings."""
    sw.add_argument("--method", choices=["rps", "xdp", "irq"], default=None,
                    help="how the kernel side is moved: irq (the papers' way, with --dev), "
                         "xdp (--dev's default) or rps (the lab's)\n\n"
                         "how the kernel side is moved. irq (with --dev): the papers' way, "
                         "the NIC's receive IRQs pointed at the kernel CPU, where the "
                         "driver's NAPI poll then runs (needs irqbalance stopped, RPS and "
                         "threaded NAPI off; the IRQs are put back after). xdp (--dev "
                         "default): XDP cpumap steering of the flow. rps (the lab's only way:"
                         " its veth has no IRQ): RPS on the receiving veth")
    sw.add_argument("--dev", type=device_name, metavar="IFACE", help="sweep a real host: the receiving interface")
    sw.add_argument("--netns", type=netns_name, metavar="NAME", help="network namespace of --dev")
    sw.add_argument("--server-cmd", metavar="CMD",
                    help="with --dev: the receiver to start and pin, e.g. 'iperf3 -s -p 5201'; "
                         "a client on another host must send to it for the whole sweep")
    sw.add_argument("--port", type=bounded_int(1, 65535), default=5201, help="TCP port of the swept flow")
    sw.add_argument("--flows", type=flow_counts, default=[1], metavar="N[,N...]",
                    help="parallel flows per cell, each count a matrix of its own (lab only)\n\n"
                         "parallel flows per cell, each count a matrix of its own (lab only; "
                         "flow i on --port + i): all are steered to the cell's kernel CPU and"
                         " read on its app CPU, as Cai et al. measure 1, 8, 16 and 24 flows "
                         "per core")
    sw.add_argument("--pause", type=pause_values, default=None, metavar="on,off",
                    help="sweep the receiving NIC's pause frames (rx and tx together) over "
                         "these values\n\n"
                         "sweep the receiving NIC's Ethernet flow control (pause frames, rx "
                         "and tx together), as the NDM'13 follow-up did: every cell under "
                         "each value, in the order given (with --dev, on a NIC that has pause"
                         " frames; the lab's veth has none). The NIC is put back as found "
                         "after")
    sw.add_argument("--offloads", type=offload_settings, default=None,
                    metavar="F=on|off[+F=on|off][,...]",
                    help="sweep the receiving device's offloads (gro, gro-hw, lro, tso, gso) "
                         "over these settings\n\n"
                         "sweep the receiving device's offloads: each comma-separated setting"
                         " names features of gro, gro-hw, lro, tso, gso (gro=on,gro=off; "
                         "gro=on+lro=on,gro=off+lro=off) and every cell is measured under "
                         "each, in the order given; features a setting does not name stay as "
                         "found, and all are put back after. In the lab the sender's TSO is "
                         "then off, so that packets arrive wire-sized, as from a NIC")
    sw.add_argument("--profile", action="store_true",
                    help="also say where each cell's CPU went, by category (steer profile "
                         "beside the tracer)\n\n"
                         "also say where each cell's CPU went, by category (steer profile at "
                         "999 Hz, beside the tracer): cells carry profile.kernel and "
                         "profile.app shares and the report a table. Profiling costs "
                         "throughput (about 8%% of a bulk flow here), so compare profiled "
                         "sweeps with each other")
    sw.add_argument("--latency", action="store_true",
                    help="also how long each cell's data waits from the stack to its reader\n\n"
                         "also how long each cell's received data waits in the host, from its "
                         "skb reaching the stack to the read that takes it (the tracer's "
                         "--latency, as `steer flows --latency`), and the reader's wake-ups by "
                         "the data (how long, how many from another core): cells carry "
                         "wait_p50_us ... wakeup_p99_us, the report a table by class and the "
                         "figures a chart. Six programs more per skb, read and wake-up cost "
                         "throughput, so compare such sweeps with each other")
    sw.add_argument("--no-figures", action="store_true",
                    help="write results.json, results.csv and report.md but no PNG or SVG (no"
                         " matplotlib needed)\n\n"
                         "write results.json, results.csv and report.md, which hold every "
                         "figure's numbers, but draw no PNG or SVG: matplotlib is then not "
                         "needed, and a sweep of few cells is not spent mostly drawing")


def cmd_sweep(args) -> int:
    cfg, topo, why = _sweep_config(args)
    if args.plan:
        from steer.experiment.sweep import plan
        print(json.dumps(plan(cfg, topo, why), indent=1))
        return 0
    if os.path.exists(os.path.join(args.out, "results.json")) and not args.resume:
        raise UserError(f"{args.out} already holds a sweep: --resume continues it, or choose "
                        "another --out")
    from steer.experiment.sweep import cells_of, write_outputs
    from steer.present.live import make_console
    console = make_console()
    results = _run_sweep(args, cfg, topo, console)
    if results is None:
        if not os.path.exists(os.path.join(args.out, "results.json")):
            console.print("interrupted before the first cell: nothing to keep")
            return interrupted_status()
        with open(os.path.join(args.out, "results.json")) as f:
            results = json.load(f)
        write_outputs(results, args.out, topo, figures=not args.no_figures)
        console.print(f"interrupted after {len(results['cells'])} of {len(cells_of(cfg))} cells; "
                      f"the lab is torn down. `steer sweep --resume --out {args.out}` with the "
                      "same options continues.")
        return interrupted_status()
    files = write_outputs(results, args.out, topo, figures=not args.no_figures)
    console.print(f"wrote {len(files)} files to {args.out}: " + ", ".join(os.path.basename(f) for f in files))
    return 0


def _sweep_config(args):
    """(SweepConfig, the topology it is for, why these CPUs) from the options, each refused
    combination with one line."""
    from steer.experiment.lab import usable_cpus
    from steer.experiment.report import PAPER_PRESET
    from steer.experiment.sweep import SweepConfig, default_cpus, paper_sender_cpu
    from steer.model.topology import read_topology
    if args.sysfs and not args.plan:
        raise UsageError("--sysfs plans for another machine: it goes with --plan")
    if not args.plan and not args.out:
        raise UsageError("--out DIR is required (or --plan, which runs nothing)")
    if args.sysfs:
        try:
            topo = read_topology(args.sysfs)
        except (OSError, ValueError) as e:
            raise UserError(f"--sysfs {args.sysfs}: {e}") from None
        usable = topo.online
    else:
        topo, usable = read_topology(), usable_cpus()
    why = ""
    if args.cpus and args.cpus != "all":
        cpus = cpus_online(args.cpus, "--cpus", topo)
        if not args.sysfs:
            check_usable(cpus, "--cpus")
    elif args.cpus == "all":
        cpus, why = [c for c in topo.online if c in set(usable)], "--cpus all"
    else:
        cpus, why = default_cpus(topo, usable)
    _refuse_combinations(args)
    seconds = args.seconds or (PAPER_PRESET["seconds"] if args.paper else 5.0)
    repeat = args.repeat or (PAPER_PRESET["repeat"] if args.paper else 1)
    sender = paper_sender_cpu(cpus, usable_cpus()) if args.paper and not args.dev else None
    if not args.plan and not args.no_figures:
        need_matplotlib("steer sweep (--no-figures draws none)")
    cfg = SweepConfig(cpus=cpus, seconds=seconds, repeat=repeat,
                      method=args.method or ("xdp" if args.dev else "rps"),
                      mode="host" if args.dev else "lab", dev=args.dev, netns=args.netns,
                      server_cmd=args.server_cmd, port=args.port, flows=args.flows,
                      profile=args.profile, paper=args.paper, sender_cpu=sender,
                      pause=args.pause, offloads=args.offloads, latency=args.latency)
    return cfg, topo, why


def _refuse_combinations(args) -> None:
    if bool(args.dev) != bool(args.server_cmd):
        raise UsageError("--dev and --server-cmd go together: a real host needs its receiver command")
    if args.dev and args.method == "rps":
        raise UsageError("--method rps is for the lab; a real host is swept with --method irq "
                         "or xdp")
    if not args.dev and args.method == "irq":
        raise UsageError("--method irq moves the receiving NIC's IRQs, and the lab's veth has "
                         "none: give --dev IFACE --server-cmd CMD, or use --method rps in the lab")
    if args.dev and args.flows != [1]:
        raise UsageError("--flows is for the lab; on a real host the client decides how many flows")
    if args.paper and args.flows != [1]:
        raise UsageError("--paper measures one flow per cell, as the papers did: drop --flows")
    if args.pause and not args.dev:
        raise UsageError("--pause switches a NIC's Ethernet flow control, and the lab's veth has "
                         "none: give --dev IFACE --server-cmd CMD")
    if args.port + max(args.flows) - 1 > 65535:
        raise UsageError(f"--port {args.port} with --flows {max(args.flows)}: ports past 65535")


def _run_sweep(args, cfg, topo, console) -> dict | None:
    """The sweep's cells under a progress bar, the tracer (and profiler) around them: its
    results, or None when stopped."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    from steer.experiment.sweep import SweepError, SweepStopped, describe, run_sweep
    stop = GracefulStop(console, "stopping after tearing down the run under way (Ctrl-C again "
                                  "to stop at once)")
    tracer = start_tracer(args)
    profiler = None
    try:
        if args.profile:
            from steer.defaults import PROFILE_HZ
            profiler = start_profiler(args, PROFILE_HZ)
        console.print(f"steer sweep: {describe(cfg)}")
        with stop, Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                            console=console) as progress:
            try:
                return run_sweep(cfg, args.out, tracer, topo, resume=args.resume,
                                 progress=progress, should_stop=stop.requested,
                                 profiler=profiler)
            except (SweepStopped, KeyboardInterrupt):
                return None
    except SweepError as e:
        raise UserError(str(e)) from None
    finally:
        if profiler:
            profiler.stop()
        tracer.stop()
