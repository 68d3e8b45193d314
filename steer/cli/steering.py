"""Moving work: pinned XDP rules, application/IRQ/RPS affinity, steer auto, steer reset."""
from __future__ import annotations

import json
import os

from steer.cli.export import serve, series_options, web_config, web_options
from steer.cli.common import (MAX_INTERVAL, MAX_QUEUE, MAX_SECONDS, PID_MAX_LIMIT,
                              UsageError, UserError, bounded_int, cpus_online, device_name,
                              netns_name, number, positive, start_tracer, tracer_options)
from steer.defaults import TOLERANCE
from steer.model.topology import MAX_CPU
from steer.steering.methods import QUEUE_METHODS


def add_parsers(sub, fmt) -> dict:
    """Adds this module's commands to SUB; returns {name: function}."""
    for add in (_add_pin_commands, _add_affinity_commands, _add_auto):
        add(sub, fmt)
    sub.add_parser("reset", formatter_class=fmt, help="remove everything steer left in the kernel",
                   description="Detach and unpin every pinned steering program, restore IRQ and "
                   "RPS settings steer changed, and remove lab namespaces of dead processes.")
    return {"pin": cmd_pin, "unpin": cmd_unpin, "rules": cmd_rules, "app": cmd_app, "irq": cmd_irq, "rps": cmd_rps, "auto": cmd_auto, "reset": cmd_reset}


def steer_target(sp) -> None:
    sp.add_argument("--dev", required=True, type=device_name, metavar="IFACE",
                    help="receiving interface")
    sp.add_argument("--netns", type=netns_name, metavar="NAME",
                    help="network namespace of IFACE (a name under /run/netns, or a path)")


def _add_pin_commands(sub, fmt) -> None:
    pin = sub.add_parser("pin", formatter_class=fmt, help="steer flows to a CPU",
                         description="Move the receive processing of the flows matching "
                         "FLOWSPEC, as they arrive on IFACE, to CPU N. By default (--method "
                         "cpumap) an XDP rule redirects those flows alone: it stays after the "
                         "command exits, pinned under /sys/fs/bpf/steer, until steer unpin or "
                         "steer reset, and pinning a FLOWSPEC again moves it. The per-queue "
                         "methods move the flows' RX queue instead, with every flow of it, and "
                         "cost nothing per packet: irq (the queue's IRQ), napi (the queue's NAPI "
                         "in a kthread of its own) and rps (the queue's rps_cpus); the queue is "
                         "--queue, or the one the flows arrive on, traced for --find seconds "
                         "(steer check --dev IFACE says which methods the device allows). "
                         "steer reset puts a queue's settings back. --method auto takes the "
                         "cheapest per-queue method that works when the flows are alone on their "
                         "queue, else cpumap.")
    pin.add_argument("flowspec", metavar="FLOWSPEC",
                     help="key=value pairs (proto, src, sport, dst, dport), comma-separated; "
                          "example: proto=tcp,dport=5201\n\n"
                          "comma-separated key=value from proto, src, sport, dst, dport, in "
                          "the receive direction (src = the sender); all five make an exact "
                          "rule. Example: proto=tcp,dport=5201")
    pin.add_argument("--cpu", required=True, type=bounded_int(0, MAX_CPU), help="target CPU (must be online)")
    steer_target(pin)
    pin.add_argument("--mode", choices=["auto", "generic", "native"], default="auto",
                     help="XDP attach mode: auto (native where the driver has it, generic on "
                          "veth), generic or native\n\n"
                          "XDP attach mode; auto picks native where the driver has it, "
                          "generic on veth (native veth XDP drops locally generated packets "
                          "unless the peer has tx checksum offload off)")
    pin.add_argument("--method", choices=["cpumap", "auto", *QUEUE_METHODS], default="cpumap",
                     help="how the work moves (see above)")
    pin.add_argument("--queue", type=bounded_int(0, MAX_QUEUE), metavar="N",
                     help="the RX queue a per-queue method moves (default: the one the flows "
                          "arrive on, traced)")
    pin.add_argument("--find", type=positive(maximum=MAX_INTERVAL), default=1.0, metavar="SECONDS",
                     help="how long to trace the flows to find their RX queue, and what else "
                          "arrives on it")

    unpin = sub.add_parser("unpin", formatter_class=fmt, help="remove a steering rule",
                           description="Remove the rule of FLOWSPEC; with the last rule of a "
                           "device its XDP program is detached and its pins removed.")
    unpin.add_argument("flowspec", metavar="FLOWSPEC", help="as given to steer pin")
    steer_target(unpin)

    rules = sub.add_parser("rules", formatter_class=fmt, help="list pinned steering rules",
                           description="Every device with pinned steering: mode, rules with their "
                           "packet and byte counters, and the passed/unparsed/redirect counters; "
                           "then the IRQ, RPS and threaded-NAPI settings steer changed (steer "
                           "irq, rps, pin --method), with the values steer reset puts back.")
    rules.add_argument("--json", action="store_true", help="JSON instead of a table")


