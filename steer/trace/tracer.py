"""The flow tracer: loads bpf/flowtrace.bpf.c, attaches it with BPF links, and hands out immutable
samples of its maps (steer.model.samples). Its BPF objects are loaded through steer.kernel (objects, maps, perf);
steer.steering.xdp loads the XDP side the same way."""
from __future__ import annotations

import errno
import itertools
import os
import struct
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from steer.abi import flowtrace as abi
from steer.trace.counters import EVENTS, CounterError, CounterSet
from steer.trace.walker import NamespaceWalker, WalkerGone, can_walk_apart, walk_namespaces
from steer.trace.windows import WindowRunner, Windows
from steer.kernel.btf import (BTF_KIND_ENUM, BTF_KIND_FUNC, irq_time_kept_from_tasks,
                              kvm_steal_offset, shared_vmlinux_btf, vmlinux_func_params,
                              vmlinux_has_type)
from steer.kernel.errors import KernelError, errno_name
from steer.kernel.maps import BpfRing, possible_cpus
from steer.kernel.mounts import drop_reason_names
from steer.kernel.objects import VMLINUX_BTF, BpfObject, bpf_dir
from steer.kernel.perf import (PERF_COUNT_SW_CPU_CLOCK, PERF_TYPE_SOFTWARE, PerfCounter,
                               kernel_text_ranges, paranoid_refusal)
from steer.kernel.probes import fexit_errno
from steer.trace.programs import (ALL_PROGRAMS, FLUSH_ITERATOR, HOOK_CHOICES, HOOK_LABELS, HOOKED,
                                  HOOKS, LATENCY_MAPS, MAPS, RECV_FUNCS, SECTIONS, TCP_ITERATOR,
                                  TIMING_CHOICES, UDP_READS_FALLBACK, WITHHELD, Plan, PlanError,
                                  forced_refusals, plan)
from steer.defaults import (DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_FLOWS, DEFAULT_SAMPLE_HZ, DEFAULT_TIMING,
                            MAX_SAMPLE_HZ)
from steer.kernel.privileges import (CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, SECCOMP_BPF, missing_caps,
                                     require_caps, seccomp_filtered)
from steer.model.flowarrays import FlowArrays
from steer.model.topology import read_int
from steer.model.capabilities import DEGRADED, MISSING, WORKS, Capabilities, Figure
from steer.model.samples import (CpuSample, FlowCpuSample, FlowId, NapiCounts, NapiId, TraceSample,
                                 address_text, proto_name)

PROFILE_ENTRIES = 32768   # (flow, CPU, side, category) counts while profiling: ~3 MB

# the events besides LLC misses that the sampler charges to flows: their ft_config.events bits
_EVENT_BITS = {"llc_references": abi.FT_EVENT_REFERENCES, "instructions": abi.FT_EVENT_INSTRUCTIONS,
               "cycles": abi.FT_EVENT_CYCLES}


# how long a program put back on its hook (the windows', the UDP reads') is tried again while
# the link that took it off is still held elsewhere (BpfObject.attach): under half the default
# windows' gap (450 ms)
REATTACH_SECONDS = 0.2
REFUSE_ENV = "STEER_TEST_REFUSE"   # programs to treat as refused by the kernel (tests)
# kernel functions whose frames tell the sampler where a CPU is (ft_text in flowtrace.h); each
# group in order of preference: the first that the running kernel has
TEXT_SYMBOLS = {abi.FT_TEXT_NET_RX: ["net_rx_action"],
                abi.FT_TEXT_NAPI_THREAD: ["napi_threaded_poll_loop", "napi_threaded_poll"],
                abi.FT_TEXT_SOFTIRQ: ["handle_softirqs", "__do_softirq"],
                abi.FT_TEXT_RPS_IPI: ["net_rps_send_ipi"],
                # the IPI's way down from net_rps_send_ipi, where a sample lands while it is
                # sent: in a KVM guest 96% of them in the MSR write (x2APIC) that traps to the
                # host; its paravirtual and arm64 (GIC) counterparts where the kernel has them
                **dict(zip(range(abi.FT_TEXT_IPI_FIRST, abi.FT_TEXT_IPI_LAST + 1),
                           [["smp_call_function_single_async"], ["generic_exec_single"],
                            ["__smp_call_single_queue"],
                            ["native_send_call_func_single_ipi",
                             "arch_send_call_function_single_ipi"],
                            ["x2apic_send_IPI", "gic_ipi_send_mask"],
                            ["native_write_msr", "__ipi_send_mask"],
                            ["kvm_send_ipi_mask", "smp_cross_call"]])),
                abi.FT_TEXT_PERF_HRTIMER: ["perf_swevent_hrtimer"]}
# Where the kernel refuses fexit, the sampled mode reads UDP by a tracepoint that every receive
# call of every socket passes (programs.UDP_READS_FALLBACK: ~1% of a loopback redis GET's rate
# here, bench.rr): a thread of the tracer puts it on its hook only while UDP datagrams arrive,
# woken by the first one through a ring buffer (udp_ring)
UDP_READS_IDLE = 10.0    # s without a datagram before it comes off: sporadic UDP (DNS) keeps
                         # it on rather than miss a reply that comes back at once
UDP_READS_REARM = 1.0    # s between clears of udp_seen: the ring rings at most this often
# tcp_recvmsg's parameter count -> index of `flags`: (sk, msg, len, nonblock, flags, addr_len)
# before 5.19, (sk, msg, len, flags, addr_len) until 6.17, (sk, msg, len, flags) since
RECVMSG_FLAGS_ARG = {6: 4, 5: 3, 4: 3}
# Sampled timing in windows (steer.trace.windows): the programs that run per packet, per read or
# per interrupt go on their hooks for the windows alone; the sampler, the per-connection ones,
# the drops' and the steering's stay on
WINDOWED = frozenset({"ft_skb_hint", "ft_napi_poll", "ft_irq_handler_entry", "ft_irq_handler_exit",
                      UDP_READS_FALLBACK, *(p for h in HOOKS.values() for p in h)})
# the figures those programs count, estimates in windows (TCP bytes where the skbs count them;
# not the readers' time or who they are: the samples tell those, and they run all the time)
WINDOWED_FIGURES = ("kernel_time", "kthread_time", "tcp_rx_bytes", "udp_rx_bytes", "udp_app_bytes",
                    "app_calls", "napi_polls", "hardirqs")


