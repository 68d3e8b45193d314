"""What every command shares: its errors and exit codes, argument types, the tracer's and
the views' options, starting the tracer, and how a stopped command exits."""
from __future__ import annotations

import argparse
import signal

from steer.kernel.signals import interrupt

EXIT_ERROR, EXIT_USAGE = 1, 2


class UserError(Exception):
    """Something the user can fix; shown as one line."""


class UsageError(UserError):
    """An argument that does not parse or does not fit with the others: exit 2, as argparse's."""


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line (no usage block) and exits 2."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def number(kind=float, lo: float = 0, hi: float = float("inf"), lo_open: bool = False):
    """An argparse type: a KIND (int or float) from LO (excluded with LO_OPEN) to HI, in ASCII
    digits, finite; anything else is a one-line usage error, never a traceback."""
    from steer.model.units import parse_float, parse_int

    def parse(text):
        try:
            v = parse_int(text) if kind is int else parse_float(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        if v < lo or (lo_open and v == lo) or v > hi:
            low = f"greater than {_num(lo)}" if lo_open else f"at least {_num(lo)}"
            high = f" and at most {_num(hi)}" if hi != float("inf") else ""
            raise argparse.ArgumentTypeError(f"must be {low}{high}: {text!r}")
        return v
    return parse


def _num(v: float) -> str:
    return f"{int(v):,}" if float(v).is_integer() and abs(v) < 1e15 else f"{v:g}"


def device_name(text: str) -> str:
    """An argparse type: a name the kernel would take for a network device."""
    from steer.model.names import ifname_error, printable
    if (why := ifname_error(text)) is not None:
        raise argparse.ArgumentTypeError(f"{printable(repr(text))} is not a device name: {why}")
    return text


def netns_name(text: str) -> str:
    """An argparse type: a named network namespace (under /run/netns) or a path to one."""
    from steer.model.names import netns_error, printable
    if "/" not in text and (why := netns_error(text)) is not None:
        raise argparse.ArgumentTypeError(f"{printable(repr(text))} is not a namespace name: {why}")
    return text


MAX_SECONDS = 10 * 365 * 86400    # a duration or timeout: ten years is "until stopped" enough
MAX_INTERVAL = 3600.0
MAX_ROWS = 10**6                  # --limit, --top-k
PID_MAX_LIMIT = 1 << 22           # the kernel's ceiling of pid_max
MAX_QUEUE = 4095                  # queue numbers: below the kernel's 4096 queues a device


def positive(kind=float, minimum=0.0, maximum: float = MAX_SECONDS):
    """More than MINIMUM (0), at most MAXIMUM."""
    return number(kind, minimum, maximum, lo_open=True)


def bounded_int(lo: int, hi: int):
    return number(int, lo, hi)


MAX_FLOWS_PER_CELL = 64   # iperf3 pairs a lab cell starts at once


def flow_counts(text):
    """'1,8,16,24' -> [1, 8, 16, 24]: parallel flows per sweep cell."""
    from steer.model.units import parse_int
    try:
        counts = [parse_int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of flow counts: {text!r} (e.g. 1,8,16,24)") from None
    if not counts or any(not 1 <= n <= MAX_FLOWS_PER_CELL for n in counts):
        raise argparse.ArgumentTypeError(f"flow counts go from 1 to {MAX_FLOWS_PER_CELL}: {text!r}")
    return sorted(set(counts))


def pause_values(text):
    from steer.experiment.devsettings import parse_pause
    try:
        return parse_pause(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def offload_settings(text):
    from steer.experiment.devsettings import parse_offloads
    try:
        return parse_offloads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def rate(text):
    from steer.model.units import parse_rate
    try:
        return parse_rate(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


# --windows left as it is: steer.trace.windows.default_windows() of the timing
WINDOWS_BY_TIMING = "auto"


def windows_arg(text: str):
    from steer.trace.windows import WindowsError, parse_windows
    if text == WINDOWS_BY_TIMING:
        return WINDOWS_BY_TIMING
    try:
        return parse_windows(text)
    except WindowsError as e:
        # (argparse names the option)
        raise argparse.ArgumentTypeError(str(e).replace("--windows ", "", 1)
                                         .removeprefix("--windows: ")) from None


def windows_option(g) -> None:
    """--windows, of the tracer's options"""
    g.add_argument("--windows", type=windows_arg, default=WINDOWS_BY_TIMING, metavar="W/C",
                   help="with --timing sampled, put the per-packet programs on their hooks "
                        "for W ms of every C ms, or always (off) (default: 50/500 with "
                        "--timing sampled or auto)\n\n"
                        "with --timing sampled, put the programs that run per packet, per read "
                        "and per interrupt on their hooks for a window of W ms in every cycle of"
                        " C ms (C a multiple of W), each event there counting for C/W; off: on "
                        "their hooks all the time. On this kind of VM a program on a packet "
                        "tracepoint costs its dispatch even when it does nothing (~3.5%% of a "
                        "one-byte TCP round trip each), and 50/500 takes that cost down tenfold."
                        " The sampler runs all the time: TCP bytes and the CPUs' times stay as "
                        "with off; UDP bytes, NAPI polls, IRQ time and the split of a CPU's "
                        "receive time among its flows become estimates from the windows, and a "
                        "flow that saturates a CPU reads low by what the programs cost it inside "
                        "them (docs/how-it-measures.md). Reads wait for the gap between windows "
                        "(up to C ms). Off makes UDP bytes exact and reads immediate at the "
                        "per-packet cost (default: 50/500 with --timing sampled or auto, "
                        "which takes sampled where the kernel runs it; off with exact or counts)")


def tracer_options(p: argparse.ArgumentParser, timing: str | None = None) -> None:
    """TIMING: this command's default timing mode, where it is not the always-on one."""
    from steer.defaults import (COUNTER_MODES, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_FLOWS,
                                DEFAULT_SAMPLE_HZ, DEFAULT_TIMING, MAX_FLOWS_LIMIT, MAX_SAMPLE_HZ)
    from steer.trace.programs import HOOK_CHOICES, TIMING_CHOICES
    g = p.add_argument_group("tracer")
    g.add_argument("--timing", choices=TIMING_CHOICES, default=timing or DEFAULT_TIMING,
                   help="how CPU time is measured: sampled (cheap, estimates), exact (every "
                        "event, costly), counts (no time) or auto\n\n"
                        "how CPU time is measured. sampled: a cpu-clock sample per CPU every "
                        "1/--sample-hz s, charged to the flow the CPU works on; per-flow "
                        "seconds are estimates, bytes are exact, and nothing runs on "
                        "unrelated system calls (cheap enough to leave on). exact: clock "
                        "reads at every softirq, skb and receive syscall; exact to the "
                        "nanosecond, but it hooks every system call of the host (about 2x the"
                        " cost of a trivial one) and every packet (docs/performance.md). "
                        "counts: bytes, packets and the CPUs that processed them, no CPU "
                        "time. auto: the first of sampled, exact, counts whose core programs "
                        "this kernel runs (capabilities and `steer check` say which it took, "
                        "and why) (default: %(default)s)")
    g.add_argument("--sample-hz", type=bounded_int(1, MAX_SAMPLE_HZ), default=DEFAULT_SAMPLE_HZ,
                   metavar="HZ",
                   help="samples per second per busy CPU with --timing sampled; a rate out of"
                        " step with timers (99, 997)\n\n"
                        "samples per second per busy CPU with --timing sampled; more is more "
                        "precise for small flows and costs more. Take a rate out of step with"
                        " the timers work runs on (99, 997: not 100 or 1000, which lock in "
                        "step with a 1 ms or 10 ms timer and then see that work never or "
                        "always) (default: %(default)s)")
    windows_option(g)
    g.add_argument("--max-flows", type=bounded_int(1, MAX_FLOWS_LIMIT), default=DEFAULT_MAX_FLOWS,
                   metavar="N",
                   help="bound of the kernel flow map, in (flow, CPU) entries; the least recently "
                        "used are evicted beyond it, and counted (default: %(default)s)")
    g.add_argument("--counters", choices=COUNTER_MODES, default="auto",
                   help="PMU events (LLC misses and references, instructions, cycles) per "
                        "flow side: auto, hardware, software or off\n\n"
                        "PMU events per CPU: LLC misses and references (the hit ratio), "
                        "instructions, cycles; charged to each flow's kernel and application "
                        "side (with --timing exact, LLC misses alone). auto: those the host's"
                        " PMU has, 'unavailable' and why otherwise (most VMs); hardware: all "
                        "of them or an error; software: cpu-clock in each event's place, to "
                        "check the path where there is no PMU (default: %(default)s)")
    g.add_argument("--idle-timeout", type=positive(), default=DEFAULT_IDLE_TIMEOUT,
                   metavar="SECONDS",
                   help="drop a flow's entries after this long without packets or reads (they are "
                        "reported one last time first)")
    g.add_argument("--app-hook", choices=HOOK_CHOICES, default="auto",
                   help="how the reader's bytes are counted: socket counters (no program per "
                        "read) or a program per read\n\n"
                        "how the reader's bytes are counted. counters (sampled timing): no "
                        "program per read; a TCP reader's bytes are its socket's own count, "
                        "its CPU and process come from the samples, UDP reads are counted by "
                        "fexit on udp_recvmsg where the kernel allows it; no count of calls. "
                        "tracepoint (sock:sock_recv_length, kernel 6.3+), fexit or kprobe (a "
                        "kretprobe on tcp_recvmsg/udp_recvmsg/udpv6_recvmsg): a program per "
                        "receive call of every socket, which counts calls and names the "
                        "reader's CPU at each read. auto: counters with sampled timing; with "
                        "exact timing the first of tracepoint, fexit, kprobe this kernel "
                        "runs, else the application side is reported unavailable, with why "
                        "(default: %(default)s)")
    g.add_argument("--btf", metavar="FILE",
                   help="kernel BTF for CO-RE relocations, for kernels without "
                        "/sys/kernel/btf/vmlinux (default: the running kernel's)")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """An option's help in a line or two: a help of two paragraphs ("BRIEF\n\nDETAIL") shows its
    brief here and its detail in steer(1) (steer.cli.manual). Appends the option's default where
    it has a value to show and the text does not already say what happens without the option
    (no "(default: None)" or "(default: False)")."""
    detail = False   # steer(1)'s formatter: the detail

    def _get_help_string(self, action):
        text = help_text(action.help, self.detail)
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text \
                or not (action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE)):
            return text
        return text + " (default: %(default)s)"


def help_text(text: str | None, detail: bool = False) -> str:
    """A help's brief (its first paragraph) or, DETAIL, its detail (the rest, else the brief)."""
    brief, _, more = (text or "").partition("\n\n")
    return (more or brief) if detail else brief


def latency_option(p) -> None:
    """--latency, of the commands that show flows: the latency programs beside the tracer's."""
    p.add_argument("--latency", action="store_true",
                   help="also how long each flow's data waits from the stack to its reader\n\n"
                        "also how long each flow's received data waits in the host: from its skb "
                        "reaching the stack (net:netif_receive_skb) to the receive call that "
                        "takes it (TCP: skb:skb_copy_datagram_iovec; UDP: the datagram leaving its "
                        "socket's queue, at sock:sock_recv_length), from an skb per flow every "
                        "100 us at most: `steer flows` its median, p90 and p99, `steer top` p50 "
                        "and p99 as a column, `steer export` a histogram by class "
                        "(steer_class_receive_wait_seconds); in JSON also the wait's two stages "
                        "(to the socket's queue, in it) and the reader's wake-ups by the data. Six "
                        "programs more: per skb, per copy of TCP data to a reader, per enqueue on "
                        "and read of a socket, per task wake-up and context switch; not in the "
                        "default mode's cost budget, so asked for (docs/how-it-measures.md)")


def check_tracer_options(args) -> None:
    """What argparse cannot see: tracer options that do not go together."""
    if getattr(args, "windows", None) not in (None, WINDOWS_BY_TIMING) \
            and getattr(args, "timing", None) not in ("sampled", "auto"):
        raise UsageError(f"--windows needs --timing sampled: {args.timing} timing runs on every "
                         "event")
    if getattr(args, "app_hook", None) == "counters" and getattr(args, "timing", None) == "exact":
        raise UsageError("--app-hook counters needs --timing sampled: exact timing brackets each "
                         "receive call, which takes a program per read")


def chosen_windows(args):
    """The tracer's windows from --windows and --timing: default_windows() of the timing where
    --windows was left as it is."""
    windows = getattr(args, "windows", None)
    if windows != WINDOWS_BY_TIMING:
        return windows
    from steer.trace.windows import default_windows
    return default_windows(args.timing)


def start_tracer(args):
    from steer.trace.tracer import Tracer
    tracer = Tracer(max_flows=args.max_flows, counters=args.counters, btf=args.btf,
                    idle_timeout=args.idle_timeout, app_hook=args.app_hook, timing=args.timing,
                    sample_hz=args.sample_hz, windows=chosen_windows(args),
                    latency=getattr(args, "latency", False)).start()
    tune_gc()
    return tracer


def tune_gc() -> None:
    """A read of a full flow map makes some 100,000 objects, none of them in a reference cycle;
    at the default threshold (700) the cyclic collector ran over a hundred times per read and
    walked every object alive each time it reached the oldest generation: a third of a scrape's
    time under connection churn (bench.soak). What start-up made is frozen out of its walks."""
    import gc
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def start_profiler(args, hz: int):
    """The sampled tracer with profiling on, at HZ per CPU: steer profile's, and the one a
    profiled sweep runs beside its tracer."""
    from steer.trace.tracer import Tracer
    return Tracer(max_flows=args.max_flows, btf=args.btf, timing="sampled", sample_hz=hz,
                  counters="off", profile=True).start()


def view_state(args):
    from steer.present.view import ViewState
    return ViewState(sort=args.sort, min_rate=args.min_rate, show_idle=args.all)


def need_matplotlib(what: str) -> None:
    try:
        import matplotlib  # noqa: F401  (an extra: the rest of steer runs without it)
    except ImportError:
        raise UserError(f"{what} draws its figures with matplotlib, which is not installed: "
                        "pip install 'steer[sweep]' (Debian: apt-get install "
                        "python3-matplotlib)") from None


def cpus_online(text: str, what: str = "--cpu", topo=None) -> list[int]:
    """The CPUs of TEXT (a CPU list), each online in TOPO (default: this host's)."""
    from steer.model.topology import parse_cpulist, read_topology
    try:
        cpus = parse_cpulist(text)
    except ValueError as e:
        raise UsageError(f"{what}: {e}") from None
    if not cpus:
        raise UsageError(f"{what}: no CPU given")
    topo = topo or read_topology()
    for c in cpus:
        try:
            topo.check_online(c)
        except ValueError as e:
            raise UserError(f"{what}: {e}") from None
    return cpus


def check_usable(cpus, what: str) -> None:
    """The lab and the sweep start their processes on these CPUs: refuse, before anything is set
    up, the ones this process may not run on (taskset or a cgroup cpuset can exclude online CPUs)."""
    from steer.experiment.lab import usable_cpus
    from steer.model.topology import format_cpulist
    usable = usable_cpus()
    for c in cpus:
        if c not in usable:
            raise UserError(f"{what}: CPU {c} is not usable by this process, which may run on CPUs "
                            f"{format_cpulist(usable)} (taskset or cgroup cpuset)")


STOP_SIGNAL = [signal.SIGINT]   # the signal that last asked this process to stop


def sigterm(signum, frame):
    STOP_SIGNAL[0] = signum
    interrupt(frame, signum)   # the same orderly teardown as Ctrl-C


def interrupted_status() -> int:
    """The exit status of a command stopped before it finished: 128 + the signal, as a shell
    reports a process that signal killed (130 for Ctrl-C, 143 for SIGTERM), after the same
    teardown either way. The commands that run until stopped (top, demo, auto, export) stop
    cleanly on either and exit 0."""
    return 128 + STOP_SIGNAL[0]


class GracefulStop:
    """While active: the first Ctrl-C or SIGTERM asks to stop at the next safe point, a second
    Ctrl-C interrupts at once."""

    def __init__(self, console, message: str):
        self.console, self.message, self._asked = console, message, False

    def requested(self) -> bool:
        return self._asked

    def _handler(self, signum, frame):
        STOP_SIGNAL[0] = signum
        if self._asked and signum == signal.SIGINT:
            interrupt(frame, signum)   # raises, or holds it for when libbpf returns
            return
        self._asked = True
        self.console.print(self.message)

    def __enter__(self):
        self._old = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc):
        for s, h in self._old.items():
            signal.signal(s, h)


def view_options(sp):
    """--sort, --min-rate, --all: how the views show flows."""
    from steer.defaults import DEFAULT_MIN_RATE, SORTS
    from steer.model.units import rate_text
    sp.add_argument("--sort", choices=list(SORTS), default="rate",
                    help="order of the flows (in the live view, keys r k a c change it)")
    sp.add_argument("--min-rate", type=rate, default=DEFAULT_MIN_RATE, metavar="RATE",
                    help="flows slower than this (bit/s; 10k, 1.5M, 2G), and flows with no "
                         "payload (the ACKs of what this host sends), are idle: hidden and "
                         f"counted (default {rate_text(DEFAULT_MIN_RATE)})")
    sp.add_argument("--all", action="store_true",
                    help="show idle flows too (in the live view, key i)")
