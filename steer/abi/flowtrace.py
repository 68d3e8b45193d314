"""Python mirror of bpf/flowtrace.h. tests/artifacts/test_build.py checks every size and offset against the
BTF of the built object, so the two sides cannot drift apart silently."""
import ctypes

u8, u16, u32, u64 = ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64
FT_COMM_LEN = 16


class FlowKey(ctypes.Structure):
    _fields_ = [("saddr", u8 * 16), ("daddr", u8 * 16), ("sport", u16), ("dport", u16),
                ("proto", u8), ("family", u8), ("pad", u16)]


class FlowCpuKey(ctypes.Structure):
    _fields_ = [("flow", FlowKey), ("cpu", u32)]


# the other PMU events' per-side counters, in ft_flow_stats and ft_cpu_stats alike
EVENT_FIELDS = ("refs_kernel", "refs_app", "instructions_kernel", "instructions_app",
                "cycles_kernel", "cycles_app")


class FlowStats(ctypes.Structure):
    _fields_ = [("rx_bytes", u64), ("rx_packets", u64), ("rx_skbs", u64), ("redirected_skbs", u64),
                ("kernel_ns", u64),
                ("kthread_ns", u64), ("app_bytes", u64), ("app_calls", u64), ("app_ns", u64),
                ("app_nested_ns", u64), ("llc_kernel", u64), ("llc_app", u64), ("rx_drops", u64),
                *((name, u64) for name in EVENT_FIELDS), ("kernel_samples", u64),
                ("app_samples", u64), ("last_seen_ns", u64), ("app_pid", u32), ("rx_ifindex", u32),
                ("app_comm", ctypes.c_char * FT_COMM_LEN), ("rx_netns", u32), ("rx_napi_id", u32),
                ("rx_queue", u16), ("pad", u16), ("last_drop_reason", u32), ("app_cgroup", u64)]


class CpuStats(ctypes.Structure):
    _fields_ = [(name, u64) for name in (
        "net_rx_events", "net_rx_ns", "net_rx_unattributed_ns", "kthread_ns",
        "kthread_unattributed_ns", "softirq_ns", "softirq_llc", "app_ns", "app_nested_ns",
        "llc_kernel", "llc_app", "flow_inserts", "flow_failures", "untimed_skbs", "samples",
        "samples_kernel_mode", "rx_drops", *EVENT_FIELDS, "napi_thread_ns", "hardirq_ns",
        "hardirqs", "backlog_polls", "backlog_packets", "backlog_full_polls", "napi_map_full",
        "profile_map_full", "cpumap_enqueue_drops", "cpumap_kthread_drops", "recv_calls_lost",
        "kthread_softirq_ns", "kthread_net_rx_ns", "samples_withheld",
        "samples_withheld_unknown", "net_rx_samples")]


class NapiKey(ctypes.Structure):
    _fields_ = [("netns", u32), ("ifindex", u32), ("napi_id", u32)]


class NapiStats(ctypes.Structure):
    _fields_ = [("polls", u64), ("packets", u64), ("full_polls", u64)]


# enum ft_text and enum ft_timing: checked against the header (HEADER_CONSTANTS), and ft_timing
# also against the object's BTF, where its typed member in ft_config puts it
FT_TEXT_NET_RX, FT_TEXT_NAPI_THREAD, FT_TEXT_SOFTIRQ, FT_TEXT_RPS_IPI, FT_TEXT_IPI_FIRST = range(5)
FT_TEXT_IPI_LAST = FT_TEXT_IPI_FIRST + 6
FT_TEXT_PERF_HRTIMER = FT_TEXT_IPI_LAST + 1
FT_TEXT_RANGES = FT_TEXT_PERF_HRTIMER + 1
FT_TIMING_EXACT, FT_TIMING_SAMPLED = range(2)
FT_CATEGORY_NONE, FT_CATEGORY_OTHER = range(2)
FT_SIDE_KERNEL, FT_SIDE_KTHREAD, FT_SIDE_APP = range(3)
FT_EVENT_REFERENCES, FT_EVENT_INSTRUCTIONS, FT_EVENT_CYCLES, FT_EVENTS = range(4)
FT_COUNT_TCP, FT_COUNT_UDP, FT_COUNT_TCP_SKBS = 1, 2, 4
FT_LAT_SLOTS, FT_LAT_SUB, FT_LAT_BUCKETS = 16, 8, 256
FT_LAT_GATE_NS, FT_LAT_GATE_MAX_NS, FT_LAT_TCP = 100_000, 1_000_000_000, 1 << 32
FT_LAT_CALM = 4 * FT_LAT_SLOTS
ENUMS = {"ft_timing": {"FT_TIMING_EXACT": FT_TIMING_EXACT, "FT_TIMING_SAMPLED": FT_TIMING_SAMPLED}}
HEADER_CONSTANTS = {"FT_COMM_LEN": FT_COMM_LEN, "FT_TEXT_NET_RX": FT_TEXT_NET_RX,
                    "FT_TEXT_NAPI_THREAD": FT_TEXT_NAPI_THREAD, "FT_TEXT_SOFTIRQ": FT_TEXT_SOFTIRQ,
                    "FT_TEXT_RPS_IPI": FT_TEXT_RPS_IPI, "FT_TEXT_IPI_FIRST": FT_TEXT_IPI_FIRST,
                    "FT_TEXT_IPI_LAST": FT_TEXT_IPI_LAST,
                    "FT_TEXT_PERF_HRTIMER": FT_TEXT_PERF_HRTIMER,
                    "FT_TEXT_RANGES": FT_TEXT_RANGES, **ENUMS["ft_timing"],
                    "FT_CATEGORY_NONE": FT_CATEGORY_NONE, "FT_CATEGORY_OTHER": FT_CATEGORY_OTHER,
                    "FT_SIDE_KERNEL": FT_SIDE_KERNEL, "FT_SIDE_KTHREAD": FT_SIDE_KTHREAD,
                    "FT_SIDE_APP": FT_SIDE_APP, "FT_EVENT_REFERENCES": FT_EVENT_REFERENCES,
                    "FT_EVENT_INSTRUCTIONS": FT_EVENT_INSTRUCTIONS,
                    "FT_EVENT_CYCLES": FT_EVENT_CYCLES, "FT_EVENTS": FT_EVENTS,
                    "FT_COUNT_TCP": FT_COUNT_TCP, "FT_COUNT_UDP": FT_COUNT_UDP,
                    "FT_COUNT_TCP_SKBS": FT_COUNT_TCP_SKBS,
                    "FT_LAT_SLOTS": FT_LAT_SLOTS, "FT_LAT_SUB": FT_LAT_SUB,
                    "FT_LAT_BUCKETS": FT_LAT_BUCKETS, "FT_LAT_GATE_NS": FT_LAT_GATE_NS,
                    "FT_LAT_GATE_MAX_NS": FT_LAT_GATE_MAX_NS, "FT_LAT_TCP": FT_LAT_TCP,
                    "FT_LAT_CALM": FT_LAT_CALM}