def preempt_rt(path: str = "/sys/kernel/realtime") -> bool:
    """A PREEMPT_RT kernel runs softirqs in task context, on task stacks (ft_config)."""
    return read_int(path) == 1


def flowtrace_object() -> Path:
    """flowtrace.bpf.o; on a kernel without the kfunc bpf_rdonly_cast (before 6.2), the same built
    without it (bpf/run_clock.bpf.h), where libbpf 1.1 would look for it in the modules' BTF
    and, without CAP_SYS_ADMIN, fail the whole object."""
    kfunc = vmlinux_has_type("bpf_rdonly_cast", BTF_KIND_FUNC)
    return bpf_dir() / ("flowtrace.bpf.o" if kfunc else "flowtrace-nokfunc.bpf.o")


def refusal(program: str, e: KernelError, refused_maps: dict[str, str] | None = None) -> str:
    """Why PROGRAM is not running, from the kernel's or libbpf's answer, in users' terms."""
    code = f"{errno_name(e.errno)}: {os.strerror(e.errno)}" if e.errno else str(e)
    paranoid = paranoid_refusal() if e.errno == errno.EACCES else ""
    if paranoid and SECTIONS[program].startswith(("perf_event", "kprobe")):
        code += f"; {paranoid}"   # the perf event it is attached by, refused before the program
    elif e.errno == errno.EPERM and missing_caps([CAP_SYS_ADMIN]):
        code += "; without CAP_SYS_ADMIN"   # which some kernels keep programs for (5.10: tp_btf)
    if e.uses_map and refused_maps and e.uses_map in refused_maps:
        code = f"it uses the map {e.uses_map}, which the kernel refused: {refused_maps[e.uses_map]}"
    return f"the kernel refused {SECTIONS[program]} ({code})"


# the figures that make up the app side's line, as it names them
FIGURE_WORDS = {"tcp_app_bytes": "TCP bytes:", "udp_app_bytes": "UDP bytes:",
                "reader": "reader:", "app_time": "time:"}


class TracerError(Exception):
    """A precondition of tracing is not met; str() is the one line to show."""


def _flow_id_of(k: tuple) -> FlowId:
    """FlowId from the unpacked key: saddr, daddr, sport, dport, proto, family, ..."""
    saddr, daddr, sport, dport, proto, family = k[:6]
    return FlowId(proto_name(proto), address_text(saddr, family), sport,
                  address_text(daddr, family), dport)


# the value's leading u64s, the counters and last_seen_ns, in FlowCpuSample's order
_STATS_FIELDS = [n for n, _ in itertools.takewhile(lambda f: f[1] is abi.u64, abi.FlowStats._fields_)]
_CPU_FIELDS = [n for n, _ in abi.CpuStats._fields_]
_KEY = struct.Struct(abi.struct_format(abi.FlowCpuKey))
_FLOW_KEY = struct.Struct(abi.struct_format(abi.FlowKey))
_VALUE = struct.Struct(abi.struct_format(abi.FlowStats))
_NAPI_KEY = struct.Struct(abi.struct_format(abi.NapiKey))
_NAPI_VALUE = struct.Struct(abi.struct_format(abi.NapiStats))
_LAST_SEEN_OFFSET = abi.FlowStats.last_seen_ns.offset
_U64 = struct.Struct("@Q").unpack_from
_ZERO_KEY = struct.pack("@I", 0)   # an array map's one key, and udp_seen's clear value
_FLOW_KEY_SIZE = abi.FlowCpuKey.cpu.offset   # the flow part of a (flow, CPU) key
_COUNTERS = len(_STATS_FIELDS)   # the value's leading u64 counters, in FlowCpuSample's order


# Each CPU's sampling timer runs at its own rate, within +-SAMPLE_SPREAD of --sample-hz: at one
# rate, the timers of two CPUs keep their phase, and work that one CPU's timer sets off on the
# other (its interrupt's softirq sends an ACK, which wakes a sender there, whose transmit runs
# NET_RX) lands at the same point of the other's period every time, so it is sampled too often
# or too rarely for as long as the tracer runs: the sender CPU's NET_RX of a lab flow read half
# its time in 4 runs of 28 at 4,999 Hz (2026-11-27). Rates a few percent apart drift through
# every phase many times a second.
SAMPLE_SPREAD = 0.02
LATENCY_MAX_FLOWS = 4096   # --latency's flows at most (lat_flows: ~4.5 KB each, preallocated)


def sample_period(hz: int, cpu: int) -> int:
    """CPU's sampling period in ns: 1/HZ, moved by up to SAMPLE_SPREAD by the CPU's place in the
    golden-ratio sequence, which keeps any two CPUs' rates apart."""
    offset = ((cpu * 0.6180339887498949) % 1.0 - 0.5) * 2 * SAMPLE_SPREAD
    return max(1, int(1e9 / hz * (1 + offset)))


