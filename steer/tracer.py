"""The flow tracer: loads bpf/flowtrace.bpf.c, attaches it with BPF links, and hands out immutable
samples of its maps (steer.samples). Its BPF objects are loaded through steer.kernel, the gateway;
steer.steering loads the XDP side the same way."""
from __future__ import annotations

import errno
import os
import struct
import threading
import time
from dataclasses import dataclass, field

from . import flowtrace_abi as abi
from .counters import EVENTS, CounterError, CounterSet
from .kernel import (PERF_COUNT_SW_CPU_CLOCK, PERF_TYPE_SOFTWARE, BpfObject, KernelError,
                     PerfCounter, bpf_dir,
                     BTF_KIND_ENUM, drop_reason_names, kernel_text_ranges, netns_of, network_namespaces,
                     possible_cpus, vmlinux_func_params, vmlinux_has_type)
from .privileges import CAP_BPF, CAP_PERFMON, PrivilegeError, require_caps
from .topology import read_int
from .samples import (Capabilities, CpuSample, FlowCpuSample, FlowId, NapiCounts, NapiId, TraceSample,
                      address_text, proto_name)

PROFILE_ENTRIES = 32768   # (flow, CPU, side, category) counts while profiling: ~3 MB
DEFAULT_MAX_FLOWS = 16384   # (flow, CPU) entries: ~300 bytes each in the kernel, ~5 MB in all
DEFAULT_IDLE_TIMEOUT = 60.0  # seconds without a packet or a read before an entry is dropped: every
                             # short connection (a scrape, a health check) would otherwise sit in
                             # the map until the LRU pushes it out, and cost every later read
VMLINUX_BTF = "/sys/kernel/btf/vmlinux"

# the events besides LLC misses that the sampler charges to flows: their ft_config.events bits
_EVENT_BITS = {"llc_references": abi.FT_EVENT_REFERENCES, "instructions": abi.FT_EVENT_INSTRUCTIONS,
               "cycles": abi.FT_EVENT_CYCLES}


# How the application side learns which socket a read was from and how many bytes it got:
# - counters (sampled timing only): no program per read. A TCP reader's bytes are the socket's
#   own account (copied_seq against bytes_received, read at each flush), the reader's CPU and
#   process come from the samples; UDP reads by fexit on udp(v6)_recvmsg where the kernel allows
#   it (no cost to TCP and other reads), else not at all;
# - the sock_recv_length tracepoint (6.3+): one program per receive call of every socket of the
#   host; else the exit of the protocols' recvmsg functions by fexit (BPF trampolines), else by
#   kretprobe. These count calls, and the exact mode times the syscalls around them.
RECV_FUNCS = ("tcp_recvmsg", "udp_recvmsg", "udpv6_recvmsg")
UDP_RECV_FUNCS = ("udp_recvmsg", "udpv6_recvmsg")
APP_HOOKS = {
    "counters": tuple(f"ft_{f}_exit" for f in UDP_RECV_FUNCS),
    "tracepoint": ("ft_sock_recv_length",),
    "fexit": tuple(f"ft_{f}_exit" for f in RECV_FUNCS),
    "kprobe": tuple(p for f in RECV_FUNCS for p in (f"ft_{f}_entry", f"ft_{f}_return")),
}
SYSCALL_PROGRAMS = ("ft_sys_enter", "ft_sys_exit", "ft_sched_switch")
# How CPU time is measured. exact: clock reads at every softirq, skb and receive syscall (the
# syscall programs run on every system call of the host). sampled: a cpu-clock sample per CPU every
# 1/sample_hz seconds, charged to the flow the CPU is working on; per packet one store, per receive
# call two additions in the socket's storage, nothing on other syscalls.
EXACT_PROGRAMS = ("ft_softirq_entry", "ft_softirq_exit", "ft_netif_receive_skb", "ft_xdp_redirect",
                  "ft_xdp_cpumap_kthread", *SYSCALL_PROGRAMS)