def _add_affinity_commands(sub, fmt) -> None:
    app = sub.add_parser("app", formatter_class=fmt, help="pin an application to CPUs",
                         description="Set the CPU affinity of every thread of a process.")
    app.add_argument("--pid", required=True, type=bounded_int(1, PID_MAX_LIMIT), help="process id")
    app.add_argument("--cpu", required=True, metavar="LIST", help="CPU list, e.g. 2 or 2-3,6")

    irq = sub.add_parser("irq", formatter_class=fmt, help="point a device's receive IRQs at CPUs",
                         description="Write smp_affinity_list of the IRQs of IFACE that serve "
                         "receive (RX or combined queues; TX-only and control vectors stay), or of "
                         "one RX queue's IRQ. The IRQ's CPU is where the driver's NAPI poll, and "
                         "so the flows' receive softirq, runs, unless RPS or threaded NAPI move it "
                         "on. The old values are kept in /run/steer and restored by steer reset. "
                         "irqbalance, where it runs, moves IRQs back: stop it first.")
    irq.add_argument("--dev", required=True, type=device_name, metavar="IFACE",
                     help="the device whose IRQs move")
    irq.add_argument("--queue", type=bounded_int(0, MAX_QUEUE), metavar="N",
                     help="only the IRQ of RX queue N (a flow's queue: steer flows --json, rx.queue)")
    irq.add_argument("--cpu", required=True, metavar="LIST", help="CPU list")

    rps = sub.add_parser("rps", formatter_class=fmt, help="set RPS CPUs of a device",
                         description="Write rps_cpus of every RX queue of IFACE. The old values "
                         "are restored by steer reset.")
    steer_target(rps)
    rps.add_argument("--cpu", required=True, metavar="LIST", help="CPU list")