class Config(ctypes.Structure):
    _fields_ = [("llc_enabled", u32), ("recv_flags_arg", u32), ("timing", u32),
                ("softirq_stacks", u32), ("app_counters", u32), ("profile_ranges", u32),
                ("events", u32), ("skb_count", u32), ("windows", u32), ("irq_time_apart", u32),
                ("steal_off", ctypes.c_int64), ("text", u64 * 2 * FT_TEXT_RANGES)]


class Window(ctypes.Structure):
    _fields_ = [("open_ns", u64), ("seq", u32), ("scale", u32)]


class TextCategory(ctypes.Structure):
    _fields_ = [("start", u64), ("category", u32), ("pad", u32)]


class ProfileKey(ctypes.Structure):
    _fields_ = [("flow", FlowKey), ("cpu", u32), ("side", u32), ("category", u32)]


class ProfileValue(ctypes.Structure):
    _fields_ = [("samples", u64), ("ns", u64)]


class LatSlot(ctypes.Structure):
    _fields_ = [("id", u64), ("arrival_ns", u64), ("queued_ns", u64)]


class LatFlow(ctypes.Structure):
    _fields_ = [("next_ns", u64), ("gate_ns", u64), ("samples", u64), ("lost", u64),
                ("sum_ns", u64), ("staged", u64), ("head", u32), ("calm", u32),
                ("slot", LatSlot * FT_LAT_SLOTS), ("wakes", u64), ("cross_wakes", u64),
                ("wake_sum_ns", u64), ("hist", u32 * FT_LAT_BUCKETS),
                ("hist_stack", u32 * FT_LAT_BUCKETS), ("hist_queue", u32 * FT_LAT_BUCKETS),
                ("hist_wake", u32 * FT_LAT_BUCKETS)]


# C struct name -> mirror, for the BTF check
MIRRORS = {
    "ft_flow_key": FlowKey, "ft_flow_cpu_key": FlowCpuKey, "ft_flow_stats": FlowStats,
    "ft_cpu_stats": CpuStats, "ft_config": Config, "ft_text_category": TextCategory,
    "ft_profile_key": ProfileKey, "ft_profile_value": ProfileValue,
    "ft_napi_key": NapiKey, "ft_napi_stats": NapiStats, "ft_window": Window,
    "ft_lat_slot": LatSlot, "ft_lat_flow": LatFlow,
}


def struct_format(mirror) -> str:
    """The struct module format of a ctypes mirror (native order and alignment, like the C side),
    so that bulk reads can use struct.iter_unpack; a test checks it against ctypes.sizeof."""
    codes = {ctypes.c_uint8: "B", ctypes.c_uint16: "H", ctypes.c_uint32: "I",
             ctypes.c_uint64: "Q", ctypes.c_int32: "i"}
    out = "@"
    for _, t in mirror._fields_:
        if t in codes:
            out += codes[t]
        elif issubclass(t, ctypes.Array) and t._type_ in (ctypes.c_uint8, ctypes.c_char):
            out += f"{t._length_}s"
        elif issubclass(t, ctypes.Structure):
            out += struct_format(t)[1:]
        else:
            raise TypeError(f"no struct code for {t}")
    return out
