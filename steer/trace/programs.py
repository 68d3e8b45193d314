"""Which of flowtrace's BPF programs each timing mode loads, which of them it cannot do without,
and what each figure steer shows comes from; and, from the programs this kernel refused, the plan
to load and the state of every figure: works, degraded or missing, and why.

Pure: the tracer (steer.trace.tracer) carries a plan out and asks for the next one after each refusal,
`steer check` prints one. Kernels differ in what they accept (version, config, lockdown, an LSM's
policy): no single refused program may take a command down, so each program outside a mode's core
is optional, and each figure says which refusal it lost, or what stood in for the refused part.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from steer.abi.flowtrace import FT_COUNT_TCP, FT_COUNT_UDP
from steer.model.capabilities import DEGRADED, MISSING, WORKS, Figure

# The timing modes, in the order --timing auto tries them. sampled: a cpu-clock sample per CPU,
# charged to the flow the CPU works on. exact: clock reads at every softirq, skb and receive
# syscall. counts: bytes, packets and the CPUs that processed them, no CPU time, for a kernel that
# refuses both modes' cores.
TIMINGS = ("sampled", "exact", "counts")
TIMING_CHOICES = ("auto", *TIMINGS)

# the programs without which a mode can say nothing
CORE = {
    "sampled": ("ft_sample", "ft_skb_hint"),
    "exact": ("ft_softirq_entry", "ft_softirq_exit", "ft_netif_receive_skb"),
    "counts": ("ft_skb_hint",),
}

# each program's hook, as libbpf names its section (tests/artifacts/test_build.py checks the table against
# bpf/flowtrace.bpf.c): what users and `steer check` are told was refused
SECTIONS = {
    "ft_sample": "perf_event",
    "ft_sample_withheld": "tp_btf/hrtimer_expire_exit",
    "ft_skb_hint": "tp_btf/netif_receive_skb",
    "ft_softirq_entry": "tp_btf/softirq_entry",
    "ft_softirq_exit": "tp_btf/softirq_exit",
    "ft_netif_receive_skb": "tp_btf/netif_receive_skb",
    "ft_irq_handler_entry": "tp_btf/irq_handler_entry",
    "ft_irq_handler_exit": "tp_btf/irq_handler_exit",
    "ft_napi_poll": "tp_btf/napi_poll",
    "ft_kfree_skb": "tp_btf/kfree_skb",
    "ft_xdp_redirect": "tp_btf/xdp_redirect",
    "ft_xdp_cpumap_kthread": "tp_btf/xdp_cpumap_kthread",
    "ft_xdp_cpumap_enqueue": "tp_btf/xdp_cpumap_enqueue",
    "ft_tcp_state": "tp_btf/inet_sock_set_state",
    "ft_tcp_destroy": "tp_btf/tcp_destroy_sock",
    "ft_flush_socks": "iter/bpf_sk_storage_map",
    "ft_tcp_sockets": "iter/tcp",
    "ft_sock_recv_length": "tp_btf/sock_recv_length",
    "ft_udp_recv_length": "tp_btf/sock_recv_length",
    "ft_tcp_recvmsg_exit": "fexit/tcp_recvmsg",
    "ft_udp_recvmsg_exit": "fexit/udp_recvmsg",
    "ft_udpv6_recvmsg_exit": "fexit/udpv6_recvmsg",
    "ft_tcp_recvmsg_entry": "kprobe/tcp_recvmsg",
    "ft_tcp_recvmsg_return": "kretprobe/tcp_recvmsg",
    "ft_udp_recvmsg_entry": "kprobe/udp_recvmsg",
    "ft_udp_recvmsg_return": "kretprobe/udp_recvmsg",
    "ft_udpv6_recvmsg_entry": "kprobe/udpv6_recvmsg",
    "ft_udpv6_recvmsg_return": "kretprobe/udpv6_recvmsg",
    "ft_sys_enter": "tp_btf/sys_enter",
    "ft_sys_exit": "tp_btf/sys_exit",
    "ft_sched_switch": "tp_btf/sched_switch",
    "ft_lat_arrival": "tp_btf/netif_receive_skb",
    "ft_lat_read": "tp_btf/skb_copy_datagram_iovec",
    "ft_lat_queued": "tp_btf/sk_data_ready",
    "ft_lat_udp_read": "tp_btf/sock_recv_length",
    "ft_lat_waking": "tp_btf/sched_waking",
    "ft_lat_switch": "tp_btf/sched_switch",
}
ALL_PROGRAMS = tuple(SECTIONS)
# its maps (tests/unit/test_programs.py checks them against the source): a map type the kernel lacks
# (task storage before 5.11) is not created, and the programs that use it are refused in turn
MAPS = ("flows", "cpu_totals", "windows", "sampler_prog", "udp_seen", "udp_ring", "llc_counters", "ref_counters",
        "instruction_counters", "cycle_counters", "cpu_states", "readers", "napi_polls", "socks",
        "recv_calls", "sampled_runtime", "stack_scratch", "profile_text", "profile", "lat_flows",
        "lat_zero", "lat_arriving", "lat_socks", "lat_waking", "lat_woken")
OPTIONAL = tuple(p for p in ALL_PROGRAMS if not any(p in core for core in CORE.values()))
# sampled timing: the sampler's clock expiries a kernel runs no program for (bpf/flowtrace/
# withheld.bpf.h), counted and charged from the timer itself
WITHHELD = "ft_sample_withheld"

# the per-CPU and per-device figures, in every mode
DEVICE_PROGRAMS = ("ft_napi_poll", "ft_irq_handler_entry", "ft_irq_handler_exit", "ft_kfree_skb",
                   "ft_xdp_cpumap_enqueue")
# sampled timing's socket storage: a TCP socket's counts wait there until a flush (flowtrace.bpf.c,
# sock_state)
SOCKET_PROGRAMS = ("ft_tcp_state", "ft_tcp_destroy", "ft_flush_socks", "ft_tcp_sockets")
FLUSH_ITERATOR = "ft_flush_socks"
TCP_ITERATOR = "ft_tcp_sockets"
# exact timing's context bookkeeping: cpumap kthreads, and the reader's syscalls
SYSCALL_PROGRAMS = ("ft_sys_enter", "ft_sys_exit")
EXACT_PROGRAMS = ("ft_xdp_redirect", "ft_xdp_cpumap_kthread", "ft_sched_switch", *SYSCALL_PROGRAMS)
# --latency, in any mode: an skb's arrival; a TCP read's copy of its data; a UDP datagram's
# enqueue on its socket and the read that takes it off; the reader's wake-up by them
LATENCY_UDP = ("ft_lat_queued", "ft_lat_udp_read")
LATENCY_WAKES = ("ft_lat_waking", "ft_lat_switch")
LATENCY_PROGRAMS = ("ft_lat_arrival", "ft_lat_read", *LATENCY_UDP, *LATENCY_WAKES)
# and their maps: not made where --latency was not asked for
LATENCY_MAPS = ("lat_flows", "lat_zero", "lat_arriving", "lat_socks", "lat_waking", "lat_woken")

# How the application side learns which socket a read was from and how many bytes it got:
# - counters (sampled timing): no program per TCP read. A TCP reader's bytes are the socket's own
#   account (copied_seq against bytes_received, read at each flush), the reader's CPU and process
#   come from the samples; UDP reads by fexit on udp(v6)_recvmsg, else (a kernel that refuses
#   fexit) by the sock_recv_length tracepoint, whose program leaves a TCP read at its first test;
# - the sock_recv_length tracepoint (6.3+): one program per receive call of every socket of the
#   host; else the exit of the protocols' recvmsg functions by fexit (BPF trampolines), else by
#   kretprobe. These count calls, and the exact mode times the syscalls around them.
RECV_FUNCS = ("tcp_recvmsg", "udp_recvmsg", "udpv6_recvmsg")
HOOKS = {
    "counters": ("ft_udp_recvmsg_exit", "ft_udpv6_recvmsg_exit"),
    "tracepoint": ("ft_sock_recv_length",),
    "fexit": tuple(f"ft_{f}_exit" for f in RECV_FUNCS),
    "kprobe": tuple(p for f in RECV_FUNCS for p in (f"ft_{f}_entry", f"ft_{f}_return")),
}
# the kernel function each fexit and kprobe program hooks
HOOKED = {p: f for f in RECV_FUNCS for p in (*HOOKS["fexit"], *HOOKS["kprobe"]) if f"ft_{f}_" in p}
# the counters hook's UDP reads where the kernel refuses either of its fexit programs
UDP_READS_FALLBACK = "ft_udp_recv_length"
# the programs without which a hook does not count TCP reads (its UDP ones are optional in it)
HOOK_CORE = {"counters": (), "tracepoint": ("ft_sock_recv_length",),
             "fexit": ("ft_tcp_recvmsg_exit",),
             "kprobe": ("ft_tcp_recvmsg_entry", "ft_tcp_recvmsg_return")}
HOOK_CHOICES = ("auto", *HOOKS, "off")
HOOK_LABELS = {"counters": "the TCP sockets' own counters",
               "tracepoint": "sock:sock_recv_length",
               "fexit": "fexit on " + "/".join(RECV_FUNCS),
               "kprobe": "kretprobe on " + "/".join(RECV_FUNCS)}
# what --app-hook auto tries, in order, per mode
AUTO_HOOKS = {"sampled": ("counters",), "counts": ("counters",),
              "exact": ("tracepoint", "fexit", "kprobe")}
# the hooks that hand the programs a typed socket, which can carry socket storage
SOCKET_HOOKS = ("counters", "tracepoint", "fexit")

# every figure a flow or CPU shows that depends on which programs run, in users' terms
FIGURES = {
    "kernel_time": "each flow's kernel receive time (NET_RX softirq, threaded NAPI)",
    "kthread_time": "a steered flow's time in its cpumap kthread",
    "tcp_rx_bytes": "TCP bytes and packets received, per flow",
    "udp_rx_bytes": "UDP bytes and packets received, per flow",
    "tcp_app_bytes": "TCP bytes the reader got",
    "udp_app_bytes": "UDP bytes the reader got",
    "reader": "the reader's CPU and process (and so the flow's class)",
    "app_time": "the reader's receive time",
    "app_calls": "receive calls",
    "open_connections": "TCP connections open before steer started",
    "drops": "packets dropped per flow, with the reason",
    "napi_polls": "NAPI polls per CPU and device queue",
    "hardirqs": "device interrupt time per CPU",
    "cpumap_drops": "frames a steering cpumap dropped because its queue to the target CPU was full",
    "latency": "how long received data waits from the stack to the reader's copy, per flow",
}
# and in a few words, for tables and the live view's degraded line
FIGURE_NAMES = {"kernel_time": "kernel time", "kthread_time": "kthread time",
                "tcp_rx_bytes": "TCP rx bytes", "udp_rx_bytes": "UDP rx bytes",
                "tcp_app_bytes": "TCP app bytes", "udp_app_bytes": "UDP app bytes",
                "reader": "reader CPU", "app_time": "app time", "app_calls": "calls",
                "open_connections": "connections open at start", "drops": "drops",
                "napi_polls": "NAPI polls", "hardirqs": "IRQ time",
                "cpumap_drops": "cpumap queue drops", "latency": "latency (--latency)"}


class PlanError(Exception):
    """What was asked for cannot run on this kernel; str() is the one line to show."""


@dataclass(frozen=True)
class Plan:
    """What to load: the mode, the reader's hook, the programs and the settings they depend on."""
    timing: str
    hook: str
    programs: frozenset
    skb_count: int              # ft_config.skb_count: FT_COUNT_* bits
    tcp_walk: bool              # run ft_tcp_sockets in every network namespace before each read
    figures: dict               # name -> Figure
    timing_why: str = ""        # why auto did not take the modes before this one
    hook_why: str = ""          # why auto did not take the hooks before this one