@dataclass
class Tracer:
    max_flows: int = DEFAULT_MAX_FLOWS
    counters: str = "auto"      # PMU events: one of defaults.COUNTER_MODES
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    btf: str | None = None
    app_hook: str = "auto"      # one of programs.HOOK_CHOICES
    timing: str = DEFAULT_TIMING   # one of programs.TIMING_CHOICES
    sample_hz: int = DEFAULT_SAMPLE_HZ
    profile: bool = False       # steer profile: each sample's kernel stack by category (sampled)
    windows: Windows | None = None   # sampled: on the per-packet hooks in windows (None: always)
    latency: bool = False       # --latency: each flow's arrival-to-read delays (any mode)
    capabilities: Capabilities | None = field(default=None, init=False)

    def __post_init__(self):
        self._obj: BpfObject | None = None
        self._counters = CounterSet("off")
        self._clocks: list[PerfCounter] = []     # sampled timing: the cpu-clock events
        self._softirqs0: dict[int, int] | None = None   # sampled: /proc/softirqs NET_RX at start
        self._expired = 0
        self._ids: dict[bytes, FlowId] = {}                     # raw flow key -> FlowId
        self._last: dict[bytes, tuple] = {}     # raw key -> ((FlowId, cpu), sample, raw counters)
        self._entries: dict[tuple, FlowCpuSample] = {}   # what the next sample starts from
        self._seq = 0
        # skb->napi_id shares its bytes with sender_cpu (CPU + 1, set on transmit): an skb that a
        # veth or loopback hands over without a NAPI poll keeps it. Real NAPI ids start above
        # NR_CPUS (MIN_NAPI_ID), so above the number of possible CPUs; anything at or below is a
        # CPU, not an instance
        self._max_sender_cpu = possible_cpus()
        self._lock = threading.RLock()
        self._flags_arg = 0     # index of tcp_recvmsg's flags (fexit, kprobe)
        self.plan: Plan | None = None    # what start() loaded
        self.refused: dict[str, str] = {}   # program -> why it is not running, as start() found
        self.refused_maps: dict[str, str] = {}   # map -> why the kernel would not create it
        self._irq_time_apart = False    # the kernel keeps irq time out of tasks' (start())
        self._steal_off = 0             # run_clock.bpf.h's STEAL_OFF, from BTF (start())
        self.app_hook_used: str | None = None    # which of programs.HOOKS (or "off") start() chose
        self.unreached_namespaces = 0   # the TCP walk: namespaces it could not enter
        self._unreached_why = ""        # and the first such namespace's error
        self._walker: NamespaceWalker | None = None   # the walk's own process (walk_apart)
        self._walker_gone = ""          # why a walker the tracer had stopped answering
        self._on_hooks = False          # between start()/attach() and detach()/stop()
        self._udp_watch: threading.Thread | None = None
        self._udp_ring: BpfRing | None = None
        self._udp_watch_stop = threading.Event()
        self.udp_reads_attachments = 0  # how often the UDP reads' program went on its hook
        # from the datagram that rang to each of those attachments: the time whose reads went
        # uncounted (ns, CLOCK_MONOTONIC, bpf_ktime_get_ns's clock)
        self.udp_reads_unwatched_ns = 0
        self.udp_reads_error = ""       # why the thread that puts it there stopped, if it did
        self._runner: WindowRunner | None = None   # the windows' thread (sampled, windows)
        # per reading thread: how long its last read waited for the gap between two windows
        self.waited = threading.local()
        self._windowed_programs: set[str] = set()   # of the plan's, those the windows put on
        self._window_seq = 0                # the window open last

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> "Tracer":
        """Load and attach what this kernel runs of the mode and hook asked for. Each program
        the kernel refuses (at load, at attach, or at an iterator's first run) is named from
        libbpf's answer and left out of the next attempt, which programs.plan() makes without it:
        one attempt per refusal at most, and only a refused core, or a mode or hook asked for by
        name, ends in an error."""
        require_caps([CAP_BPF, CAP_PERFMON], "tracing")
        if self.max_flows < 1:
            raise TracerError(f"--max-flows must be at least 1, not {self.max_flows}")
        btf = self.btf or VMLINUX_BTF
        if not os.path.exists(btf):
            raise TracerError(
                f"no kernel BTF at {btf}: CO-RE needs a kernel built with CONFIG_DEBUG_INFO_BTF=y"
                + ("" if self.btf else " (or pass --btf FILE)"))
        if self.app_hook not in HOOK_CHOICES:
            raise TracerError(f"unknown app hook {self.app_hook!r}: choose from "
                              f"{', '.join(HOOK_CHOICES)}")
        if self.timing not in TIMING_CHOICES:
            raise TracerError(f"unknown timing {self.timing!r}: choose from "
                              f"{', '.join(TIMING_CHOICES)}")
        if self.timing in ("auto", "sampled") and not 1 <= self.sample_hz <= MAX_SAMPLE_HZ:
            raise TracerError(f"--sample-hz must be from 1 to {MAX_SAMPLE_HZ}, not {self.sample_hz}")
        if self.profile and self.timing not in ("auto", "sampled"):
            raise TracerError("profiling takes the samples of --timing sampled, not "
                              f"{self.timing}")
        try:
            forced = forced_refusals(os.environ.get(REFUSE_ENV))
        except PlanError as e:
            raise TracerError(str(e)) from None
        with shared_vmlinux_btf():   # a dozen questions, one parse
            obj_path = flowtrace_object()
            if not obj_path.exists():
                raise TracerError(f"{obj_path} is not built: run `make` in the steer checkout "
                                  "(needs clang, bpftool and libbpf-dev)")
            refused = self.refused = self._absent(forced)   # filled in as the kernel answers
            self._irq_time_apart = irq_time_kept_from_tasks()
            self._steal_off = kvm_steal_offset()
        self._drop_reasons = {} if "ft_kfree_skb" in refused else drop_reason_names()
        ranges: list[tuple[int, int]] = []
        if self.profile:
            from steer.trace.profile import text_categories
            try:
                ranges = text_categories()
            except (OSError, ValueError) as e:
                raise TracerError(f"profile: {e}") from None
        try:
            counters = CounterSet.open(self.counters, _online_cpus())
        except CounterError as e:
            raise TracerError(str(e)) from None
        try:
            p = self._load_what_runs(obj_path, refused, forced, counters, ranges)
        except BaseException:
            counters.close()
            raise
        self.plan = p
        self._counters = counters
        self._softirqs0 = net_rx_softirqs() if p.timing == "sampled" else None
        self.capabilities = self._capabilities(p, counters)
        self._flows = self._obj.map("flows")
        self._cpus = self._obj.map("cpu_totals")
        # (in windows it goes on in each: a read missed until the ring rang would be a whole
        # cycle's)
        if UDP_READS_FALLBACK in p.programs and not self._windowed(p):
            try:
                self._udp_ring = BpfRing(self._obj.map("udp_ring"))
                self._watch_udp_once(self._udp_ring.poll(0))   # datagrams flowing: on at once
            except KernelError as e:
                self.stop()
                raise TracerError(str(e)) from None
            self._start_udp_watch()
        return self

    # -- UDP reads on demand (UDP_READS_FALLBACK) --------------------------------------------
    def _start_udp_watch(self) -> None:
        self._udp_watch_stop = threading.Event()
        self._udp_watch = threading.Thread(target=self._watch_udp, name="steer-udp-reads",
                                           daemon=True)
        self._udp_watch.start()

    def _stop_udp_watch(self) -> bool:
        """Stop the thread, if it runs; whether it did."""
        thread, self._udp_watch = self._udp_watch, None
        self._udp_watch_stop.set()
        if thread and self._udp_ring:
            self._udp_ring.wake()   # out of its poll now, not at the poll's timeout
        if thread and thread is not threading.current_thread():
            thread.join()
        return thread is not None

    @contextmanager
    def threads_stopped(self):
        """with tracer.threads_stopped(): no thread of the tracer's runs. For changing the
        process's credentials: the C library applies setresuid() to every thread and aborts the
        process where one of them cannot follow, and capset() changes the calling thread alone,
        so a thread started before keeps what the caller gave up. Started again after, it
        inherits what the caller has then."""
        running = self._stop_udp_watch()
        windows = self._stop_windows()
        try:
            yield
        finally:
            if windows and self._obj:
                self._start_windows()
            if running and self._obj:
                self._start_udp_watch()

    def _watch_udp(self) -> None:
        """The thread that puts the UDP reads' program on its hook while datagrams arrive."""
        try:
            while not self._udp_watch_stop.is_set():
                self._watch_udp_once(self._udp_ring.poll(250))   # a wake-up, or the clock
        except KernelError as e:
            self.udp_reads_error = str(e)   # the figure stays as it is; the reads stop

    def _watch_udp_once(self, rang: int) -> None:
        now = time.monotonic()
        with self._lock:
            if not self._obj or not self._on_hooks:
                return
            on = UDP_READS_FALLBACK in self._obj.attached
            if rang:
                self._udp_last = now
                if not on:
                    self._obj.attach(UDP_READS_FALLBACK, exists_for=REATTACH_SECONDS)
                    self.udp_reads_attachments += 1
                    rang_at = self._udp_ring.last[:8]
                    if len(rang_at) == 8:
                        self.udp_reads_unwatched_ns += max(
                            0, time.monotonic_ns() - struct.unpack("@Q", rang_at)[0])
            elif on and now - self._udp_last > max(UDP_READS_IDLE, 2 * UDP_READS_REARM):
                # (the ring rings once a rearm at most: a shorter wait would take a steady
                # flow for ended)
                self._obj.detach(UDP_READS_FALLBACK)
            if now - self._udp_cleared >= UDP_READS_REARM:
                self._udp_cleared = now
                self._obj.map("udp_seen").update(_ZERO_KEY, _ZERO_KEY)   # the next one rings

    def _load_what_runs(self, obj_path, refused: dict[str, str], forced: set[str],
                        counters: CounterSet, ranges) -> Plan:
        text = None   # sampled timing's kernel text ranges, or why they cannot be had
        self.refused_maps = {m: REFUSE_ENV for m in forced & set(MAPS)}
        for _ in range(len(ALL_PROGRAMS) + len(MAPS) + 1):
            try:
                p = plan(self.timing, self.app_hook, refused, self.latency)
            except PlanError as e:
                raise TracerError(str(e)) from None
            if self.profile and p.timing != "sampled":
                raise TracerError(f"profiling takes the samples of --timing sampled: {p.timing_why}")
            if p.timing == "sampled" and text is None:
                text = self._sampler_text()
                if isinstance(text, str):
                    refused["ft_sample"] = text
                    continue
                if not text[abi.FT_TEXT_PERF_HRTIMER][0] and WITHHELD not in refused:
                    refused[WITHHELD] = ("/proc/kallsyms has no perf_swevent_hrtimer (the "
                                         "cpu-clock event's timer)")
                    continue
            fake = sorted(forced & p.programs)
            if fake:   # as the kernel would: one refusal an attempt
                refused[fake[0]] = f"the kernel refused {SECTIONS[fake[0]]} ({REFUSE_ENV})"
                continue
            try:
                self._load(obj_path, p, counters, text if p.timing == "sampled" else None, ranges)
                return p
            except KernelError as e:
                self._unload()
                if e.map in MAPS and e.map not in self.refused_maps:
                    # a map type the kernel lacks: made no more, the programs that use it fail
                    # to load next time, each named
                    self.refused_maps[e.map] = f"{errno_name(e.errno)}: {os.strerror(e.errno)}"
                    continue
                if e.program not in p.programs or e.program in refused:
                    # nothing names a program to leave out: the object itself does not load
                    if e.errno == errno.EPERM:
                        why = SECCOMP_BPF if seccomp_filtered() else \
                            "is a security policy denying BPF?"
                        raise TracerError(f"{e} ({why})") from None
                    raise TracerError(str(e)) from None
                refused[e.program] = refusal(e.program, e, self.refused_maps)
        raise TracerError("the kernel refused more programs than flowtrace has: "
                          + "; ".join(refused.values()))

    def _absent(self, forced: set[str]) -> dict[str, str]:
        """The programs this kernel has no hook for, by its BTF, and the fexit programs where it
        refuses fexit (steer.kernel.probes), each with why: left out before the first load.
        Where FORCED (REFUSE_ENV's) names an fexit program, the loads find what the kernel
        refuses of them, one at a time, as without the probe."""
        out: dict[str, str] = {}
        if not vmlinux_has_type("btf_trace_sock_recv_length"):
            for prog in ("ft_sock_recv_length", UDP_READS_FALLBACK):
                out[prog] = "this kernel has no sock:sock_recv_length (Linux 6.3+)"
        params = {f: vmlinux_func_params(f) for f in RECV_FUNCS}
        nparams = params["tcp_recvmsg"]
        self._flags_arg = RECVMSG_FLAGS_ARG.get(nparams, 0)
        calls = HOOKS["fexit"] + HOOKS["kprobe"]
        for prog in calls:
            func = HOOKED[prog]
            if nparams not in RECVMSG_FLAGS_ARG:
                out[prog] = ("this kernel's BTF has no tcp_recvmsg" if nparams is None else
                             f"tcp_recvmsg takes {nparams} parameters, a signature steer does "
                             "not know")
            elif params[func] is None:
                out[prog] = f"this kernel's BTF has no {func}" + (
                    " (IPv6 is a module, not loaded)" if func == "udpv6_recvmsg" else "")
        if not (vmlinux_has_type("btf_trace_xdp_cpumap_kthread")
                and vmlinux_has_type("btf_trace_xdp_redirect")):
            for prog in ("ft_xdp_cpumap_kthread", "ft_xdp_redirect"):
                out[prog] = "this kernel has no xdp:xdp_cpumap_kthread tracepoint"
        if not vmlinux_has_type("btf_trace_xdp_cpumap_enqueue"):
            out["ft_xdp_cpumap_enqueue"] = "this kernel has no xdp:xdp_cpumap_enqueue tracepoint"
        if not vmlinux_has_type("btf_trace_sock_recv_length"):
            out["ft_lat_udp_read"] = "this kernel has no sock:sock_recv_length (Linux 6.3+)"
        if not vmlinux_has_type("btf_trace_sk_data_ready"):
            out["ft_lat_queued"] = "this kernel has no sock:sk_data_ready (Linux 6.5+)"
        if not vmlinux_has_type("skb_drop_reason", BTF_KIND_ENUM):
            out["ft_kfree_skb"] = "this kernel's skb:kfree_skb gives no drop reason (Linux 5.17+)"
        # a kernel that refuses fexit (EPERM, as some VMs do) refuses a program of two
        # instructions as it does ours: found so, not by a failed load of the whole object
        fexit = [p for p in HOOKS["fexit"] if p not in out]
        if fexit and not forced & set(fexit) and fexit_errno(HOOKED[fexit[0]]) == errno.EPERM:
            for prog in fexit:
                out[prog] = refusal(prog, KernelError(SECTIONS[prog], errno.EPERM))
        return out

    @staticmethod
    def _sampler_text():
        """The kernel text the sampler tells receive contexts apart by (ft_config.text), or why
        sampled timing cannot have it."""
        try:
            text = kernel_text_ranges([TEXT_SYMBOLS[i] for i in range(abi.FT_TEXT_RANGES)])
        except (KernelError, OSError) as e:
            return f"sampled timing cannot read kernel text addresses: {e}"
        if not text[abi.FT_TEXT_NET_RX][0]:
            return "sampled timing: /proc/kallsyms has no net_rx_action"
        return text

    def _load(self, obj_path, p: Plan, counters: CounterSet, text, ranges) -> None:
        """Load P's programs, fill the maps they read, attach them; KernelError names the
        program where one failed."""
        sampled = p.timing == "sampled"
        events = sum(1 << bit for e, bit in _EVENT_BITS.items() if e in counters.counters) \
            if sampled else 0
        cfg = abi.Config(llc_enabled=1 if "llc_misses" in counters.counters else 0,
                         events=events, recv_flags_arg=self._flags_arg,
                         timing=abi.FT_TIMING_EXACT if p.timing == "exact" else abi.FT_TIMING_SAMPLED,
                         softirq_stacks=0 if preempt_rt() else 1,
                         app_counters=1 if p.hook == "counters" else 0,
                         profile_ranges=len(ranges) if sampled else 0,
                         skb_count=p.skb_count | (abi.FT_COUNT_TCP_SKBS if self._windowed(p)
                                                  else 0),
                         windows=1 if self._windowed(p) else 0,
                         irq_time_apart=1 if self._irq_time_apart else 0,
                         steal_off=self._steal_off)
        for i, (lo, hi) in enumerate(text or ()):
            cfg.text[i][0], cfg.text[i][1] = lo, hi
        sizes = {"flows": self.max_flows, "udp_ring": os.sysconf("SC_PAGESIZE"),
                 # ~4.5 KB an entry, preallocated (not made at all where not asked for)
                 "lat_flows": min(self.max_flows, LATENCY_MAX_FLOWS) if self.latency
                 else possible_cpus()}
        if ranges and sampled:
            sizes.update(profile_text=len(ranges), profile=PROFILE_ENTRIES)
        # fresh events for each attempt: an attached one belongs to its link, which a failed
        # attempt destroys
        self._clocks = self._open_clocks(p) if sampled else []
        self._obj = BpfObject(str(obj_path), rodata=bytes(cfg), max_entries=sizes,
                              only=set(p.programs), btf=self.btf,
                              no_maps=set(self.refused_maps) | (
                                  set() if self.latency else set(LATENCY_MAPS)))
        for event, per_cpu in counters.counters.items():
            if event == "llc_misses" or sampled:   # exact timing reads misses alone
                m = self._obj.map(EVENTS[event][1])
                for c in per_cpu:
                    m.update(struct.pack("I", c.cpu), struct.pack("I", c.fd))
        if WITHHELD in p.programs:   # which perf events' expiries are the sampler's
            self._obj.map("sampler_prog").update(_ZERO_KEY,
                                                 struct.pack("I", self.program_id("ft_sample")))
        if ranges and sampled:
            from steer.trace.profile import pack_ranges
            self._obj.map("profile_text").update_batch(*pack_ranges(ranges))
        self.app_hook_used = p.hook
        self.plan = p
        self._attach(self._clocks)

    def _unload(self) -> None:
        if self._obj:
            self._obj.close()
            self._obj = None
        for c in self._clocks:
            c.close()
        self._clocks = []

    def _capabilities(self, p: Plan, counters: CounterSet) -> Capabilities:
        figures = dict(p.figures)
        if self.unreached_namespaces:
            # setns needs CAP_SYS_ADMIN: a walker that kept it exited, or setns was refused
            lost = (f"not counted in the {self.unreached_namespaces} network namespaces steer "
                    f"could not enter")
            for name in ("open_connections", "tcp_app_bytes"):
                if figures[name].state == WORKS and (name == "open_connections" or p.tcp_walk):
                    figures[name] = Figure(DEGRADED, f"{figures[name].how}; {lost}",
                                           self._unreached_why)
        sampled = p.timing == "sampled"
        if self._windowed(p):
            w = self.windows
            every = f"in windows of {w.window * 1e3:g} ms every {w.cycle * 1e3:g} ms"
            f = figures["udp_app_bytes"]
            if p.hook == "counters" and UDP_READS_FALLBACK in p.programs:
                # on its hook in every window, not on demand: no first moment goes uncounted
                figures["udp_app_bytes"] = Figure(
                    WORKS, f"each read by {HOOK_LABELS['tracepoint']} (every socket's reads pass "
                    "it in the windows)", f.why, f.kernel)
            for name in WINDOWED_FIGURES:
                f = figures.get(name)
                if f and f.state != MISSING and not (name == "tcp_rx_bytes"
                                                     and not p.skb_count & abi.FT_COUNT_TCP):
                    figures[name] = Figure(f.state, f"{f.how}; estimated {every}", f.why, f.kernel)
            timing = Figure(WORKS, f"sampled: cpu-clock at {self.sample_hz} Hz per CPU all the "
                            f"time, the per-packet programs {every}: the flows' shares of kernel "
                            f"time, UDP bytes, NAPI polls and IRQ time are estimates, TCP bytes "
                            f"exact; no syscall hooks", p.timing_why, bool(p.timing_why))
            kernel = Figure(WORKS, f"cpu-clock samples + net:netif_receive_skb, {every}")
        elif sampled:
            timing = Figure(WORKS, f"sampled: cpu-clock at {self.sample_hz} Hz per CPU; times are "
                            "estimates, bytes exact; no syscall hooks", p.timing_why, bool(p.timing_why))
            kernel = Figure(WORKS, "cpu-clock samples + net:netif_receive_skb")
        elif p.timing == "exact":
            timing = Figure(WORKS, "exact: clock reads at every softirq, skb and receive syscall; "
                            "hooks every syscall of the host", p.timing_why, bool(p.timing_why))
            kernel = Figure(WORKS, "irq:softirq_entry/exit + net:netif_receive_skb")
        else:
            timing = Figure(MISSING, "counts only, no CPU time", p.timing_why, bool(p.timing_why))
            kernel = Figure(DEGRADED, "bytes and packets per skb; no time", p.timing_why,
                            bool(p.timing_why))
        if p.hook == "off":
            app = Figure(MISSING, "no receive hook", p.hook_why, bool(p.hook_why))
        else:
            app = Figure(WORKS, "; ".join(f"{FIGURE_WORDS[n]} {figures[n]}" for n in
                                          ("tcp_app_bytes", "udp_app_bytes", "reader", "app_time")))
        if events := [e for e in _EVENT_BITS if e in counters.counters]:
            per_flow = Figure(WORKS, f"{', '.join(events)} per flow and side, charged at each "
                              "sample") if sampled else \
                Figure(MISSING, "exact timing charges LLC misses alone to flows; the other events "
                       "come with --timing sampled")
        else:
            per_flow = counters.status("llc_references")
        return Capabilities(kernel_side=kernel, app_side=app, cpumap_context=figures["kthread_time"],
                            llc=counters.status("llc_misses"), timing=timing,
                            app_calls=figures["app_calls"], drops=figures["drops"],
                            counters=counters.summary(), counters_per_flow=per_flow,
                            mode=p.timing, figures=figures, refused=dict(self.refused))

    def _reason_name(self, reason: int) -> str:
        if not reason:
            return ""
        return self._drop_reasons.get(reason) or f"reason {reason}"

    def _windowed(self, p: Plan | None = None) -> bool:
        p = p or self.plan
        return bool(self.windows) and p is not None and p.timing == "sampled"

    def _attach(self, clocks: list[PerfCounter]) -> None:
        for name in self._obj.programs():
            if name == FLUSH_ITERATOR:
                self._obj.attach_iter(name, "socks")
            elif name != "ft_sample":
                self._obj.attach(name)
        if UDP_READS_FALLBACK in self._obj.attached:
            # on its hook once, so that a kernel that refuses it says so now, as for the
            # others; then off until a datagram (_watch_udp)
            self._obj.detach(UDP_READS_FALLBACK)
            self._obj.map("udp_seen").update(_ZERO_KEY, _ZERO_KEY)   # the next datagram rings
        self._on_hooks = True
        self._udp_cleared = self._udp_last = 0.0
        windowed = self._windowed()
        for c in clocks:
            # in windows too: the sampler runs all the time, at its rate (sampling.bpf.h)
            self._obj.attach_perf_event("ft_sample", c.fd)
            c.fd = -1   # libbpf's link owns the event now and closes it with the link
        if windowed:
            # each went on once (a refusal is said now, as for the others): off until a window
            for name in WINDOWED & set(self._obj.attached):
                self._obj.detach(name)
        if FLUSH_ITERATOR in self._obj.attached:
            self._obj.run_iter(FLUSH_ITERATOR)   # where a kernel refuses to run it, it says so now
        if TCP_ITERATOR in self._obj.attached and (self.app_hook_used == "counters"
                                                   or self.plan.tcp_walk):
            self._walk_tcp()
        if windowed:
            self._windowed_programs = (WINDOWED & self.plan.programs) - set(self.refused)
            self._start_windows()

    # -- windows (sampled timing, steer.trace.windows) ----------------------------------------
    def _start_windows(self) -> None:
        self._runner = WindowRunner(self.windows, self._open_window, self._close_window)
        self._runner.start()

    def _stop_windows(self) -> bool:
        """Stop the windows' thread (its open window closed), if it runs; whether it did."""
        runner, self._runner = self._runner, None
        if runner:
            runner.stop()
        return runner is not None

    def _open_window(self, seq: int, scale: int) -> int:
        with self._lock:
            for name in sorted(self._windowed_programs):
                if name not in self._obj.attached:
                    self._obj.attach(name, exists_for=REATTACH_SECONDS)
            opened = time.monotonic_ns()
            self._obj.map("windows").update(_ZERO_KEY, bytes(abi.Window(opened, seq, scale)))
            self._window_seq = seq
            return opened

    def _close_window(self) -> int:
        with self._lock:
            closed = time.monotonic_ns()
            self._obj.map("windows").update(_ZERO_KEY,
                                            bytes(abi.Window(closed, self._window_seq, 0)))
            for name in self._windowed_programs & set(self._obj.attached):
                self._obj.detach(name)
            return closed

    def _between_windows(self, read):
        """READ() under the lock, between two windows where they run; how long this thread's
        read waited for the gap in self.waited.seconds."""
        asked, began = time.monotonic(), []

        def locked():
            began.append(time.monotonic())   # in the windows' thread, where they run
            with self._lock:
                return read()

        runner = self._runner
        self.waited.seconds = 0.0
        if runner is None or threading.current_thread() is runner:
            return locked()
        try:
            out = runner.between_windows(locked, 2 * self.windows.cycle + 10)
            self.waited.seconds = began[0] - asked
            return out
        except (RuntimeError, TimeoutError) as e:
            if runner.error is not None:
                raise TracerError(f"the windows stopped: {runner.error}") from None
            raise TracerError(f"no read between windows: {e}") from None

    def _walk_tcp(self) -> None:
        """Run ft_tcp_sockets over the TCP sockets of every network namespace: with socket
        counters at start, the connections open now are counted from here on; with the walk
        standing in for ft_flush_socks or ft_tcp_state, before each read. A TCP iterator walks
        the namespace of the thread that runs it, so this thread visits each (or the walker
        process of walk_apart, for an exporter that gave up setns' privilege); its own first,
        without setns, and where that fails, the kernel refused the iterator."""
        if self._walker is not None:
            try:
                unreached, why = self._walker.walk()
            except WalkerGone as e:
                self._walker = None   # its own namespace from here on, and says why
                self._walker_gone = str(e)
        if self._walker is None:
            unreached, why = walk_namespaces(self._run_tcp_iterator)
            if unreached and self._walker_gone:
                why = f"{self._walker_gone}; {why}"
        if (unreached, why) != (self.unreached_namespaces, self._unreached_why):
            self.unreached_namespaces, self._unreached_why = unreached, why
            if self.capabilities is not None:   # a walk before each read: say what it reaches
                self.capabilities = self._capabilities(self.plan, self._counters)

    def _run_tcp_iterator(self) -> None:
        self._obj.run_iter(TCP_ITERATOR)

    def detach(self) -> None:
        """Take every program off its hook and leave the maps as they are: what it costs to be
        attached is then measured apart from what it costs to load (bench/)."""
        self._stop_windows()
        with self._lock:
            self._on_hooks = False
            if self._obj:
                self._obj.detach_all()
        self._clocks = []   # their links closed them

    def attach(self) -> None:
        """Put the programs back on their hooks after detach()."""
        if not self._obj or self._obj.attached:
            raise TracerError("attach() follows detach() of a started tracer")
        try:
            clocks = self._open_clocks(self.plan) if self.plan.timing == "sampled" else []
        except KernelError as e:
            raise TracerError(str(e)) from None
        try:
            self._attach(clocks)
        except KernelError as e:
            self._stop_windows()
            self._obj.detach_all()
            for c in clocks:
                c.close()
            raise TracerError(str(e)) from None
        self._clocks = clocks

    def _open_clocks(self, p: Plan) -> list[PerfCounter]:
        """One cpu-clock event per online CPU that overflows about every 1/sample_hz seconds (each
        CPU at its own rate: sample_period); a KernelError names ft_sample, whose events they
        are."""
        clocks: list[PerfCounter] = []
        hz = self.sample_hz
        try:
            for cpu in _online_cpus():
                clocks.append(PerfCounter.open(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, cpu,
                                               sample_period=sample_period(hz, cpu)))
        except KernelError as e:
            for c in clocks:
                c.close()
            raise KernelError(f"sampled timing: cannot open the cpu-clock event: {e}", e.errno,
                              "ft_sample") from None
        return clocks

    def walk_apart(self) -> int | None:
        """Where the plan walks iter/tcp in every network namespace before each read: from now
        on a process of its own does (steer.trace.walker), which keeps the privilege to enter
        them when this one gives it up. Call it with no thread of the tracer's running
        (threads_stopped). Returns the walker's pid, or None where the plan has no walk or this
        process could not enter another namespace anyway."""
        if not self.plan.tcp_walk or not self._obj or not can_walk_apart():
            return None
        if self._walker is None:
            self._walker = NamespaceWalker(self._run_tcp_iterator).start()
        return self._walker.pid

    def stop(self) -> None:
        if self._walker is not None:
            self._walker.close()
            self._walker = None
        self._stop_udp_watch()
        self._stop_windows()
        with self._lock:   # not under a sample() of another thread
            self._on_hooks = False
            if self._udp_ring:
                self._udp_ring.close()
                self._udp_ring = None
            self._unload()
            self._counters.close()

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

    def _running_programs(self) -> list[str]:
        """The programs on their hooks, and those the windows put there in each window."""
        return sorted(set(self.attached_programs) | self._windowed_programs)

    def program_stats(self) -> dict[str, tuple[int, int]]:
        """Program -> (run time ns, runs), counted by the kernel while kernel.bpf_stats_enabled=1."""
        from steer.kernel.links import prog_run_stats
        return {n: prog_run_stats(self._obj.prog_fd(n)) for n in self._running_programs()}

    def program_id(self, name: str) -> int:
        """The kernel's id of the loaded program NAME (as bpftool lists it)."""
        from steer.kernel.links import prog_id
        return prog_id(self._obj.prog_fd(name))

    def program_sizes(self) -> dict[str, tuple[int, int]]:
        """Program -> (instructions as the kernel runs them, bytes of machine code)."""
        from steer.kernel.links import prog_sizes
        return {n: prog_sizes(self._obj.prog_fd(n)) for n in self._running_programs()}

    # -- reading -----------------------------------------------------------------------------
    flow_id = staticmethod(_flow_id_of)   # a FlowId from an unpacked ft_flow_key

    def profile_counts(self) -> dict[bytes, tuple[int, int]]:
        """With profile=True: the kernel's (samples, ns) per raw ft_profile_key since start."""
        from steer.trace.profile import read_counts
        with self._lock:
            if not self._obj:
                raise TracerError("tracer is not running")
            return read_counts(self._obj.map("profile"))

    def latency_totals(self, raw: bool = False) -> dict:
        """With latency=True: per flow (a FlowId; RAW: its packed ft_flow_key), the kernel's
        running counts of its delays (steer.model.latency.Totals)."""
        from steer.model.latency import Totals, lat_flow_dtype
        from steer.model.numeric import np
        with self._lock:
            if not self._obj:
                raise TracerError("tracer is not running")
            if "lat_flows" not in self.refused_maps and "ft_lat_arrival" in self._obj.attached:
                m = self._obj.map("lat_flows")
                keys, values = [], []
                for kraw, vraw in m.items():
                    keys.append(bytes(kraw) if raw else _flow_id_of(_FLOW_KEY.unpack(kraw)))
                    values.append(vraw)
                # one array of every entry: the histograms are views into it, not 1,024 Python
                # ints a flow at every read
                v = np.frombuffer(b"".join(values), lat_flow_dtype())
                return {key: Totals(v["hist"][i], int(v["samples"][i]), int(v["lost"][i]),
                                    int(v["sum_ns"][i]), int(v["staged"][i]), v["hist_stack"][i],
                                    v["hist_queue"][i], int(v["wakes"][i]),
                                    int(v["cross_wakes"][i]), int(v["wake_sum_ns"][i]),
                                    v["hist_wake"][i])
                        for i, key in enumerate(keys)}
            return {}

    def sample(self, beside=None) -> TraceSample:
        """Read every map once: cumulative counters since start. Also flushes the sockets' reads
        into the flow map first, and deletes kernel entries idle for idle_timeout (their totals
        stay in the returned sample's history; `expired` counts them). Thread-safe: `steer auto
        --listen` reads from its loop and from scrapes; reads take turns, and stop() waits for
        the one under way. BESIDE(): called just before and just after the read, in the same
        gap between windows (a truth's reading, taken with steer's): then (sample, (before,
        after))."""
        if beside is None:
            return self._between_windows(self._read_maps)

        def read_beside():
            before = beside()
            sample = self._read_maps()
            return sample, (before, beside())
        return self._between_windows(read_beside)

    def sample_arrays(self) -> TraceSample:
        """As sample(), with the flow map's entries as arrays (TraceSample.arrays) and no
        entries: what the exporter reads at every scrape, an object for none of them (a
        map full of new connections at every read costs no more than one of old ones)."""
        return self._between_windows(self._read_arrays)

    def _read_arrays(self) -> TraceSample:
        self._flush()
        arrays = FlowArrays.from_raw(self._flows.raw_batches())
        # an idle entry is in this read with its final counts, and gone from the next
        idle = arrays.keys[arrays.values["last_seen_ns"] < self._idle_cutoff()]
        for key in idle:
            self._expired += self._flows.delete(key.tobytes())
        # sample()'s readers take the next sample for one after a gap: they compare it all
        self._seq += 1
        return self._with_cpus({}, len(arrays) - len(idle), (), arrays)

    def _flush(self) -> None:
        """The sockets' reads since the last read, into the flow map."""
        if not self._obj:
            raise TracerError("tracer is not running")
        if self.plan.tcp_walk:
            self._walk_tcp()   # in ft_flush_socks' place: the sockets' counts, into flows
        elif FLUSH_ITERATOR in self._obj.attached:
            self._obj.run_iter(FLUSH_ITERATOR)   # sockets' reads since the last flush, into flows

    def _idle_cutoff(self) -> int:
        # bpf_ktime_get_ns() and time.monotonic_ns() read the same clock (CLOCK_MONOTONIC)
        return time.monotonic_ns() - int(self.idle_timeout * 1e9)

    def _read_maps(self) -> TraceSample:
        self._flush()
        cutoff = self._idle_cutoff()
        last, idle, changed = {}, [], []
        ids, prev = self._ids, self._last
        entries = dict(self._entries)   # a copy keeps the hashes: only changes cost
        ks, vs = self._flows.key_size, self._flows.value_size
        for kbuf, vbuf, n in self._flows.raw_batches():
            for i in range(n):
                kraw = kbuf[i * ks:(i + 1) * ks]
                # an entry changed when any counter did: comparing the raw counters, not a
                # timestamp, lets the kernel side stamp last_seen_ns with a coarse clock. Their
                # hash stands for them: 300 bytes an entry less to keep, and a collision (1 in
                # 2^64) only puts a change off to the next read
                vhash = hash(vbuf[i * vs:i * vs + _LAST_SEEN_OFFSET])
                hit = prev.pop(kraw, None)
                if hit is None or hit[2] != vhash:
                    # new or updated: unpack it; an unchanged entry keeps its object, which lets
                    # build_snapshot pass over idle flows with an identity test
                    fid = ids.get(kraw[:_FLOW_KEY_SIZE])
                    key, entry = self._entry(kraw, vbuf, i * vs, fid)
                    if fid is None:
                        ids[kraw[:_FLOW_KEY_SIZE]] = key[0]
                    hit = (key, entry, vhash)
                    entries[key] = entry
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
        return self._with_cpus(entries, len(entries) - len(idle), tuple(changed))

    def _entry(self, kraw: bytes, vbuf, offset: int, fid: FlowId | None = None):
        """((flow, CPU), FlowCpuSample) of the packed entry KRAW and VBUF[OFFSET:]; FID: its
        flow, where the caller knows it."""
        k = _KEY.unpack(kraw)
        v = _VALUE.unpack_from(vbuf, offset)
        fid = _flow_id_of(k) if fid is None else fid
        napi_id = v[_COUNTERS + 4]
        return (fid, k[7]), FlowCpuSample(
            fid, k[7], *v[:_COUNTERS], app_pid=v[_COUNTERS], rx_ifindex=v[_COUNTERS + 1],
            app_comm=v[_COUNTERS + 2].rstrip(b"\0").decode(errors="replace"),
            rx_netns=v[_COUNTERS + 3], rx_queue=v[_COUNTERS + 5],
            rx_napi_id=napi_id if napi_id > self._max_sender_cpu else 0,
            last_drop_reason=self._reason_name(v[_COUNTERS + 7]),
            app_cgroup=v[_COUNTERS + 8])

    def entries_of(self, arrays: FlowArrays) -> dict:
        """Rows of a sample_arrays() read as sample() gives entries: (flow, CPU) ->
        FlowCpuSample, an object for each of these rows only."""
        ks, vs = arrays.keys.dtype.itemsize, arrays.values.dtype.itemsize
        kbuf, vbuf = arrays.keys.tobytes(), arrays.values.tobytes()
        return dict(self._entry(kbuf[i * ks:(i + 1) * ks], vbuf, i * vs) for i in range(len(arrays)))

    def cpu_totals(self) -> tuple[CpuSample, ...]:
        """Each CPU's totals alone, read now (one map, a lookup): cumulative since start, as
        in sample()'s cpus."""
        return self._between_windows(self._read_cpus)

    def _read_cpus(self) -> tuple[CpuSample, ...]:
        per_cpu = self._cpus.lookup(struct.pack("I", 0))
        fields = [{n: getattr(abi.CpuStats.from_buffer_copy(raw), n) for n in _CPU_FIELDS}
                  for raw in per_cpu]
        if self._softirqs0 is not None:
            # sampled timing has no softirq programs: the kernel's own count, since start
            for cpu, n in net_rx_softirqs().items():
                if cpu < len(fields):
                    fields[cpu]["net_rx_events"] = n - self._softirqs0.get(cpu, 0)
        return tuple(CpuSample(i, **f) for i, f in enumerate(fields))

    def _with_cpus(self, entries: dict, live: int, changed: tuple,
                   arrays: FlowArrays | None = None) -> TraceSample:
        """A sample of ENTRIES (or ARRAYS) with the per-CPU maps read now."""
        cpus = self._read_cpus()
        return TraceSample(time.monotonic_ns(), entries, cpus, live, self._flows.max_entries,
                           self._expired, self._seq, changed,
                           cpu_events=self._counters.whole_cpu(), napi=self._napi_polls(cpus),
                           arrays=arrays)

    def _napi_polls(self, cpus) -> dict:
        """NapiId -> CPU -> NapiCounts: the devices' instances that polled since the start, from
        the napi_polls map, and the backlog (all-zero id) from the CPUS' totals."""
        backlog = {c.cpu: NapiCounts(c.backlog_polls, c.backlog_packets, c.backlog_full_polls)
                   for c in cpus if c.backlog_polls}
        out = {NapiId(0, 0, 0): backlog} if backlog else {}
        if "napi_polls" in self.refused_maps:
            return out
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
    from steer.model.topology import online_cpus
    try:
        return online_cpus()
    except OSError:
        return list(range(possible_cpus()))