def _add_auto(sub, fmt) -> None:
    from steer.cli.logs import LOG_FORMATS
    auto = sub.add_parser("auto", formatter_class=fmt, help="steer flows by a policy, continuously",
                          description="Every INTERVAL, trace the flows, ask the policy where each "
                          "should be processed, and move the ones it wants elsewhere (exact XDP "
                          "rules on IFACE, or with --method auto their RX queues). A move needs "
                          "the same answer CONFIRM times in a row and HOLD seconds since the "
                          "flow's last move. Every move is an "
                          "experiment: WINDOW intervals before it are set against WINDOW after it "
                          "(the moved flow's goodput and that of the flows already on the CPUs it "
                          "touched; where goodput holds, its receive CPU per GB), and a move that "
                          "made things worse is put back and its CPU not tried again for that "
                          "flow for REVERT_HOLD seconds. Every change and verdict is logged, and a "
                          "summary of the moves printed at the end. The rules live as long as "
                          "this process: Ctrl-C or kill removes them.")
    auto.add_argument("--policy", default="llc-peer", metavar="NAME|FILE",
                      help="llc-peer, same-core, spread, static:FILE.toml (or FILE.toml), or "
                           "FILE.py defining place(snapshot, topology)")
    steer_target(auto)
    auto.add_argument("--interval", type=positive(maximum=MAX_INTERVAL), default=2.0, metavar="SECONDS",
                      help="how often the flows are traced and the policy asked")
    auto.add_argument("--duration", type=positive(), default=None, metavar="SECONDS",
                      help="stop after this long (default: until Ctrl-C)")
    auto.add_argument("--confirm", type=bounded_int(1, 1000), default=2, metavar="N",
                      help="intervals in a row a move must be asked for")
    auto.add_argument("--hold", type=number(float, 0, MAX_SECONDS), default=10.0, metavar="SECONDS",
                      help="minimum time between two moves of one flow")
    _judging_options(auto)
    auto.add_argument("--min-rate", type=number(float, 0), default=1e6, metavar="BPS",
                      help="flows slower than this (bit/s) are left alone; 0: every flow with"
                           " traffic\n\n"
                           "flows slower than this (bit/s) are left alone: the policy, "
                           "built-in or yours, is shown only the flows at this rate or more "
                           "and those it placed (0: every flow with traffic)")
    auto.add_argument("--dry-run", action="store_true", help="log the changes, make none")
    auto.add_argument("--expect-from", metavar="DIR",
                      help="a sweep of this host (steer sweep --out DIR) whose figures each "
                           "move's log line adds\n\n"
                           "a sweep of this host (steer sweep --out DIR): each move's log "
                           "line adds what the sweep measured for the placement it leaves and"
                           " the one it makes (its cells, else its class medians), with "
                           "--dry-run too")
    auto.add_argument("--method", choices=["cpumap", "auto"], default="cpumap",
                      help="how a flow moves: an exact XDP rule (cpumap), or (auto) its RX "
                           "queue where it is alone there\n\n"
                           "how a flow moves: an exact XDP rule (cpumap), or (auto) its RX "
                           "queue where it is the only flow there at --min-rate or more and "
                           "the device allows a per-queue method (the first of irq, napi, rps"
                           " that works there, as steer check --dev IFACE lists them): "
                           "nothing per packet, and the flows under --min-rate on that queue "
                           "move with it. A queue is put back when its move is reverted, its "
                           "flow ends and steer auto exits; after a kill, by steer reset")
    auto.add_argument("--log-format", choices=list(LOG_FORMATS), default="text",
                      help="the log on stderr: text (a UTC timestamp, then the line) or json "
                           "(one object per line)\n\n"
                           "the log on stderr: text (a UTC timestamp, then the line) or json "
                           "(one object per line: time, level, msg, and for a move event=move"
                           " or undo, flow, old_cpu, new_cpu, reason, method (cpumap, or the "
                           "per-queue method), queue (its RX queue, or null), dry_run; for a "
                           "verdict event=verdict, flow, from_cpu, to_cpu, verdict, why, "
                           "undone, and the goodput and CPU per GB before and after with "
                           "their change and its interval)")
    auto.add_argument("--mode", choices=["auto", "generic", "native"], default="auto",
                      help="XDP attach mode, as for steer pin")
    tracer_options(auto)

    auto.add_argument("--listen", metavar="HOST:PORT",
                      help="also serve Prometheus metrics here (:PORT: every address), with "
                           "steer_auto_moves_total\n\n"
                           "also serve Prometheus metrics here, with steer_auto_moves_total "
                           "(:PORT: every address). Served by this process, which keeps every"
                           " capability while it steers: loopback, or --web-config's TLS and "
                           "auth, where others can reach it")
    series_options(auto)
    web_options(auto)