_REFUSED = re.compile(r"the kernel refused (\S+) \((.*)\)$")


def refusals(names, refused: dict) -> str:
    """The reasons for those of NAMES that were refused, each once, in order; the kernel's
    refusals for one reason as one: "the kernel refused fexit/a, fexit/b (EPERM: ...)"."""
    out: list[str] = []
    hooks: dict[str, list[str]] = {}   # the kernel's answer -> the hooks it refused
    for n in names:
        why = refused.get(n)
        m = _REFUSED.match(why or "")
        if m:
            if m.group(2) not in hooks:
                hooks[m.group(2)] = []
                out.append(m.group(2))
            hooks[m.group(2)].append(m.group(1))
        elif why and why not in out:
            out.append(why)
    return "; ".join(f"the kernel refused {', '.join(hooks[w])} ({w})" if w in hooks else w
                     for w in out)


def _first(options, needs, refused: dict, what: str):
    """The first of OPTIONS none of whose needs(option) is refused, and why the earlier ones were
    passed over (None where every one was)."""
    passed = []
    for option in options:
        lost = [p for p in needs(option) if p in refused]
        if not lost:
            return option, "; ".join(passed)
        passed.append(f"{what} {option}: {refusals(lost, refused)}")
    return None, "; ".join(passed)


def plan(timing: str, app_hook: str, refused: dict[str, str], latency: bool = False) -> Plan:
    """The plan for TIMING (one of TIMING_CHOICES) and APP_HOOK (one of HOOK_CHOICES) on a kernel
    that refused the programs in REFUSED (name -> why, a phrase naming the hook), with the
    latency programs where LATENCY. Raises PlanError where the mode or hook asked for by name
    cannot run, or no mode can."""
    modes = TIMINGS if timing == "auto" else (timing,)
    mode, timing_why = _first(modes, lambda m: CORE[m], refused, "--timing")
    if mode is None:
        raise PlanError(timing_why if timing == "auto" else
                        f"{timing_why.split(': ', 1)[1]} (--timing auto takes what this kernel runs)")
    if app_hook == "counters" and mode == "exact":
        raise PlanError("--app-hook counters needs --timing sampled: exact timing brackets each "
                        "receive call, which takes a program per read"
                        + (f" (and {timing_why})" if timing_why else ""))
    hook_why = ""
    if app_hook == "off":
        hook = "off"
    else:
        hooks = AUTO_HOOKS[mode] if app_hook == "auto" else (app_hook,)
        hook, hook_why = _first(hooks, lambda h: HOOK_CORE[h], refused, "--app-hook")
        if hook is None:
            if app_hook != "auto":
                raise PlanError(f"--app-hook {app_hook}: this kernel refused the "
                                f"{HOOK_LABELS[app_hook]} programs: "
                                f"{hook_why.split(': ', 1)[1]} (--app-hook auto takes what it runs)")
            hook = "off"

    wanted = set(CORE[mode]) | set(DEVICE_PROGRAMS) | set(HOOKS.get(hook, ()))
    if hook == "counters" and any(p in refused for p in HOOKS["counters"]) \
            and UDP_READS_FALLBACK not in refused:
        # one program for both families, never beside an fexit one (each read counted once)
        wanted = (wanted - set(HOOKS["counters"])) | {UDP_READS_FALLBACK}
    if mode == "sampled":
        wanted.add(WITHHELD)
    if mode == "exact":
        wanted |= {"ft_xdp_redirect", "ft_xdp_cpumap_kthread", "ft_sched_switch"}
        if hook != "off":
            wanted |= set(SYSCALL_PROGRAMS)
    elif hook in SOCKET_HOOKS:
        wanted |= set(SOCKET_PROGRAMS)
    if latency:
        wanted |= set(LATENCY_PROGRAMS)
    programs = frozenset(wanted - set(refused))

    skb_count, tcp_walk = 0, False
    if mode != "exact":
        skb_count = FT_COUNT_UDP
        sockets = hook in SOCKET_HOOKS
        tcp_walk = sockets and TCP_ITERATOR in programs and (
            FLUSH_ITERATOR not in programs or (hook == "counters" and "ft_tcp_state" not in programs))
        live = sockets and (FLUSH_ITERATOR in programs or tcp_walk)
        # with socket counters a connection is counted from when its storage is made: at its
        # opening by ft_tcp_state, else only from the first walk that finds it
        whole = hook != "counters" or "ft_tcp_state" in programs
        if not (live and whole) or mode == "counts":
            # the sockets' counts would come late, or not at all; without time, the skbs are
            # also the only sign of where a flow's kernel work runs
            skb_count |= FT_COUNT_TCP
    figures = _figures(mode, hook, programs, refused, skb_count, tcp_walk, timing_why,
                       _Lost(hook_why, "--app-hook off" if app_hook == "off" else ""))
    if latency:   # a figure of its own only where asked for
        figures["latency"] = _latency(programs, refused)
    return Plan(mode, hook, programs, skb_count, tcp_walk, figures, timing_why, hook_why)


