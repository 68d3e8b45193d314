"""steer demo: the built-in lab's flows under the live view, then a summary."""
from __future__ import annotations

import json

from steer.cli.common import (MAX_INTERVAL, UsageError, UserError, check_usable, positive, start_tracer,
                              tracer_options, view_options, view_state)


def add_parsers(sub, fmt) -> dict:
    """Adds this module's commands to SUB; returns {name: function}."""
    d = sub.add_parser("demo", formatter_class=fmt, help="the built-in lab with the live view",
                       description="Bring up the lab (two network namespaces on a veth pair, "
                       "198.18.0.0/15, iperf3 flows with different sender and receiver CPUs), show "
                       "the live view, print a summary, and tear everything down.")
    d.add_argument("--duration", type=positive(), default=15.0, metavar="SECONDS",
                   help="traffic time (Ctrl-C stops earlier)")
    d.add_argument("--interval", type=positive(maximum=MAX_INTERVAL), default=1.0, metavar="SECONDS",
                   help="refresh period of the live view")
    d.add_argument("--flow", action="append", metavar="KCPU:APPCPU", dest="flows",
                   help="a lab flow with its softirq on KCPU and its reader on APPCPU; repeat"
                        " for more (default: A:A and B:A)\n\n"
                        "a lab flow whose receive softirq runs on KCPU (the sender's CPU) and"
                        " whose reader is pinned to APPCPU; repeat for more flows (default: "
                        "with A and B the first two CPUs this process may run on, A:A, same "
                        "core, and B:A, another core)")
    d.add_argument("--json", action="store_true", help="print the final summary as JSON")
    view_options(d)
    tracer_options(d)
    return {"demo": cmd_demo}


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
        check_usable((f.kernel_cpu, f.app_cpu), f"--flow {f.kernel_cpu}:{f.app_cpu}")
    console = make_console(stderr=args.json)
    tracer = start_tracer(args)
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
                                   keep_going=lab.running, state=view_state(args))
        except KeyboardInterrupt:
            interrupted = True
        # the traffic ends first, then the last read: read before iperf3 is done, the tail of
        # its flows (a skb or two) would be in iperf3's count and not in steer's
        results = lab.wait(timeout=5) if not interrupted else []
        interval()
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
    console.print(render(total, topo, width=console.width, state=view_state(args)))
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