def _judging_options(auto) -> None:
    """How steer auto judges each move, and what it does with a move that made things worse."""
    auto.add_argument("--window", type=bounded_int(2, 1000), default=5, metavar="N",
                      help="intervals before and after a move that judge it (a flow moves once "
                           "it has been seen for N intervals)")
    auto.add_argument("--tolerance", type=number(float, 0.001, 1), default=TOLERANCE,
                      metavar="SHARE", help="a change smaller than this share of the figure "
                      "before the move is no change (0.05: 5%%)")
    auto.add_argument("--on-inconclusive", choices=["keep", "revert"], default="keep",
                      help="what to do with a move whose windows are too noisy to judge")
    auto.add_argument("--revert-hold", type=number(float, 0, MAX_SECONDS), default=300.0,
                      metavar="SECONDS", help="how long a CPU a move to which was reverted is "
                      "not tried again for that flow")


def _spec(text: str):
    from steer.model.flowspec import FlowSpec, FlowSpecError
    try:
        return FlowSpec.parse(text)
    except FlowSpecError as e:
        raise UsageError(f"FLOWSPEC {text!r}: {e}") from None


def cmd_pin(args) -> int:
    from steer.steering.xdp import XdpSteering
    spec = _spec(args.flowspec)
    (cpu,) = cpus_online(str(args.cpu))
    if args.method != "cpumap" and _pin_queue(args, spec, cpu):
        return 0
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


def _pin_queue(args, spec, cpu: int) -> bool:
    """steer pin by a per-queue method (or --method auto); False where auto takes cpumap."""
    from steer.kernel.privileges import CAP_NET_ADMIN, CAP_SYS_ADMIN, require_caps
    from steer.steering.methods import choose, describe, methods, move_queue
    from steer.trace.check import steering_status
    require_caps([CAP_SYS_ADMIN, CAP_NET_ADMIN], f"--method {args.method}")
    where = args.dev + (f" in {args.netns}" if args.netns else "")
    desc = describe(args.dev, args.netns)
    avail = methods(desc, steering_status() if args.method == "auto" else "not asked")
    if args.method != "auto" and not avail[args.method].works:
        raise UserError(f"--method {args.method} on {where}: {avail[args.method].why}")
    queue, napi_id, others = args.queue, None, None
    single = len(desc["rx_queues"]) == 1
    mapped = queue is not None and desc["rx_queues"].get(queue) is not None
    if args.method == "auto" or (queue is None and not single) or \
            (args.method == "napi" and not (mapped or single and desc["rx_queues"].get(0))):
        queues, napi_id, others = _traced_queues(args, spec, desc)
        if queue is None:
            if len(queues) != 1:
                raise UserError(f"the flows of {spec} arrive on RX queues "
                                f"{', '.join(map(str, sorted(queues)))} of {where}: a per-queue "
                                "method moves one (--queue N), or use --method cpumap")
            (queue,) = queues
    if queue is None:
        queue = 0
    method = args.method
    if method == "auto":
        method = choose(avail, alone=not others)
        why = "the flows are alone on" if not others else f"{others} other flow(s) arrive on"
        none = "" if others or method != "cpumap" else " (no per-queue method works there: " + \
            "; ".join(f"{n}: {avail[n].why}" for n in QUEUE_METHODS) + ")"
        print(f"auto: {why} RX queue {queue} of {where}: {method}{none}")
        if method == "cpumap":
            return False
    moved = move_queue(method, desc, queue, cpu, napi_id)
    also = "" if others is None else \
        f"; {others} other flow(s) seen on that queue in {args.find:g} s move with it"
    print(f"pinned RX queue {queue} of {where} to CPU {cpu} by {method}: {moved.said}; every "
          f"flow of that queue moves{also}; steer reset puts it back")
    return True