@dataclass(frozen=True)
class _Lost:
    """Why a figure is lost: the kernel's refusals behind it (KERNEL), else the option that
    left it out (OPTION)."""
    kernel: str = ""
    option: str = ""

    def __or__(self, other: "_Lost") -> "_Lost":
        """The first reason of the two: the kernel's, else the option's."""
        return _Lost(self.kernel or other.kernel, "" if self.kernel or other.kernel
                     else self.option or other.option)

    def figure(self, state: str, how: str) -> Figure:
        return Figure(state, how, self.kernel or self.option, kernel=bool(self.kernel))


def _state(ok: bool, how: str, lost: str, why: _Lost) -> Figure:
    return Figure(WORKS, how) if ok else why.figure(MISSING, lost)


def _figures(mode, hook, programs, refused, skb_count, tcp_walk, timing_why: str,
             hook_why: _Lost) -> dict:
    has = programs.__contains__
    why = lambda *names: _Lost(refusals(names, refused))   # noqa: E731
    timing_lost = _Lost(timing_why)
    f: dict[str, Figure] = {}
    sampled, exact = mode == "sampled", mode == "exact"
    reads = hook in ("tracepoint", "fexit", "kprobe")

    # the kernel side
    if exact:
        f["kernel_time"] = Figure(WORKS, "clock reads at each softirq and skb") \
            if has("ft_sched_switch") else why("ft_sched_switch").figure(
                DEGRADED, "threaded NAPI kthreads are charged until the next softirq, past their "
                "sleep")
        f["kthread_time"] = _state(has("ft_sched_switch"), "clock reads at each skb and context "
                                   "switch of the kthread", "not measured", why("ft_sched_switch"))
    elif sampled and not has(WITHHELD):
        # only where a kernel withholds samples is anything lost: it cannot be seen without it
        f["kernel_time"] = why(WITHHELD).figure(
            DEGRADED, "cpu-clock samples; those a kernel keeps from the sampler while a CPU "
            "idles (NET_RX on the idle task) go uncounted")
        f["kthread_time"] = Figure(WORKS, "cpu-clock samples")
    else:
        f["kernel_time"] = _state(sampled, "cpu-clock samples", "not measured", timing_lost)
        f["kthread_time"] = _state(sampled, "cpu-clock samples", "not measured", timing_lost)
    per_skb = f"counted per skb ({SECTIONS['ft_skb_hint']})"
    f["udp_rx_bytes"] = Figure(WORKS, "counted per skb" if exact else per_skb)
    if exact:
        f["tcp_rx_bytes"] = Figure(WORKS, "counted per skb")
    elif skb_count & FT_COUNT_TCP:
        f["tcp_rx_bytes"] = (why(*SOCKET_PROGRAMS) | hook_why).figure(
            WORKS, per_skb + ", in place of the sockets' counters")
    else:
        f["tcp_rx_bytes"] = (why(FLUSH_ITERATOR) if tcp_walk else _Lost()).figure(
            WORKS, "the sockets' own counters, " + _flushed_by(tcp_walk))

    # the reader
    if sampled:
        f["reader"] = Figure(WORKS, "cpu-clock samples in its receive calls")
        f["app_time"] = Figure(WORKS, "cpu-clock samples")
    else:
        f["reader"] = _state(reads, "each receive call", "not known",
                             hook_why | _Lost(option="no receive hook with --app-hook counters"))
        timed = reads and exact and all(has(p) for p in (*SYSCALL_PROGRAMS, "ft_sched_switch"))
        f["app_time"] = _state(timed, "clock reads at the receive syscalls", "not measured",
                               why(*SYSCALL_PROGRAMS, "ft_sched_switch") | timing_lost | hook_why)
    f["app_calls"] = _state(reads, "each receive call", "not counted",
                            hook_why if hook == "off" else
                            _Lost(option="--app-hook counters runs no program per read "
                                  "(--app-hook tracepoint counts calls)"))
    f["tcp_app_bytes"], f["open_connections"] = _tcp_reads(mode, hook, programs, refused,
                                                           tcp_walk, hook_why)
    f["udp_app_bytes"] = _udp_reads(hook, programs, refused, hook_why)

    # devices and CPUs
    f["drops"] = _state(has("ft_kfree_skb"), SECTIONS["ft_kfree_skb"], "not counted",
                        why("ft_kfree_skb"))
    f["napi_polls"] = _state(has("ft_napi_poll"), SECTIONS["ft_napi_poll"], "not counted",
                             why("ft_napi_poll"))
    f["cpumap_drops"] = _state(has("ft_xdp_cpumap_enqueue"), SECTIONS["ft_xdp_cpumap_enqueue"],
                               "not counted", why("ft_xdp_cpumap_enqueue"))
    irq = ("ft_irq_handler_entry", "ft_irq_handler_exit")
    f["hardirqs"] = _state(all(map(has, irq)), "irq:irq_handler_entry/exit", "not measured",
                           why(*irq))
    return f


