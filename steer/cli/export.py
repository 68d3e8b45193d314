"""steer export: the Prometheus exporter."""
from __future__ import annotations

import os
import sys
import time

from steer.cli.common import (MAX_INTERVAL, MAX_ROWS, UsageError, UserError, bounded_int,
                              latency_option, positive, start_tracer, tracer_options)


def add_parsers(sub, fmt) -> dict:
    """Adds this module's commands to SUB; returns {name: function}."""
    from steer.defaults import DEFAULT_LISTEN
    ex = sub.add_parser("export", formatter_class=fmt, help="Prometheus exporter",
                        description="Serve Prometheus metrics, read from the BPF maps at every "
                        "scrape: per-class and per-CPU totals, the top-K flows, steering rule "
                        "counters, tracer health and capabilities. Listens on loopback unless "
                        "another address is given.")
    ex.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                    help="address to serve /metrics on; :PORT listens on every address (IPv6 "
                         "and IPv4), as Go exporters do (default %(default)s)")
    series_options(ex)
    ex.add_argument("--duration", type=positive(), default=None, metavar="SECONDS",
                    help="stop after this long (default: until Ctrl-C or SIGTERM)")
    ex.add_argument("--keep-privileges", action="store_true",
                    help="keep the process's capabilities after start-up (by default it drops "
                         "them all once its programs are loaded and its port is bound, before its "
                         "first thread starts)")
    ex.add_argument("--user", metavar="USER[:GROUP]",
                    help="after start-up, become this user, with no capability (default: "
                         "steer, else nobody)\n\n"
                         "after start-up, become this user (a name or uid; its primary group "
                         "unless GROUP is given), with no supplementary groups. Started as "
                         "root, the exporter becomes the steer user (which the package and "
                         "scripts/setup.sh create; nobody where there is none) unless told "
                         "otherwise; --user root stays uid 0 (with no capability, but owning "
                         "root's files), and says so. The pinned steering rules are readable "
                         "by the steer group; another user reports steer_steering_readable 0")
    web_options(ex)
    latency_option(ex)
    tracer_options(ex)
    return {"export": cmd_export}


def series_options(p) -> None:
    """--top-k, --cpu-labels, --flow-labels: which series the metrics have, in steer export and
    in steer auto --listen alike."""
    from steer.defaults import (CPU_LABELS, DEFAULT_CPU_LABELS, DEFAULT_FLOW_LABELS, DEFAULT_TOP_K,
                                FLOW_LABEL_SETS)
    p.add_argument("--top-k", type=positive(int, 0, MAX_ROWS), default=DEFAULT_TOP_K, metavar="K",
                   help="flows (by rate) that get per-flow series")
    p.add_argument("--cpu-labels", choices=list(CPU_LABELS), default=DEFAULT_CPU_LABELS,
                   help="what the per-CPU series' cpu label names: a CPU, or an LLC's or a "
                        "socket's CPUs summed\n\n"
                        "what the cpu label of the per-CPU series names: each CPU, or the "
                        "CPUs of a last-level cache (cpu=\"llc3\") or of a socket "
                        "(cpu=\"socket0\") summed, for hosts whose CPU count would make too "
                        "many series (a 2 x 64-core host with SMT: 4,352 per-CPU series, 34 "
                        "by socket)")
    p.add_argument("--flow-labels", choices=list(FLOW_LABEL_SETS), default=DEFAULT_FLOW_LABELS,
                   help="labels of the per-flow series: five-tuple, service (proto, dst, "
                        "dport) or workload (its pod, container or unit)\n\n"
                        "labels of the per-flow series: five-tuple (a series per connection),"
                        " or service (proto, dst, dport: the connections to one local port "
                        "summed, and the replies this host gets as a client summed under "
                        "dport=\"ephemeral\", so that series do not come and go with every "
                        "connection), or workload (workload, namespace, pod, container: the "
                        "flows of a reader's pod, container or systemd unit summed, named "
                        "from its cgroup and the kubelet's /var/log/pods; flows whose reader "
                        "was not seen are in no series)")


