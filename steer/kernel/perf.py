"""perf events (a counter per CPU, or a clock that runs a BPF program) and the kernel's text
addresses from kallsyms, which sampled timing matches its samples against."""
from __future__ import annotations

import ctypes
import errno
import os
import struct
from dataclasses import dataclass

from steer.kernel.errors import KernelError
from steer.kernel.libc import syscall
from steer.kernel.privileges import CAP_SYS_ADMIN, effective_caps


# perf_event_open: the fields up to config1 (PERF_ATTR_SIZE_VER0, 64 bytes) are all steer sets
class _PerfEventAttr(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
                ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64),
                ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64),
                ("wakeup_events", ctypes.c_uint32), ("bp_type", ctypes.c_uint32),
                ("config1", ctypes.c_uint64)]


PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE = 0, 1
PERF_COUNT_HW_CPU_CYCLES = 0
PERF_COUNT_HW_INSTRUCTIONS = 1
PERF_COUNT_HW_CACHE_REFERENCES = 2  # the generic "LLC reference" (LONGEST_LAT_CACHE.REFERENCE on Intel)
PERF_COUNT_HW_CACHE_MISSES = 3     # the generic "LLC miss" event (LONGEST_LAT_CACHE.MISS on Intel)
_PERF_FORMAT_TOTAL_TIMES = 1 | 2   # TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING
PERF_COUNT_SW_CPU_CLOCK = 0
_PERF_FLAG_FD_CLOEXEC = 1 << 3
PARANOID = "/proc/sys/kernel/perf_event_paranoid"


def paranoid_refusal(path: str = PARANOID, status: str = "/proc/self/status") -> str:
    """Why a perf_event_open refused with EACCES may have been, or "": above 2,
    kernel.perf_event_paranoid keeps every perf event (a sampler's clock, a counter, a kprobe)
    for CAP_SYS_ADMIN on Debian's kernels (their CONFIG_SECURITY_PERF_EVENTS_RESTRICT sets 3 at
    boot), CAP_PERFMON or not. Upstream kernels have no level above 2 and answer 3 as 2."""
    try:
        with open(path) as f:
            level = int(f.read())
        caps = effective_caps(status)
    except (OSError, ValueError):
        return ""
    if level <= 2 or caps & (1 << CAP_SYS_ADMIN):
        return ""
    return (f"kernel.perf_event_paranoid is {level}: above 2, Debian's kernels keep perf events "
            "for CAP_SYS_ADMIN")



@dataclass
class PerfCounter:
    """One counting perf event per CPU, kept open for as long as the map refers to them."""
    cpu: int
    fd: int

    @staticmethod
    def open(ptype: int, config: int, cpu: int, sample_period: int = 0) -> "PerfCounter":
        """A counter on CPU; with SAMPLE_PERIOD, one that overflows every that many events (for
        cpu-clock: nanoseconds), to run a BPF program attached to it."""
        attr = _PerfEventAttr(type=ptype, size=ctypes.sizeof(_PerfEventAttr), config=config,
                              sample_period=sample_period,
                              read_format=0 if sample_period else _PERF_FORMAT_TOTAL_TIMES)
        fd = syscall("perf_event_open", ctypes.byref(attr), ctypes.c_int(-1), ctypes.c_int(cpu),
                     ctypes.c_int(-1), ctypes.c_ulong(_PERF_FLAG_FD_CLOEXEC))
        if fd < 0:
            err = ctypes.get_errno()
            why = paranoid_refusal() if err == errno.EACCES else ""
            raise KernelError(f"perf_event_open on CPU {cpu}: {os.strerror(err)}"
                              + (f" ({why})" if why else ""), err)
        return PerfCounter(cpu, fd)

    def read(self) -> int:
        """A counting event's count since it was opened, scaled up for the time it was not on
        the PMU (the kernel multiplexes more events than the PMU has counters)."""
        value, enabled, running = struct.unpack("QQQ", os.read(self.fd, 24))
        return value if running in (0, enabled) else int(value * enabled / running)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def kernel_text_ranges(names: list[list[str]], path: str = "/proc/kallsyms") -> list[tuple[int, int]]:
    """[start, end) of the first of each group of NAMES that the running kernel has ((0, 0): none
    of them), from kallsyms: a function ends where the next text symbol begins. Addresses read as 0
    without CAP_SYSLOG (kptr_restrict): that raises, since nothing could be matched. The file is
    searched as bytes, not split into its ~120,000 lines: every sampled tracer's start reads it."""
    with open(path, "rb") as f:
        text = f.read()
    out = []
    for group in names:
        out.append(next((r for r in (_text_range(text, n) for n in group) if r), (0, 0)))
    return out


_TEXT_KINDS = (b"t", b"T", b"w", b"W")   # kallsyms' kinds of text symbol


def _text_range(text: bytes, name: str) -> tuple[int, int] | None:
    """[start, end) of NAME's first text symbol in kallsyms TEXT ("ADDR KIND NAME[\t[MODULE]]"
    lines), or None where it has none, or none that ends."""
    key = b" " + name.encode()
    i = 0
    while (i := text.find(key, i)) >= 0:
        j = i + len(key)
        if text[j:j + 1] in (b"\n", b"\t", b"") and i >= 2 and text[i - 1:i] in _TEXT_KINDS \
                and text[i - 2] == ord(" "):
            start = int(text[text.rfind(b"\n", 0, i) + 1:i - 2], 16)
            if start == 0:
                raise KernelError("/proc/kallsyms shows no addresses (kptr_restrict): "
                                  "sampled timing needs CAP_SYSLOG, or run as root")
            line = text.find(b"\n", j) + 1
            while line > 0:   # the next text symbol at a higher address: its end
                nxt = text.find(b"\n", line) + 1
                fields = text[line:nxt or len(text)].split(maxsplit=2)
                if len(fields) >= 2 and fields[1] in _TEXT_KINDS \
                        and int(fields[0], 16) > start:
                    return start, int(fields[0], 16)
                line = nxt
            return None
        i = j
    return None