def _latency(programs, refused) -> Figure:
    """--latency's figure: the arrival's program, with each transport's read programs and the
    reader's wake-ups."""
    lost = lambda *names: _Lost(refusals(names, refused))   # noqa: E731
    if "ft_lat_arrival" not in programs:
        return lost("ft_lat_arrival").figure(MISSING, "not measured")
    how = ("an skb per flow every 100 us at most (fewer where its data waits long), from its "
           "arrival (net:netif_receive_skb) to the read that takes it")
    tcp, udp = "ft_lat_read" in programs, all(p in programs for p in LATENCY_UDP)
    wakes = all(p in programs for p in LATENCY_WAKES) and "ft_lat_queued" in programs
    if not tcp and not udp:
        return lost("ft_lat_read", *LATENCY_UDP).figure(MISSING, "not measured")
    short = [p for p in ("ft_lat_read", *LATENCY_UDP, *LATENCY_WAKES) if p not in programs]
    if short:
        gaps = [g for g, ok in (("UDP reads", udp), ("TCP reads", tcp),
                                ("the wait's two stages", "ft_lat_queued" in programs),
                                ("the reader's wake-ups", wakes)) if not ok]
        return lost(*short).figure(DEGRADED, how + ": not " + ", ".join(gaps))
    return Figure(WORKS, how + " (TCP: skb:skb_copy_datagram_iovec; UDP: sock:sk_data_ready "
                  "and sock:sock_recv_length), and the reader's wake-up by it (sched_waking to "
                  "sched_switch)")


