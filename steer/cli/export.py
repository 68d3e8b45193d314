"""steer export: the Prometheus exporter."""
from __future__ import annotations

import time

from steer.cli.common import MAX_ROWS, UsageError, UserError, positive, start_tracer, tracer_options


def add_parsers(sub, fmt) -> dict:
    """Adds this module's commands to SUB; returns {name: function}."""
    from steer.present.exporter import DEFAULT_FLOW_LABELS, DEFAULT_LISTEN, DEFAULT_TOP_K, FLOW_LABEL_SETS
    ex = sub.add_parser("export", formatter_class=fmt, help="Prometheus exporter",
                        description="Serve Prometheus metrics, read from the BPF maps at every "
                        "scrape: per-class and per-CPU totals, the top-K flows, steering rule "
                        "counters, tracer health and capabilities. Listens on loopback unless "
                        "another address is given.")
    ex.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                    help="address to serve /metrics on; :PORT listens on every address (IPv6 "
                         "and IPv4), as Go exporters do (default %(default)s)")
    ex.add_argument("--top-k", type=positive(int, 0, MAX_ROWS), default=DEFAULT_TOP_K, metavar="K",
                    help="flows (by rate) that get per-flow series")
    ex.add_argument("--flow-labels", choices=list(FLOW_LABEL_SETS), default=DEFAULT_FLOW_LABELS,
                    help="labels of the per-flow series: five-tuple (a series per connection), or "
                         "service (proto, dst, dport: the connections to one local port summed, and "
                         "the replies this host gets as a client summed under "
                         "dport=\"ephemeral\", so that series do not come and go with every "
                         "connection)")
    ex.add_argument("--duration", type=positive(), default=None, metavar="SECONDS",
                    help="stop after this long (default: until Ctrl-C or SIGTERM)")
    ex.add_argument("--keep-privileges", action="store_true",
                    help="keep the process's capabilities after start-up (by default it drops "
                         "them all once its programs are loaded and its port is bound)")
    tracer_options(ex)
    return {"export": cmd_export}


def serve(collector, listen):
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
    tracer = start_tracer(args)
    try:
        collector = SteerCollector(tracer, topo, top_k=args.top_k, steering=pinned_state,
                                   flow_labels=args.flow_labels)
        serve(collector, args.listen)
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
