"""Python mirror of bpf/steer.h: structs checked against the object's BTF, constants against the
header itself (HEADER_CONSTANTS), by tests/artifacts/test_build.py."""
import ctypes

u8, u16, u32, u64 = ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64

MAX_RULES = 16384
MAX_MASKS = 32
F_PROTO, F_SRC, F_SPORT, F_DST, F_DPORT = 0x01, 0x02, 0x04, 0x08, 0x10
F_ALL = 0x1F
FIELD_BITS = {"proto": F_PROTO, "src": F_SRC, "sport": F_SPORT, "dst": F_DST, "dport": F_DPORT}
HEADER_CONSTANTS = {"STEER_MAX_RULES": MAX_RULES, "STEER_MAX_MASKS": MAX_MASKS,
                    **{f"STEER_F_{n.upper()}": bit for n, bit in FIELD_BITS.items()}}


class RuleKey(ctypes.Structure):
    _fields_ = [("saddr", u8 * 16), ("daddr", u8 * 16), ("sport", u16), ("dport", u16),
                ("proto", u8), ("family", u8), ("mask", u8), ("pad", u8)]


class Rule(ctypes.Structure):
    _fields_ = [("cpu", u32), ("id", u32)]


class RuleStats(ctypes.Structure):
    _fields_ = [("packets", u64), ("bytes", u64)]


class Counters(ctypes.Structure):
    _fields_ = [("passed", u64), ("unparsed", u64), ("redirected", u64), ("redirect_failed", u64)]


class Masks(ctypes.Structure):
    _fields_ = [("count", u32), ("mask", u8 * MAX_MASKS)]


class CpumapVal(ctypes.Structure):
    """struct bpf_cpumap_val: queue size, and an optional program (fd 0: none)."""
    _fields_ = [("qsize", u32), ("prog_fd", ctypes.c_int32)]


MIRRORS = {"steer_rule_key": RuleKey, "steer_rule": Rule, "steer_rule_stats": RuleStats,
           "steer_counters": Counters, "steer_masks": Masks}