def _flushed_by(tcp_walk: bool) -> str:
    # the walk finds the sockets in the TCP hash tables: one TCP has closed has left them
    return ("flushed by a walk of iter/tcp in each network namespace before each read (what is "
            "read from a connection TCP has closed: when its socket is closed)" if tcp_walk
            else "flushed before each read (iter/bpf_sk_storage_map)")


def _tcp_reads(mode, hook, programs, refused, tcp_walk, hook_why) -> tuple[Figure, Figure]:
    """tcp_app_bytes and open_connections."""
    has = programs.__contains__
    why = lambda *names: _Lost(refusals(names, refused))   # noqa: E731
    if hook == "off":
        return hook_why.figure(MISSING, "not counted"), hook_why.figure(MISSING, "not counted")
    if hook not in SOCKET_HOOKS or mode == "exact":
        each = Figure(WORKS, f"each read ({HOOK_LABELS[hook]})")
        return each, Figure(WORKS, "counted from their first read")
    live = has(FLUSH_ITERATOR) or tcp_walk
    flushed = _flushed_by(tcp_walk)
    if hook == "counters":
        opened = Figure(WORKS, "counted from the start (iter/tcp)") if has(TCP_ITERATOR) else \
            why(TCP_ITERATOR).figure(MISSING, "not counted")
        source = "the sockets' own counters"
        if not has("ft_tcp_state") and not has(TCP_ITERATOR):
            return why("ft_tcp_state", TCP_ITERATOR).figure(MISSING, "not counted"), opened
        if not has("ft_tcp_state"):
            return why("ft_tcp_state").figure(
                DEGRADED, f"{source}, {flushed}; a connection is counted from the first walk "
                "that finds it, so one opened and closed between two reads is not"), opened
    else:
        opened = Figure(WORKS, "counted from their first read")
        source = f"each read ({HOOK_LABELS[hook]})"
    if live:
        return (why(FLUSH_ITERATOR) if tcp_walk else _Lost()).figure(
            WORKS, f"{source}, {flushed}"), opened
    return why(FLUSH_ITERATOR, TCP_ITERATOR).figure(
        DEGRADED, f"{source}, counted when the connection closes"
        + (", and at end of file or a change of the reader's CPU" if hook != "counters" else "")), \
        opened