def web_options(p) -> None:
    from steer.defaults import DEFAULT_TIMEOUT, DEFAULT_WORKERS
    p.add_argument("--web-config", metavar="FILE",
                   help="TLS, client certificates and basic auth, from an exporter-toolkit "
                        "web config file; reread on SIGHUP\n\n"
                        "TLS, client certificates and basic auth, from a file in the format "
                        "of the Prometheus exporter toolkit (node_exporter "
                        "--web.config.file): tls_server_config (cert_file, key_file, "
                        "client_ca_file, client_auth_type, min_version, max_version) and "
                        "basic_auth_users (bcrypt hashes); read at start-up, before "
                        "privileges are dropped, and again on SIGHUP (a rotated certificate, "
                        "changed users), then as the exporter's user (steer export: the steer"
                        " user, unless --user says otherwise): the files must be readable by "
                        "it, for example the steer group's (chgrp steer FILE; chmod 640 "
                        "FILE). A file that does not load then leaves the one before in "
                        "place, and says why on stderr")
    p.add_argument("--web-workers", type=bounded_int(1, 64), default=DEFAULT_WORKERS, metavar="N",
                   help="requests answered at once; four more per worker wait, the rest get "
                        "503\n\n"
                        "requests answered at once (connections that are idle, handshaking or"
                        " still sending their request hold none); four more per worker wait, "
                        "the rest are answered 503 at once")
    p.add_argument("--web-timeout", type=positive(maximum=MAX_INTERVAL), default=DEFAULT_TIMEOUT,
                   metavar="SECONDS",
                   help="longest time to read a request (TLS handshake included) or write a "
                        "reply; a kept-alive connection with no request begun is closed after "
                        "90 s")


def web_config(args):
    from steer.present.webserver import WebConfig, WebConfigError
    if not args.web_config:
        return None
    try:
        return WebConfig.load(args.web_config)
    except WebConfigError as e:
        raise UserError(f"--web-config {e}") from None


# (uid_t)-1 is no id: setresuid() takes it for "leave this one as it is"
NO_ID = 2**32 - 1


def _number(text: str) -> int | None:
    """TEXT as an id where it is one in ASCII digits (int() also reads Arabic-Indic ones)."""
    return int(text) if text.isascii() and text.isdigit() else None


DEFAULT_USERS = ("steer", "nobody")   # the first that exists, for an exporter started as root
ROOT_WARNING = ("steer export: --user root: staying uid 0 (no capability, but every file of "
                "root's is its to write); the steer user reads the pinned rules as well")


def default_user(euid: int, keep_privileges: bool, can_switch: bool) -> str | None:
    """The --user of an exporter not given one: the first of DEFAULT_USERS that exists when it
    starts as root, gives up its privileges and CAN_SWITCH (CAP_SETUID and CAP_SETGID); None
    (stay as it is) otherwise."""
    import pwd
    if euid != 0 or keep_privileges or not can_switch:
        return None
    for name in DEFAULT_USERS:
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    return None


def run_as(text: str | None) -> tuple[int, int] | None:
    """(uid, gid) of USER[:GROUP], each a name or a number; None for no change, or for root."""
    import grp
    import pwd

    from steer.model.names import printable
    if text is None:
        return None
    user, _, group = text.partition(":")
    number = _number(user)
    try:
        pw = pwd.getpwuid(number) if number is not None else pwd.getpwnam(user)
    except (KeyError, OverflowError, ValueError):
        if number is None:
            raise UsageError(f"--user {printable(text)}: no user {printable(user)!r} on this "
                             "host") from None
        pw = None
    uid = pw.pw_uid if pw else number
    gid = pw.pw_gid if pw else uid
    if group:
        gnumber = _number(group)
        try:
            gid = gnumber if gnumber is not None else grp.getgrnam(group).gr_gid
        except (KeyError, ValueError):
            raise UsageError(f"--user {printable(text)}: no group {printable(group)!r} on this "
                             "host") from None
    for what, n in (("uid", uid), ("gid", gid)):
        if n >= NO_ID:
            raise UsageError(f"--user {printable(text)}: {what} {n} is not an id (0 to "
                             f"{NO_ID - 1})")
    if uid == 0:
        if gid != 0:
            raise UsageError(f"--user {printable(text)}: root with another group than root's "
                             "keeps root's files; --user root alone, or another user")
        return None
    return uid, gid


def bind_server(collector, args, web):
    from steer.present.exporter import bind
    try:
        return bind(collector, args.listen, web, args.web_workers, args.web_timeout)
    except ValueError as e:
        raise UserError(str(e)) from None


def serve(collector, args, web=None):
    """bind and start at once, for a command that keeps its privileges (steer auto)."""
    return bind_server(collector, args, web).start()


def _count_hangups() -> list[int]:
    """SIGHUP asks for the web config again (systemctl reload); counted here, acted on in the
    main loop, outside the signal handler."""
    import signal
    count = [0]

    def hangup(signum, frame):
        count[0] += 1
    signal.signal(signal.SIGHUP, hangup)
    return count


def _reload(server, path: str | None) -> None:
    from steer.present.webserver import WebConfig, WebConfigError
    if not path:
        print("steer export: SIGHUP: no --web-config to read again", file=sys.stderr, flush=True)
        return
    try:
        web = WebConfig.load(path)
    except WebConfigError as e:
        print(f"steer export: --web-config not read again, the one before stays: {e}",
              file=sys.stderr, flush=True)
        return
    server.reload(web)
    print(f"steer export: --web-config read again: {web.describe()}", flush=True)