def _traced_queues(args, spec, desc) -> tuple[set[int], int | None, int]:
    """The RX queues of DESC's device on which flows of SPEC arrived over --find seconds, the
    NAPI the most of their bytes came through, and how many other flows arrived on those
    queues."""
    import time
    from steer.model.flows import build_snapshot
    from steer.model.topology import read_topology
    from steer.steering.xdp import netns_path
    from steer.trace.tracer import Tracer
    ns = os.stat(netns_path(args.netns) or "/proc/self/ns/net").st_ino
    tracer = Tracer(sample_hz=99).start()
    try:
        a = tracer.sample()
        time.sleep(args.find)
        snap = build_snapshot(a, tracer.sample(), read_topology(), tracer.capabilities)
    finally:
        tracer.stop()
    here = [f for f in snap.flows if f.rx_path and f.rx_path.ifindex == desc["ifindex"]
            and f.rx_path.netns == ns and f.rx_bytes > 0]
    mine = [f for f in here if spec.matches(*f.flow)]
    if not mine:
        raise UserError(f"no packet of {spec} arrived on {args.dev} in {args.find:g} s, to find "
                        "its RX queue: give --queue N, or --find a longer time")
    single = len(desc["rx_queues"]) == 1

    def queue_of(f):   # a single-queue device's one queue; else what the driver recorded
        return 0 if single else f.rx_path.queue
    if any(queue_of(f) is None for f in mine):
        raise UserError(f"{args.dev}'s driver does not record which of its "
                        f"{len(desc['rx_queues'])} RX queues the flows of {spec} arrive on: give "
                        "--queue N, or use --method cpumap")
    queues = {queue_of(f) for f in mine}
    top = max(mine, key=lambda f: f.rx_bytes)
    others = sum(1 for f in here if not spec.matches(*f.flow) and queue_of(f) in queues)
    return queues, top.rx_path.napi_id, others


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
    from steer.steering.affinity import changed
    from steer.steering.xdp import pinned_state, require_steering_caps
    from steer.model.topology import online_cpus
    from steer.present.view import changed_lines, rules_lines
    require_steering_caps()
    out = pinned_state()
    settings = changed()
    if args.json:
        print(json.dumps({"devices": [d.as_json() for d in out], "changed": settings}, indent=2))
        return 0
    print("\n".join(rules_lines(out, set(online_cpus())) + changed_lines(settings)))
    return 0


def cmd_app(args) -> int:
    from steer.steering.affinity import set_app_affinity
    cpus = cpus_online(args.cpu)
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
    cpus = cpus_online(args.cpu)   # a bad argument is exit 2 whoever runs it
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
    cpus = cpus_online(args.cpu)   # a bad argument is exit 2 whoever runs it
    require_caps([CAP_SYS_ADMIN], "changing RPS")
    before = set_rps(args.dev, cpus, args.netns)
    print(f"{args.dev}: RPS of {', '.join(sorted(before))} now CPU {args.cpu}")
    return 0


def cmd_auto(args) -> int:
    from steer.steering import auto
    from steer.steering.xdp import XdpSteering
    web, name, policy, log, topo, expect = _auto_setup(args)
    steering = None if args.dry_run else XdpSteering(args.dev, args.netns, mode=args.mode,
                                                      pinned=False).open()
    tracer = server = queues = None
    try:
        if args.method == "auto":
            from steer.steering.methods import QueueSteering
            queues = QueueSteering(args.dev, args.netns)
            if queues.method is None:
                log(f"steer auto: no per-queue method on {args.dev} ({queues.why}): every move "
                    "is an XDP rule")
        if args.listen:
            from steer.kernel.process import one_heap
            one_heap()   # before any thread: the scrapes' arrays, given back after each
        tracer = start_tracer(args)
        engine = auto.AutoSteer(policy, steering, topo, confirm=args.confirm, hold=args.hold,
                                window=args.window, tolerance=args.tolerance,
                                on_inconclusive=args.on_inconclusive,
                                revert_hold=args.revert_hold, log=log, queues=queues,
                                expect=expect)
        intervals = _auto_intervals(args, tracer, topo, engine)
        if args.listen:
            server = _serve_auto(args, web, tracer, topo, steering, engine, name)
        mode = "dry run" if steering is None else f"{steering.attached_mode} XDP on {args.dev}"
        log(f"steer auto: policy {name}, every {args.interval:g} s, {mode}")
        auto.run(engine, intervals, period=args.interval, duration=args.duration,
                 detached=steering.detached if steering else lambda: None)
    except auto.AutoStopped as e:
        raise UserError(str(e)) from None
    finally:
        if server:
            server.close()
        if tracer:
            tracer.stop()
        if steering:
            steering.close()
        if queues is not None and not args.dry_run:
            queues.close()
    if tracer:
        for line in engine.summary():
            log(f"steer auto: {line}")
    by_queue = len(engine.by_queue) if tracer else 0
    log(f"steer auto: stopped; {len(engine.placed) - by_queue if tracer else 0} rule(s) removed "
        f"with it" + (f", {by_queue} queue(s) put back" if by_queue else ""))
    return 0