# sampled timing: a TCP socket's counts wait in its storage until flushed (flowtrace.bpf.c,
# sock_state): at TCP_CLOSE, at destroy, and by the iterator over the socket storage that sample()
# runs before it reads the flow map. With socket counters, the connections already open when the
# tracer starts get their storage from an iterator over each network namespace's TCP sockets.
FLUSH_ITERATOR = "ft_flush_socks"
OPEN_SOCKETS_ITERATOR = "ft_tcp_sockets"
SAMPLED_PROGRAMS = ("ft_skb_hint", "ft_sample", "ft_tcp_state", "ft_tcp_destroy", FLUSH_ITERATOR,
                    OPEN_SOCKETS_ITERATOR)
TIMINGS = ("sampled", "exact")
DEFAULT_TIMING = "sampled"
DEFAULT_SAMPLE_HZ = 99     # per CPU, as always-on profilers sample (99, not 100: out of step with
                           # work on a 100 Hz beat). Each sample costs a timer interrupt and
                           # ~2.5 us of program on this VM (bench.event_cost; a stack walk, where
                           # the kernel leaves no cheaper sign, ~18 us). A flow at 10% of a CPU
                           # over a 15 s scrape interval gets ~150 samples: ~8% error
MAX_SAMPLE_HZ = 20000      # the kernel throttles perf sampling well before 100 kHz per CPU
# kernel functions whose frames tell the sampler where a CPU is (ft_text in flowtrace.h); each
# group in order of preference: the first that the running kernel has
TEXT_SYMBOLS = {abi.FT_TEXT_NET_RX: ["net_rx_action"],
                abi.FT_TEXT_NAPI_THREAD: ["napi_threaded_poll_loop", "napi_threaded_poll"],
                abi.FT_TEXT_SOFTIRQ: ["handle_softirqs", "__do_softirq"]}
APP_HOOK_LABELS = {"counters": "the TCP sockets' own counters",
                   "tracepoint": "sock:sock_recv_length",
                   "fexit": "fexit on " + "/".join(RECV_FUNCS),
                   "kprobe": "kretprobe on " + "/".join(RECV_FUNCS)}
# tcp_recvmsg's parameter count -> index of `flags`: (sk, msg, len, nonblock, flags, addr_len)
# before 5.19, (sk, msg, len, flags, addr_len) until 6.17, (sk, msg, len, flags) since
RECVMSG_FLAGS_ARG = {6: 4, 5: 3, 4: 3}


def preempt_rt(path: str = "/sys/kernel/realtime") -> bool:
    """A PREEMPT_RT kernel runs softirqs in task context, on task stacks (ft_config)."""
    return read_int(path) == 1


def _hooked(program: str) -> str:
    """ft_udpv6_recvmsg_exit -> udpv6_recvmsg"""
    return program.removeprefix("ft_").rsplit("_", 1)[0]


def _short(e: KernelError) -> str:
    """The kernel's answer without the object's path, for a list of reasons."""
    return str(e).split(" (failed to load object")[0].replace(
        "cannot load flowtrace.bpf.o into the kernel: ", "")


APP_HOOK_CHOICES = ("auto", *APP_HOOKS, "off")
DEFAULT_SAMPLED_APP_HOOK = "counters"   # what --app-hook auto takes with sampled timing


class TracerError(Exception):
    """A precondition of tracing is not met; str() is the one line to show."""


def _flow_id_of(k: tuple) -> FlowId:
    """FlowId from the unpacked key: saddr, daddr, sport, dport, proto, family, ..."""
    saddr, daddr, sport, dport, proto, family = k[:6]
    return FlowId(proto_name(proto), address_text(saddr, family), sport,
                  address_text(daddr, family), dport)