def _udp_reads(hook, programs, refused, hook_why: _Lost) -> Figure:
    if hook == "off":
        return hook_why.figure(MISSING, "not counted")
    if hook == "tracepoint":
        return Figure(WORKS, f"each read ({HOOK_LABELS[hook]})")
    if hook == "counters" and UDP_READS_FALLBACK in programs:
        # on demand (tracer.UDP_READS_POLL, UDP_READS_IDLE): not a program per TCP read always
        return _Lost(refusals(HOOKS["counters"], refused)).figure(
            DEGRADED, f"each read by {HOOK_LABELS['tracepoint']}, on its hook while UDP datagrams "
            "arrive (every socket's reads pass it then): not the first moment's after 10 s "
            "without one")
    mine = [p for p in HOOKS[hook] if "udp" in p]
    v4 = [p for p in mine if "udpv6" not in p]
    label = "fexit" if hook in ("counters", "fexit") else "kretprobe"
    lost = _Lost(refusals(mine, refused))
    if not all(p in programs for p in v4):
        return (_Lost(refusals([*mine, UDP_READS_FALLBACK], refused)) if hook == "counters"
                else lost).figure(MISSING, "not counted")
    if not all(p in programs for p in mine):
        return lost.figure(DEGRADED, f"IPv4 only, by {label} on udp_recvmsg")
    return Figure(WORKS, f"each read, by {label} on udp_recvmsg/udpv6_recvmsg")


def forced_refusals(spec: str | None) -> set[str]:
    """The programs and maps STEER_TEST_REFUSE names (comma-separated; 'optional' stands for every
    program outside the modes' cores): the tests' stand-in for a kernel that refuses them. A map
    is not created, and the kernel itself then refuses the programs that use it."""
    if not spec:
        return set()
    names = {n.strip() for n in spec.split(",") if n.strip()}
    unknown = names - set(ALL_PROGRAMS) - set(MAPS) - {"optional"}
    if unknown:
        raise PlanError(f"STEER_TEST_REFUSE names no program or map {', '.join(sorted(unknown))} "
                        f"(flowtrace's programs are {', '.join(ALL_PROGRAMS)}; its maps "
                        f"{', '.join(MAPS)}; or 'optional')")
    if "optional" in names:
        names = (names - {"optional"}) | set(OPTIONAL)
    return names