def _auto_setup(args):
    """What steer auto checks and reads before it touches the kernel: the listen address, the
    web config, the policy, the log, the topology and the sweep's expectations."""
    from steer.cli.logs import make_logger
    from steer.model.topology import read_topology
    from steer.steering.policies import PolicyError, load_policy
    if args.listen:
        from steer.present.exporter import parse_listen
        try:
            parse_listen(args.listen)
        except ValueError as e:
            raise UsageError(str(e)) from None
    web = web_config(args)
    try:
        name, policy = load_policy(args.policy, args.min_rate)
    except PolicyError as e:
        raise UserError(str(e)) from None
    log = make_logger(args.log_format)
    topo = read_topology()
    expect = None
    if args.expect_from:
        from steer.steering.expectations import ExpectationError, SweepExpectations
        try:
            expect = SweepExpectations.load(args.expect_from, topo)
        except ExpectationError as e:
            raise UserError(f"--expect-from {e}") from None
        if expect.other_host:
            log(f"steer auto: warning: --expect-from {expect.where} was measured on "
                f"{expect.other_host}, not on this host")
    return web, name, policy, log, topo, expect


def _auto_intervals(args, tracer, topo, engine):
    """The intervals the policy sees, with the readers' workloads (what static rules may select
    by, and what the log names): at --min-rate or more (and those it placed), since under
    connection churn the others would cost an object each at every interval."""
    from steer.model.busyflows import BusyIntervals
    from steer.model.flows import Intervals
    from steer.trace.netdevs import DeviceResolver
    from steer.trace.workloads import WorkloadResolver
    if args.min_rate > 0:
        return BusyIntervals(tracer, topo, args.min_rate, keep=lambda: engine.placed,
                             devices=DeviceResolver(), workloads=WorkloadResolver())
    return Intervals(tracer, topo, devices=DeviceResolver(), workloads=WorkloadResolver())


def _serve_auto(args, web, tracer, topo, steering, engine, name):
    """--listen: steer auto's own metrics, its moves included."""
    from steer.kernel.process import trim_heap
    from steer.present.exporter import SteerCollector
    return serve(SteerCollector(tracer, topo, top_k=args.top_k, flow_labels=args.flow_labels,
                                cpu_labels=args.cpu_labels,
                                steering=lambda: [steering.state()] if steering else [],
                                actions=lambda: {name: engine.actions()},
                                release_memory=trim_heap), args, web)


def cmd_reset(args) -> int:
    from steer.steering.affinity import restore
    from steer.experiment.lab import remove_stale_labs
    from steer.steering.xdp import remove_pinned, require_steering_caps
    require_steering_caps()
    done = remove_pinned() + restore()
    done += [f"removed stale lab namespace {n}" for n in remove_stale_labs()]
    print("\n".join(done) if done else "nothing to reset")
    return 0