_STATS_FIELDS = [n for n, t in abi.FlowStats._fields_ if t is abi.u64]   # the leading counters
_CPU_FIELDS = [n for n, _ in abi.CpuStats._fields_]
_KEY = struct.Struct(abi.struct_format(abi.FlowCpuKey))
_VALUE = struct.Struct(abi.struct_format(abi.FlowStats))
_NAPI_KEY = struct.Struct(abi.struct_format(abi.NapiKey))
_NAPI_VALUE = struct.Struct(abi.struct_format(abi.NapiStats))
_LAST_SEEN_OFFSET = abi.FlowStats.last_seen_ns.offset
_U64 = struct.Struct("@Q").unpack_from
_COUNTERS = len(_STATS_FIELDS)   # the value's leading u64 counters, in FlowCpuSample's order


@dataclass
class Tracer:
    max_flows: int = DEFAULT_MAX_FLOWS
    counters: str = "auto"      # PMU events: one of counters.MODES
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    btf: str | None = None
    app_hook: str = "auto"      # one of APP_HOOK_CHOICES
    timing: str = DEFAULT_TIMING   # one of TIMINGS
    sample_hz: int = DEFAULT_SAMPLE_HZ
    profile: bool = False       # steer profile: each sample's kernel stack by category (sampled)
    capabilities: Capabilities | None = field(default=None, init=False)

    def __post_init__(self):
        self._obj: BpfObject | None = None
        self._counters = CounterSet("off")
        self._clocks: list[PerfCounter] = []     # sampled timing: the cpu-clock events
        self._softirqs0: dict[int, int] | None = None   # sampled: /proc/softirqs NET_RX at start
        self._expired = 0
        self._ids: dict[tuple, FlowId] = {}                     # key fields -> FlowId
        self._last: dict[bytes, tuple] = {}     # raw key -> ((FlowId, cpu), sample, raw counters)
        self._entries: dict[tuple, FlowCpuSample] = {}   # what the next sample starts from
        self._seq = 0
        # skb->napi_id shares its bytes with sender_cpu (CPU + 1, set on transmit): an skb that a
        # veth or loopback hands over without a NAPI poll keeps it. Real NAPI ids start above
        # NR_CPUS (MIN_NAPI_ID), so above the number of possible CPUs; anything at or below is a
        # CPU, not an instance
        self._max_sender_cpu = possible_cpus()
        self._lock = threading.RLock()
        self.app_hook_used: str | None = None    # which of APP_HOOKS (or "off") start() chose
        self.unreached_namespaces = 0   # counters: namespaces whose open connections go uncounted

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> "Tracer":
        require_caps([CAP_BPF, CAP_PERFMON], "tracing")
        if self.max_flows < 1:
            raise TracerError(f"--max-flows must be at least 1, not {self.max_flows}")
        btf = self.btf or VMLINUX_BTF
        if not os.path.exists(btf):
            raise TracerError(
                f"no kernel BTF at {btf}: CO-RE needs a kernel built with CONFIG_DEBUG_INFO_BTF=y"
                + ("" if self.btf else " (or pass --btf FILE)"))
        obj_path = bpf_dir() / "flowtrace.bpf.o"
        if not obj_path.exists():
            raise TracerError(f"{obj_path} is not built: run `make` in the steer checkout "
                              "(needs clang, bpftool and libbpf-dev)")
        if self.app_hook not in APP_HOOK_CHOICES:
            raise TracerError(f"unknown app hook {self.app_hook!r}: choose from "
                              f"{', '.join(APP_HOOK_CHOICES)}")
        if self.timing not in TIMINGS:
            raise TracerError(f"unknown timing {self.timing!r}: choose from {', '.join(TIMINGS)}")
        sampled = self.timing == "sampled"
        if self.app_hook == "counters" and not sampled:
            raise TracerError("--app-hook counters needs --timing sampled: exact timing brackets "
                              "each receive call, which takes a program per read")
        if sampled and not 1 <= self.sample_hz <= MAX_SAMPLE_HZ:
            raise TracerError(f"--sample-hz must be from 1 to {MAX_SAMPLE_HZ}, not {self.sample_hz}")
        disable = {p for progs in APP_HOOKS.values() for p in progs}
        disable |= set(EXACT_PROGRAMS if sampled else SAMPLED_PROGRAMS)
        cpumap = "available (xdp:xdp_cpumap_kthread)"
        if sampled:
            cpumap = "available (cpumap kthreads recognised in the samples)"
        elif not (vmlinux_has_type("btf_trace_xdp_cpumap_kthread")
                  and vmlinux_has_type("btf_trace_xdp_redirect")):
            disable |= {"ft_xdp_cpumap_kthread", "ft_xdp_redirect"}
            cpumap = "unavailable: kernel lacks the xdp:xdp_cpumap_kthread tracepoint"
        drops = "available (skb:kfree_skb, with the drop reason)"
        self._drop_reasons = {}
        if not vmlinux_has_type("skb_drop_reason", BTF_KIND_ENUM):
            disable.add("ft_kfree_skb")
            drops = "unavailable: this kernel's skb:kfree_skb gives no drop reason (Linux 5.17+)"
        else:
            self._drop_reasons = drop_reason_names()
        text = [(0, 0)] * abi.FT_TEXT_RANGES
        if sampled:
            try:
                text = kernel_text_ranges([TEXT_SYMBOLS[i] for i in range(abi.FT_TEXT_RANGES)])
            except (KernelError, OSError) as e:
                raise TracerError(f"sampled timing: {e}") from None
            if not text[abi.FT_TEXT_NET_RX][0]:
                raise TracerError("sampled timing: /proc/kallsyms has no net_rx_action "
                                  "(use --timing exact)")

        ranges: list[tuple[int, int]] = []
        if self.profile:
            if not sampled:
                raise TracerError("profiling takes the samples of --timing sampled, not exact")
            from .profile import text_categories
            try:
                ranges = text_categories()
            except (OSError, ValueError) as e:
                raise TracerError(f"profile: {e}") from None
        sizes = {"flows": self.max_flows}
        if ranges:
            sizes.update(profile_text=len(ranges), profile=PROFILE_ENTRIES)

        try:
            counters = CounterSet.open(self.counters, _online_cpus())
        except CounterError as e:
            raise TracerError(str(e)) from None
        events = sum(1 << bit for e, bit in _EVENT_BITS.items() if e in counters.counters) \
            if sampled else 0
        clocks: list[PerfCounter] = []
        tried: list[str] = []
        udp_why = None   # counters: why UDP reads are not counted
        for hook, programs, flags_arg, why_not in self._app_hook_candidates():
            if why_not:
                if hook == "counters" and programs:
                    udp_why = why_not
                else:
                    tried.append(f"{hook}: {why_not}")
                continue
            cfg = abi.Config(llc_enabled=1 if "llc_misses" in counters.counters else 0,
                             events=events, recv_flags_arg=flags_arg,
                             timing=abi.FT_TIMING_SAMPLED if sampled else abi.FT_TIMING_EXACT,
                             softirq_stacks=0 if preempt_rt() else 1,
                             app_counters=1 if hook == "counters" else 0,
                             profile_ranges=len(ranges))
            for i, (lo, hi) in enumerate(text):
                cfg.text[i][0], cfg.text[i][1] = lo, hi
            try:
                # fresh events for each attempt: an attached one belongs to its link, which a
                # failed attempt destroys
                clocks = self._open_clocks() if sampled else []
            except TracerError:
                counters.close()
                raise
            if hook != "off":
                off = disable - set(programs)
            elif sampled:
                # no read is seen, so bytes can only be counted per skb: the exact skb program
                # does that (and sets the sampler's hint) when it is loaded with sampled timing
                off = disable - {"ft_netif_receive_skb"} | {"ft_skb_hint"}
            else:
                # sched_switch stays: it also closes a cpumap kthread's interval when it sleeps
                off = disable | (set(SYSCALL_PROGRAMS) - {"ft_sched_switch"})
            try:
                self._obj = BpfObject(str(obj_path), rodata=bytes(cfg), max_entries=sizes,
                                      disable=off, btf=self.btf)
                for event, per_cpu in counters.counters.items():
                    if event == "llc_misses" or sampled:   # exact timing reads misses alone
                        m = self._obj.map(EVENTS[event][1])
                        for c in per_cpu:
                            m.update(struct.pack("I", c.cpu), struct.pack("I", c.fd))
                if ranges:
                    from .profile import pack_ranges
                    self._obj.map("profile_text").update_batch(*pack_ranges(ranges))
                self.app_hook_used = hook
                self._attach(clocks)
                break
            except KernelError as e:
                for c in clocks:
                    c.close()
                self.stop()
                # kernels refuse a hook they cannot run in several ways (ENOTSUPP, EPERM, EINVAL);
                # whatever else is wrong fails the last attempt, which loads no hook, as well
                if hook == "counters" and programs:
                    udp_why = f"this kernel refused fexit on {'/'.join(UDP_RECV_FUNCS)}: {_short(e)}"
                    continue   # counters for TCP alone come next
                if hook != "off" and self.app_hook == "auto":
                    tried.append(f"{hook}: {_short(e)}")
                    continue
                counters.close()
                for c in clocks:
                    c.close()
                if hook != "off":
                    raise TracerError(f"--app-hook {hook}: this kernel refused the "
                                      f"{APP_HOOK_LABELS[hook]} programs: {_short(e)}") from None
                if e.errno == errno.EPERM:
                    raise TracerError(f"{e} (is a security policy denying BPF?)") from None
                raise TracerError(str(e)) from None
        else:
            counters.close()
            for c in clocks:
                c.close()
            raise TracerError(f"--app-hook {self.app_hook}: " + "; ".join(tried))
        calls = "available (a program per receive call)"
        if hook == "off":
            app = "unavailable: " + ("turned off (--app-hook off)" if self.app_hook == "off"
                                     else "; ".join(tried))
            calls = "unavailable: no receive hook"
        elif hook == "counters":
            udp = (f"UDP by fexit on {'/'.join(UDP_RECV_FUNCS)}" if udp_why is None else
                   f"UDP reads not counted ({udp_why}; --app-hook tracepoint counts them, at a "
                   "program per receive call of every socket)")
            unreached = (f"; the connections open at start in {self.unreached_namespaces} network "
                         "namespaces it could not enter are not counted"
                         if self.unreached_namespaces else "")
            app = ("available (TCP by the sockets' own counters, no program per read; "
                   f"{udp}; time and reader by the samples{unreached})")
            calls = ("unavailable: --app-hook counters runs no program per read "
                     "(--app-hook tracepoint counts calls)")
        elif sampled:
            app = f"available ({APP_HOOK_LABELS[hook]} + sampled receive syscalls)"
        else:
            app = f"available ({APP_HOOK_LABELS[hook]} + receive syscalls)"
        self._counters = counters
        self._clocks = clocks
        self._softirqs0 = net_rx_softirqs() if sampled else None
        self.app_hook_used = hook
        if sampled:
            kernel = "available (cpu-clock samples + net:netif_receive_skb)"
            timing = (f"available (sampled: cpu-clock at {self.sample_hz} Hz per CPU; times are "
                      "estimates, bytes exact; no syscall hooks)")
        else:
            kernel = "available (irq:softirq_entry/exit + net:netif_receive_skb)"
            timing = ("available (exact: clock reads at every softirq, skb and receive syscall; "
                      "hooks every syscall of the host)")
        if events:
            per_flow = (f"available ({', '.join(e for e in _EVENT_BITS if e in counters.counters)}"
                        " per flow and side, charged at each sample)")
        elif counters.counters and not sampled:
            per_flow = ("unavailable: exact timing charges LLC misses alone to flows; the other "
                        "events come with --timing sampled")
        else:
            per_flow = counters.status("llc_references")
        self.capabilities = Capabilities(kernel_side=kernel, app_side=app, cpumap_context=cpumap,
                                         llc=counters.status("llc_misses"), timing=timing,
                                         app_calls=calls, drops=drops, counters=counters.summary(),
                                         counters_per_flow=per_flow)
        self._flows = self._obj.map("flows")
        self._cpus = self._obj.map("cpu_totals")
        return self

    def _reason_name(self, reason: int) -> str:
        if not reason:
            return ""
        return self._drop_reasons.get(reason) or f"reason {reason}"

    def _attach(self, clocks: list[PerfCounter]) -> None:
        for name in self._obj.programs():
            if name == FLUSH_ITERATOR:
                self._obj.attach_iter(name, "socks")
            elif name != "ft_sample":
                self._obj.attach(name)
        for c in clocks:
            self._obj.attach_perf_event("ft_sample", c.fd)
            c.fd = -1   # libbpf's link owns the event now and closes it with the link
        if self.app_hook_used == "counters":
            self._count_open_connections()

    def _count_open_connections(self) -> None:
        """Socket counters: the connections open now, in every network namespace, are counted
        from here on (those that open later, ft_tcp_state counts from their start). A TCP
        iterator walks the namespace of the thread that runs it, so this thread visits each."""
        self.unreached_namespaces = 0
        for path in network_namespaces():
            try:
                with netns_of(path):
                    self._obj.run_iter(OPEN_SOCKETS_ITERATOR)
            except (KernelError, OSError):
                self.unreached_namespaces += 1   # its last process exited, or setns refused

    def detach(self) -> None:
        """Take every program off its hook and leave the maps as they are: what it costs to be
        attached is then measured apart from what it costs to load (bench/)."""
        if self._obj:
            self._obj.detach_all()
        self._clocks = []   # their links closed them

    def attach(self) -> None:
        """Put the programs back on their hooks after detach()."""
        if not self._obj or self._obj.attached:
            raise TracerError("attach() follows detach() of a started tracer")
        clocks = self._open_clocks() if self.timing == "sampled" else []
        try:
            self._attach(clocks)
        except KernelError as e:
            self._obj.detach_all()
            for c in clocks:
                c.close()
            raise TracerError(str(e)) from None
        self._clocks = clocks

    def _open_clocks(self) -> list[PerfCounter]:
        """One cpu-clock event per online CPU that overflows every 1/sample_hz seconds."""
        period = int(1e9 / self.sample_hz)
        clocks: list[PerfCounter] = []
        try:
            for cpu in _online_cpus():
                clocks.append(PerfCounter.open(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, cpu,
                                               sample_period=period))
        except KernelError as e:
            for c in clocks:
                c.close()
            raise TracerError(f"sampled timing: cannot open the cpu-clock event: {e}") from None
        return clocks

    def _app_hook_candidates(self):
        """(hook, its programs, flags argument index, why it cannot work here or None), in the
        order to try; the last one, 'off' (or counters for TCP alone), always loads."""
        sampled = self.timing == "sampled"
        if self.app_hook == "auto":
            names = [DEFAULT_SAMPLED_APP_HOOK] if sampled else \
                [h for h in APP_HOOKS if h != "counters"]
        else:
            names = [] if self.app_hook == "off" else [self.app_hook]
        params = None     # parameter counts of RECV_FUNCS, read off BTF once, when needed
        for hook in names:
            why, flags_arg, programs = None, 0, APP_HOOKS[hook]
            if hook == "tracepoint":
                if not vmlinux_has_type("btf_trace_sock_recv_length"):
                    why = "kernel lacks the sock:sock_recv_length tracepoint (added in 6.3)"
            else:
                params = params or {f: vmlinux_func_params(f) for f in RECV_FUNCS}
                nparams = params["tcp_recvmsg"]
                if nparams not in RECVMSG_FLAGS_ARG:
                    why = ("kernel BTF has no tcp_recvmsg" if nparams is None else
                           f"tcp_recvmsg takes {nparams} parameters, a signature steer does not know")
                else:
                    flags_arg = RECVMSG_FLAGS_ARG[nparams]
                # udpv6_recvmsg is missing where IPv6 is a module: hook what is there
                programs = tuple(p for p in programs if params[_hooked(p)] is not None)
                if hook == "counters" and not programs:
                    why = "kernel BTF has no udp_recvmsg"
            yield hook, programs or APP_HOOKS[hook], flags_arg, why
            if hook == "counters":
                yield hook, (), 0, None   # TCP alone, where the UDP hook cannot load
                return
        if self.app_hook in ("auto", "off"):
            yield "off", (), 0, None

    def stop(self) -> None:
        with self._lock:   # not under a sample() of another thread
            if self._obj:
                self._obj.close()
                self._obj = None
            self._counters.close()
            for c in self._clocks:
                c.close()
            self._clocks = []

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def attached_programs(self) -> list[str]:
        return self._obj.attached if self._obj else []

    @property
    def flow_map(self):
        """The kernel flow map itself, for benchmarks that fill it."""
        return self._flows

    def program_stats(self) -> dict[str, tuple[int, int]]:
        """Program -> (run time ns, runs), counted by the kernel while kernel.bpf_stats_enabled=1."""
        from .kernel import prog_run_stats
        return {n: prog_run_stats(self._obj.prog_fd(n)) for n in self.attached_programs}

    # -- reading -----------------------------------------------------------------------------
    flow_id = staticmethod(_flow_id_of)   # a FlowId from an unpacked ft_flow_key

    def profile_counts(self) -> dict[bytes, tuple[int, int]]:
        """With profile=True: the kernel's (samples, ns) per raw ft_profile_key since start."""
        from .profile import read_counts
        with self._lock:
            if not self._obj:
                raise TracerError("tracer is not running")
            return read_counts(self._obj.map("profile"))

    def sample(self) -> TraceSample:
        """Read every map once: cumulative counters since start. Also flushes the sockets' reads
        into the flow map first, and deletes kernel entries idle for idle_timeout (their totals
        stay in the returned sample's history; `expired` counts them). Thread-safe: `steer auto
        --listen` reads from its loop and from scrapes; reads take turns, and stop() waits for
        the one under way."""
        with self._lock:
            return self._read_maps()

    def _read_maps(self) -> TraceSample:
        if not self._obj:
            raise TracerError("tracer is not running")
        if FLUSH_ITERATOR in self._obj.attached:
            self._obj.run_iter(FLUSH_ITERATOR)   # sockets' reads since the last flush, into flows
        # bpf_ktime_get_ns() and time.monotonic_ns() read the same clock (CLOCK_MONOTONIC)
        cutoff = time.monotonic_ns() - int(self.idle_timeout * 1e9)
        last, idle, changed = {}, [], []
        ids, prev = self._ids, self._last
        entries = dict(self._entries)   # a copy keeps the hashes: only changes cost
        ks, vs = self._flows.key_size, self._flows.value_size
        for kbuf, vbuf, n in self._flows.raw_batches():
            for i in range(n):
                kraw = kbuf[i * ks:(i + 1) * ks]
                # an entry changed when any counter did: comparing the raw counters, not a
                # timestamp, lets the kernel side stamp last_seen_ns with a coarse clock
                vraw = vbuf[i * vs:i * vs + _LAST_SEEN_OFFSET]
                hit = prev.pop(kraw, None)
                if hit is None or hit[2] != vraw:
                    # new or updated: unpack it; an unchanged entry keeps its object, which lets
                    # build_snapshot pass over idle flows with an identity test
                    k = _KEY.unpack(kraw)
                    v = _VALUE.unpack_from(vbuf, i * vs)
                    fid = ids.get(k[:6])
                    if fid is None:
                        fid = ids[k[:6]] = _flow_id_of(k)
                    napi_id = v[_COUNTERS + 4]
                    hit = ((fid, k[7]), FlowCpuSample(
                        fid, k[7], *v[:_COUNTERS], app_pid=v[_COUNTERS], rx_ifindex=v[_COUNTERS + 1],
                        app_comm=v[_COUNTERS + 2].rstrip(b"\0").decode(errors="replace"),
                        rx_netns=v[_COUNTERS + 3], rx_queue=v[_COUNTERS + 5],
                        rx_napi_id=napi_id if napi_id > self._max_sender_cpu else 0,
                        last_drop_reason=self._reason_name(v[_COUNTERS + 7])), vraw)
                    entries[hit[0]] = hit[1]
                    changed.append(hit[0])
                last[kraw] = hit
                if _U64(vbuf, i * vs + _LAST_SEEN_OFFSET)[0] < cutoff:
                    idle.append(kraw)
        for key, _, _ in prev.values():   # gone since the last read (evicted, or expired by us)
            entries.pop(key, None)
        # an idle entry is in this sample with its final counts, and gone from the next
        for kraw in idle:
            if self._flows.delete(kraw):
                self._expired += 1
            last.pop(kraw)
        self._last = last
        self._entries = {key: s for key, s, _ in last.values()} if idle else entries
        if len(ids) > 2 * len(last) + 1024:
            # forget the ids of flows gone from the map, keep the live ones: under connection
            # churn the cache would otherwise swing between empty and several times the map
            # (~500 bytes an id), and the process keep the peak
            live_ids = {key[0] for key, _, _ in last.values()}
            self._ids = {k: fid for k, fid in ids.items() if fid in live_ids}
        self._seq += 1
        live = len(entries) - len(idle)
        per_cpu = self._cpus.lookup(struct.pack("I", 0))
        fields = [{n: getattr(abi.CpuStats.from_buffer_copy(raw), n) for n in _CPU_FIELDS}
                  for raw in per_cpu]
        if self._softirqs0 is not None:
            # sampled timing has no softirq programs: the kernel's own count, since start
            for cpu, n in net_rx_softirqs().items():
                if cpu < len(fields):
                    fields[cpu]["net_rx_events"] = n - self._softirqs0.get(cpu, 0)
        cpus = tuple(CpuSample(i, **f) for i, f in enumerate(fields))
        return TraceSample(time.monotonic_ns(), entries, cpus, live, self._flows.max_entries,
                           self._expired, self._seq, tuple(changed),
                           cpu_events=self._counters.whole_cpu(), napi=self._napi_polls(cpus))

    def _napi_polls(self, cpus) -> dict:
        """NapiId -> CPU -> NapiCounts: the devices' instances that polled since the start, from
        the napi_polls map, and the backlog (all-zero id) from the CPUS' totals."""
        backlog = {c.cpu: NapiCounts(c.backlog_polls, c.backlog_packets, c.backlog_full_polls)
                   for c in cpus if c.backlog_polls}
        out = {NapiId(0, 0, 0): backlog} if backlog else {}
        for kraw, per_cpu in self._obj.map("napi_polls").items():
            key = NapiId(*_NAPI_KEY.unpack(kraw))
            counts = {cpu: NapiCounts(*_NAPI_VALUE.unpack(v)) for cpu, v in enumerate(per_cpu)}
            out[key] = {cpu: c for cpu, c in counts.items() if c.polls}
        return out


def net_rx_softirqs(path: str = "/proc/softirqs") -> dict[int, int]:
    """NET_RX softirqs run per CPU since boot, as the kernel counts them."""
    with open(path) as f:
        cpus = [int(c.removeprefix("CPU")) for c in f.readline().split()]
        for line in f:
            name, *counts = line.split()
            if name == "NET_RX:":
                return dict(zip(cpus, map(int, counts)))
    return {}


def _online_cpus() -> list[int]:
    from .topology import online_cpus
    try:
        return online_cpus()
    except OSError:
        return list(range(possible_cpus()))