def _enter_pin_root() -> None:
    """Work from the pin directory, as root still, so that the pins stay in reach of the user
    the exporter becomes: bpffs's root is root's alone. Where that fails, the rules are not
    read and steer_steering_readable says why; the flows are."""
    from steer.kernel.errors import KernelError
    from steer.steering.xdp import SteerError, read_pins_from_here
    # lazy imports from a relative sys.path entry ('' for the start directory) would look in
    # the pin directory from now on
    sys.path[:] = [os.path.abspath(p) for p in sys.path]
    try:
        read_pins_from_here()
    except (KernelError, SteerError, OSError) as e:
        print(f"steer export: the pinned steering rules will not be read: {e}", file=sys.stderr,
              flush=True)


def _say_a_fallback(plan) -> None:
    """Where auto took a mode after the default (exact timing hooks every syscall of the host),
    the log says so at start, why, and what would change it."""
    if plan.timing_why:
        from steer.trace.check import remedy
        fix = remedy(plan.timing_why)
        print(f"steer export: {plan.timing} timing ({plan.timing_why})"
              + (f"; to change it: {fix}" if fix else ""), file=sys.stderr, flush=True)


def cmd_export(args) -> int:
    from steer.kernel.process import one_heap, trim_heap
    from steer.present.exporter import SteerCollector, parse_listen
    from steer.steering.xdp import pinned_state
    from steer.model.names import printable
    from steer.model.topology import read_topology
    try:
        parse_listen(args.listen)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.user and args.keep_privileges:
        raise UsageError("--user and --keep-privileges: the one gives up what the other keeps")
    from steer.kernel.privileges import CAP_SETGID, CAP_SETUID, missing_caps, require_caps
    switch = [CAP_SETUID, CAP_SETGID]
    chosen = args.user or default_user(os.geteuid(), args.keep_privileges, not missing_caps(switch))
    user = run_as(chosen)
    if user is not None:
        require_caps(switch, f"--user {chosen}")
    elif os.geteuid() == 0 and not args.keep_privileges:
        print(ROOT_WARNING if args.user else
              "steer export: staying uid 0 (no capability, but every file of root's is its to "
              "write): " + ("no CAP_SETUID and CAP_SETGID to become another user" if
                            missing_caps(switch) else "no user steer or nobody on this host"),
              file=sys.stderr, flush=True)
    if args.web_config:   # read again on SIGHUP, from the pin directory (below)
        args.web_config = os.path.abspath(args.web_config)
    web = web_config(args)
    topo = read_topology()
    one_heap()   # before any thread: the scrapes' arrays, given back after each (trim_heap)
    tracer = start_tracer(args)
    _say_a_fallback(tracer.plan)
    server = None
    try:
        collector = SteerCollector(tracer, topo, top_k=args.top_k, steering=pinned_state,
                                   flow_labels=args.flow_labels, cpu_labels=args.cpu_labels,
                                   release_memory=trim_heap)
        server = bind_server(collector, args, web)
        if not args.keep_privileges:
            # everything that needs a capability is done: the programs loaded and attached, the
            # maps and counters open, the certificates read, the port bound; and no thread
            # running (the tracer's stopped meanwhile), so that what the main thread gives up,
            # all of them have given up
            from steer.kernel.privileges import bpf_syscall_needs_capability, drop_privileges
            from steer.kernel.privileges import CAP_BPF
            keep = (CAP_BPF,) if bpf_syscall_needs_capability() else ()
            if user is not None:
                _enter_pin_root()
            with tracer.threads_stopped():
                walker = tracer.walk_apart()   # before the fork's privileges go too
                drop_privileges(user, keep)
            if walker:
                print(f"steer export: this kernel refused the sockets' flush iterator: a process "
                      f"of steer's (pid {walker}) keeps CAP_SYS_ADMIN to walk each network "
                      "namespace's TCP sockets before each read", file=sys.stderr, flush=True)
            if keep:
                print("steer export: kept CAP_BPF alone: before Linux 6.5, with "
                      "kernel.unprivileged_bpf_disabled set, reading an open map needs it",
                      file=sys.stderr, flush=True)
        server.start()
        scheme = "https" if web and web.tls else "http"
        as_user = "" if user is None else f" as {printable(chosen)} (uid {user[0]})"
        print(f"steer export: serving {scheme}://{args.listen}/metrics"
              + (f" ({web.describe()})" if web else "") + as_user, flush=True)
        end = None if args.duration is None else time.monotonic() + args.duration
        hangups = _count_hangups()
        seen = 0
        try:
            while end is None or time.monotonic() < end:
                time.sleep(0.2)
                if hangups[0] != seen:
                    seen = hangups[0]
                    _reload(server, args.web_config)
        except KeyboardInterrupt:
            pass
    finally:
        if server:
            server.close()
        tracer.stop()
    return 0
