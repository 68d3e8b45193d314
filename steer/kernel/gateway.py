"""The one gateway to the kernel: libbpf (ctypes over the system libbpf.so.1), perf_event_open,
setns and mount. Everything else in steer sees plain Python objects and KernelError.

libbpf >= 1.0 is assumed: functions return NULL or a negative errno and set errno, and nothing
here needs libbpf_get_error().
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import os
import platform
import re
import struct
import tempfile
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from steer.kernel.signals import called_from_c, hold, raise_held

__all__ = [
    "KernelError", "BpfObject", "BpfMap", "PerfCounter", "bpf_dir",
    "possible_cpus", "setns", "enter_netns", "call_with_netns_sysfs", "ensure_bpffs",
    "drop_privileges", "bpf_syscall_needs_capability",
    "vmlinux_has_type",
]


def bpf_dir() -> Path:
    """Where the built BPF objects are: $STEER_BPF_DIR; else the package's own bpf/ (an installed
    wheel or Debian package carries them there, built when the package was); else build/ of the
    checkout the package runs from (`make`)."""
    env = os.environ.get("STEER_BPF_DIR")
    if env:
        return Path(env)
    package = Path(__file__).resolve().parents[1]   # steer/, above steer/kernel/
    packaged = package / "bpf"
    return packaged if (packaged / "flowtrace.bpf.o").exists() else package.parent / "build"


class KernelError(Exception):
    """A kernel or libbpf operation failed; str() is one line a user can act on. `program`: the
    BPF program it failed on, where libbpf's log or the operation names one."""

    def __init__(self, message: str, err: int = 0, program: str | None = None,
                 map_name: str | None = None):
        super().__init__(message)
        self.errno = err
        self.program = program
        self.map = map_name
        self.uses_map = _failed_map(_UNCREATED_MAP) if program else None   # one not created


_lib = None
_lib_lock = threading.Lock()
_libbpf_log: deque[str] = deque(maxlen=200)

# int (*)(enum libbpf_print_level, const char *fmt, va_list ap); va_list is passed as a pointer
_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
_RING_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_libc = ctypes.CDLL(None, use_errno=True)
_libc.vsnprintf.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p]


@_PRINT_FN
@called_from_c
def _libbpf_print(level, fmt, args):
    try:
        # a verifier log comes whole in one line, and says why at its end: its tail is kept
        whole = os.environ.get("STEER_LIBBPF_DEBUG") or b"LOAD LOG" in fmt
        buf = ctypes.create_string_buffer(1 << 20 if whole else 1024)
        _libc.vsnprintf(buf, len(buf), fmt, args)
        line = buf.value.decode(errors="replace").rstrip()
        if len(line) > 4096 and not os.environ.get("STEER_LIBBPF_DEBUG"):
            line = line[:200] + " ... " + line[-3000:]
        if line:
            _libbpf_log.append(line)
        if os.environ.get("STEER_LIBBPF_DEBUG"):
            os.write(2, (line + "\n").encode())
    except BaseException as e:   # ctypes would print and drop it (steer.kernel.signals)
        hold(e)
    return 0


class _Libbpf:
    """libbpf's functions, each followed by raising what its print callback held while it ran."""

    def __init__(self, lib):
        self._lib = lib

    def __getattr__(self, name: str):
        fn = getattr(self._lib, name)

        def call(*args):
            result = fn(*args)
            raise_held()
            return result

        call.__name__ = name
        setattr(self, name, call)   # an attribute from now on, found without __getattr__
        return call


def _libbpf():
    """Load libbpf.so.1 once and declare the functions steer uses."""
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        name = ctypes.util.find_library("bpf") or "libbpf.so.1"
        try:
            lib = ctypes.CDLL(name, use_errno=True)
        except OSError as e:
            raise KernelError(f"cannot load the system libbpf ({name}): {e}; "
                              "apt-get install libbpf1") from None
        vp, cp, i, u32, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_size_t
        for fn, res, args in [
            ("libbpf_set_print", vp, [_PRINT_FN]),
            ("libbpf_major_version", u32, []),
            ("libbpf_minor_version", u32, []),
            ("bpf_object__open_file", vp, [cp, vp]),  # opts: _OpenOpts
            ("bpf_object__load", i, [vp]),
            ("bpf_object__close", None, [vp]),
            ("bpf_object__find_map_by_name", vp, [vp, cp]),
            ("bpf_object__find_program_by_name", vp, [vp, cp]),
            ("bpf_object__next_program", vp, [vp, vp]),
            ("bpf_object__next_map", vp, [vp, vp]),
            ("bpf_program__name", cp, [vp]),
            ("bpf_program__set_autoload", i, [vp, ctypes.c_bool]),
            ("bpf_program__autoload", ctypes.c_bool, [vp]),
            ("bpf_program__attach", vp, [vp]),
            ("bpf_program__attach_perf_event", vp, [vp, i]),
            ("bpf_program__attach_iter", vp, [vp, vp]),   # opts: _IterAttachOpts
            ("bpf_link__fd", i, [vp]),
            ("bpf_iter_create", i, [i]),
            ("bpf_program__fd", i, [vp]),
            ("bpf_link__destroy", i, [vp]),
            ("bpf_map__set_max_entries", i, [vp, u32]),
            ("bpf_map__set_autocreate", i, [vp, ctypes.c_bool]),
            ("bpf_map__max_entries", u32, [vp]),
            ("bpf_map__set_initial_value", i, [vp, vp, sz]),
            ("bpf_map__fd", i, [vp]),
            ("bpf_map__key_size", u32, [vp]),
            ("bpf_map__value_size", u32, [vp]),
            ("bpf_map__type", i, [vp]),
            ("bpf_map_lookup_elem", i, [i, vp, vp]),
            ("bpf_map_update_elem", i, [i, vp, vp, ctypes.c_uint64]),
            ("bpf_map_delete_elem", i, [i, vp]),
            ("bpf_map_get_next_key", i, [i, vp, vp]),
            ("bpf_map_lookup_batch", i, [i, vp, vp, vp, vp, ctypes.POINTER(u32), vp]),
            ("bpf_map_update_batch", i, [i, vp, vp, ctypes.POINTER(u32), vp]),
            ("libbpf_num_possible_cpus", i, []),
            ("btf__load_vmlinux_btf", vp, []),
            ("btf__find_by_name_kind", ctypes.c_int32, [vp, cp, u32]),
            ("btf__free", None, [vp]),
            ("btf__type_by_id", ctypes.POINTER(_BtfType), [vp, u32]),
            ("bpf_map__set_pin_path", i, [vp, cp]),
            ("bpf_obj_get", i, [cp]),
            ("bpf_obj_get_opts", i, [cp, vp]),   # opts: _ObjGetOpts
            ("bpf_obj_pin", i, [i, cp]),
            ("bpf_obj_get_info_by_fd", i, [i, vp, ctypes.POINTER(u32)]),
            ("bpf_link_create", i, [i, i, ctypes.c_int, vp]),
            ("bpf_prog_test_run_opts", i, [i, vp]),
            ("ring_buffer__new", vp, [i, _RING_FN, vp, vp]),
            ("ring_buffer__poll", i, [vp, i]),
            ("ring_buffer__free", None, [vp]),
        ]:
            f = getattr(lib, fn)
            f.restype, f.argtypes = res, args
        lib.libbpf_set_print(_libbpf_print)
        _lib = _Libbpf(lib)
        return _lib


class _BtfType(ctypes.Structure):
    """struct btf_type (uapi/linux/btf.h): for a FUNC, `type` is its FUNC_PROTO; vlen is info's
    low 16 bits."""
    _fields_ = [("name_off", ctypes.c_uint32), ("info", ctypes.c_uint32),
                ("type", ctypes.c_uint32)]


def _last_libbpf_error() -> str:
    """The most telling libbpf log line: verifier and relocation failures come before the summary."""
    for line in reversed(_libbpf_log):
        if "libbpf:" in line and ("failed" in line or "error" in line.lower()):
            return line.replace("libbpf: ", "")
    return ""


ENOTSUPP = 524     # kernel-internal, leaks to userspace (no BPF trampoline, for one); not in errno


# libbpf names the program a load failed on ("prog 'ft_x': BPF program load failed: ...", "prog
# 'ft_x': failed to find kernel BTF type ID of ...") before it sums up for the whole object
_FAILED_PROGRAM = re.compile(r"prog '([^']+)': .*fail")
# and the map whose creation failed ("map 'readers': failed to create: ..."): a map type the kernel
# lacks (task storage came in 5.11), before any program is loaded
_FAILED_MAP = re.compile(r"map '([^']+)': failed to create")


def _failed_program() -> str | None:
    """The program libbpf's latest failure line names, if any."""
    for line in reversed(_libbpf_log):
        m = _FAILED_PROGRAM.search(line)
        if m:
            return m.group(1)
    return None


# a program that uses a map not created: libbpf puts a marker in the instruction, which the
# verifier names
_UNCREATED_MAP = re.compile(r"BPF map '([^']+)' is referenced but wasn't created")


def _failed_map(pattern: re.Pattern = _FAILED_MAP) -> str | None:
    for line in reversed(_libbpf_log):
        m = pattern.search(line)
        if m:
            return m.group(1)
    return None


def _fail(what: str, err: int, program: str | None = None,
          map_name: str | None = None) -> KernelError:
    err = abs(err) or ctypes.get_errno()
    detail = _last_libbpf_error()
    reason = "not supported by this kernel (ENOTSUPP)" if err == ENOTSUPP else os.strerror(err)
    msg = f"{what}: {reason}"
    if detail:
        msg += f" ({detail})"
    return KernelError(msg, err, program, map_name)


def errno_name(err: int) -> str:
    """EPERM for 1; ENOTSUPP, which errno does not know, for the kernel's 524."""
    return "ENOTSUPP" if err == ENOTSUPP else errno.errorcode.get(err, f"errno {err}")


# The exporter folds a map of new connections into a few MB of temporary arrays at every scrape,
# in whichever of its server's threads took the request. Numpy's arrays over 128 KB are mmap()ed
# at first; once one is freed, glibc raises its mmap threshold to that size and serves the next
# from a heap, whose freed pages stay with the process, and each thread gets a heap (arena) of
# its own. A map of 16,384 new entries at every scrape, the 2-vCPU VM, 2026-11-26: the process
# kept 70-79 MB with a trim after each scrape, 57-61 MB with one arena as well, 87 MB in one
# thread without a trim, 53 with it.
_M_ARENA_MAX = -8   # mallopt()'s parameter number (glibc malloc.h)


def one_heap() -> None:
    """Every thread started from now on allocates from the main thread's heap (glibc's
    M_ARENA_MAX 1), which trim_heap() then keeps small; nothing on another C library. For a
    process whose threads take turns (the exporter's scrapes hold one lock)."""
    mallopt = getattr(_libc, "mallopt", None)
    if mallopt is not None and "glibc" in " ".join(platform.libc_ver()):
        mallopt(_M_ARENA_MAX, 1)


def trim_heap() -> None:
    """Give the C heap's free pages back to the kernel: glibc's malloc_trim(0), nothing on a C
    library without it."""
    trim = getattr(_libc, "malloc_trim", None)
    if trim is not None:
        trim(0)


def possible_cpus() -> int:
    n = _libbpf().libbpf_num_possible_cpus()
    if n < 0:
        raise _fail("cannot count possible CPUs", n)
    return n


BPF_MAP_TYPE_PERCPU_HASH, BPF_MAP_TYPE_PERCPU_ARRAY, BPF_MAP_TYPE_LRU_PERCPU_HASH = 5, 6, 10
_PERCPU_TYPES = {BPF_MAP_TYPE_PERCPU_HASH, BPF_MAP_TYPE_PERCPU_ARRAY, BPF_MAP_TYPE_LRU_PERCPU_HASH}
BPF_ANY = 0   # update flags: the only one steer passes
_NO_BATCH = (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS)   # kernel < 5.6
BTF_KIND_ENUM, BTF_KIND_TYPEDEF, BTF_KIND_FUNC = 6, 8, 12


class _MapInfo(ctypes.Structure):
    """The head of struct bpf_map_info (uapi/linux/bpf.h)."""
    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32), ("key_size", ctypes.c_uint32),
                ("value_size", ctypes.c_uint32), ("max_entries", ctypes.c_uint32),
                ("map_flags", ctypes.c_uint32), ("name", ctypes.c_char * 16)]


class BpfRing:
    """A BPF ring buffer read for its wake-ups alone: poll() sleeps (without the GIL) until the
    programs put records in it, or TIMEOUT_MS pass, and says how many it took."""

    def __init__(self, bpf_map: "BpfMap"):
        lib = _libbpf()
        self.name = bpf_map.name
        self._count = _RING_FN(lambda ctx, data, size: 0)   # kept: libbpf holds the pointer
        self._rb = lib.ring_buffer__new(bpf_map.fd, self._count, None, None)
        if not self._rb:
            raise _fail(f"cannot read the ring buffer {self.name}", ctypes.get_errno())

    def poll(self, timeout_ms: int) -> int:
        n = _libbpf().ring_buffer__poll(self._rb, timeout_ms)
        if n < 0 and n != -errno.EINTR:
            raise _fail(f"cannot read the ring buffer {self.name}", n)
        return max(n, 0)

    def close(self) -> None:
        if self._rb:
            _libbpf().ring_buffer__free(self._rb)
            self._rb = None


class BpfMap:
    """A loaded map, read and written with bytes keys and values (per-CPU maps: a list per CPU)."""

    def __init__(self, handle, name: str):
        lib = _libbpf()
        self.name = name
        self.fd = lib.bpf_map__fd(handle)
        self._owned = False
        self._setup(lib.bpf_map__key_size(handle), lib.bpf_map__value_size(handle),
                    lib.bpf_map__max_entries(handle), lib.bpf_map__type(handle))

    @classmethod
    def from_pin(cls, path: str, readonly: bool = False) -> "BpfMap":
        """A map pinned in bpffs, opened by path; its sizes come from the kernel. READONLY asks
        only to read it, which a pin's read permission allows (a pin shared with a group)."""
        lib = _libbpf()
        fd = lib.bpf_obj_get_opts(path.encode(), ctypes.byref(_ObjGetOpts(
            sz=ctypes.sizeof(_ObjGetOpts), file_flags=BPF_F_RDONLY if readonly else 0)))
        if fd < 0:
            raise _fail(f"cannot open pinned map {path}", fd)
        info = _MapInfo()
        n = ctypes.c_uint32(ctypes.sizeof(info))
        rc = lib.bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(n))
        if rc < 0:
            os.close(fd)
            raise _fail(f"cannot inspect pinned map {path}", rc)
        m = cls.__new__(cls)
        m.name, m.fd, m._owned = os.path.basename(path), fd, True
        m._setup(info.key_size, info.value_size, info.max_entries, info.type)
        return m

    def close(self) -> None:
        if self._owned and self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _setup(self, key_size, value_size, max_entries, map_type):
        self.key_size, self.value_size, self.max_entries = key_size, value_size, max_entries
        self.percpu = map_type in _PERCPU_TYPES
        self._ncpu = possible_cpus() if self.percpu else 1
        # per-CPU values are laid out at 8-byte strides (kernel/bpf/syscall.c, bpf_map_value_size)
        self._stride = (self.value_size + 7) & ~7 if self.percpu else self.value_size

    def _split(self, raw: bytes) -> bytes | list[bytes]:
        if not self.percpu:
            return raw
        return [raw[i * self._stride: i * self._stride + self.value_size] for i in range(self._ncpu)]

    def lookup(self, key: bytes) -> bytes | list[bytes] | None:
        k = ctypes.create_string_buffer(key, self.key_size)
        v = ctypes.create_string_buffer(self._stride * self._ncpu)
        rc = _libbpf().bpf_map_lookup_elem(self.fd, k, v)
        if rc == -errno.ENOENT:
            return None
        if rc < 0:
            raise _fail(f"lookup in map {self.name}", rc)
        return self._split(v.raw)

    def delete(self, key: bytes) -> bool:
        k = ctypes.create_string_buffer(key, self.key_size)
        rc = _libbpf().bpf_map_delete_elem(self.fd, k)
        if rc == -errno.ENOENT:
            return False
        if rc < 0:
            raise _fail(f"delete from map {self.name}", rc)
        return True

    def update(self, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
        k = ctypes.create_string_buffer(key, self.key_size)
        v = ctypes.create_string_buffer(value, max(len(value), self.value_size))
        rc = _libbpf().bpf_map_update_elem(self.fd, k, v, flags)
        if rc < 0:
            raise _fail(f"update of map {self.name}", rc)

    def update_batch(self, keys: bytes, values: bytes) -> int:
        """Insert or replace many entries in one call (5.6+): KEYS and VALUES are the packed
        arrays. Returns how many were written."""
        n = len(keys) // self.key_size
        if len(values) != n * self._stride * self._ncpu:
            raise ValueError("keys and values do not pair up")
        count = ctypes.c_uint32(n)
        kb = ctypes.create_string_buffer(keys, len(keys))
        vb = ctypes.create_string_buffer(values, len(values))
        rc = _libbpf().bpf_map_update_batch(self.fd, kb, vb, ctypes.byref(count), None)
        if rc < 0:
            raise _fail(f"batch update of map {self.name}", rc)
        return count.value

    def memlock(self) -> int | None:
        """Kernel memory charged to the map, from /proc/self/fdinfo."""
        try:
            with open(f"/proc/self/fdinfo/{self.fd}") as f:
                for line in f:
                    if line.startswith("memlock:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return None

    def _batches(self, batch: int):
        """(keys, values, count) per kernel batch lookup (5.6+): packed arrays, per-CPU values at
        their 8-byte stride. Raises KernelError with one of _NO_BATCH where the kernel has none."""
        lib = _libbpf()
        vsize = self._stride * self._ncpu
        keys = ctypes.create_string_buffer(self.key_size * batch)
        vals = ctypes.create_string_buffer(vsize * batch)
        token = ctypes.create_string_buffer(max(self.key_size, 8))
        in_batch = None
        while True:
            count = ctypes.c_uint32(batch)
            rc = lib.bpf_map_lookup_batch(self.fd, in_batch, token, keys, vals, ctypes.byref(count), None)
            err = -rc if rc < 0 else 0
            if err and err != errno.ENOENT:
                raise _fail(f"batch lookup in map {self.name}", err)
            n = count.value
            if n:
                yield keys.raw[:n * self.key_size], vals.raw[:n * vsize], n
            if err == errno.ENOENT:
                return
            in_batch = token

    def raw_batches(self, batch: int = 8192):
        """Every entry as packed arrays, (keys, values, count) per batch, for bulk unpacking;
        one key at a time on kernels without batch lookups."""
        gen = self._batches(batch)
        try:
            first = next(gen, None)
        except KernelError as e:
            if e.errno not in _NO_BATCH:
                raise
            items = self._items_iter()
            if items:
                pad = lambda v: v.ljust(self._stride, b"\0")  # noqa: E731 - per-CPU stride
                yield (b"".join(k for k, _ in items),
                       b"".join(pad(v) if isinstance(v, bytes) else b"".join(map(pad, v))
                                for _, v in items),
                       len(items))
            return
        if first:
            yield first
        yield from gen

    def items(self, batch: int = 4096) -> list[tuple[bytes, bytes | list[bytes]]]:
        """Every entry as (key, value) pairs; per-CPU values as a list per CPU."""
        vsize = self._stride * self._ncpu
        out = []
        for kraw, vraw, n in self.raw_batches(batch):
            for i in range(n):
                out.append((kraw[i * self.key_size:(i + 1) * self.key_size],
                            self._split(vraw[i * vsize:(i + 1) * vsize])))
        return out

    def _items_iter(self):
        lib = _libbpf()
        out = []
        cur = None
        nxt = ctypes.create_string_buffer(self.key_size)
        while lib.bpf_map_get_next_key(self.fd, cur, nxt) == 0:
            key = nxt.raw
            val = self.lookup(key)
            if val is not None:
                out.append((key, val))
            cur = ctypes.create_string_buffer(key, self.key_size)
        return out


class _OpenOpts(ctypes.Structure):
    """struct bpf_object_open_opts of libbpf 1.x, up to kernel_log_level."""
    _fields_ = [("sz", ctypes.c_size_t), ("object_name", ctypes.c_char_p),
                ("relaxed_maps", ctypes.c_bool), ("pin_root_path", ctypes.c_char_p),
                ("_removed_attach_prog_fd", ctypes.c_uint32), ("kconfig", ctypes.c_char_p),
                ("btf_custom_path", ctypes.c_char_p), ("kernel_log_buf", ctypes.c_char_p),
                ("kernel_log_size", ctypes.c_size_t), ("kernel_log_level", ctypes.c_uint32)]


class _IterAttachOpts(ctypes.Structure):   # struct bpf_iter_attach_opts
    _fields_ = [("sz", ctypes.c_size_t), ("link_info", ctypes.c_void_p),
                ("link_info_len", ctypes.c_uint32)]


class BpfObject:
    """A BPF object file: open, configure, load, attach with links, close.

    Programs are attached with BPF links held by this process: when it exits, however it exits,
    the kernel detaches them.
    """

    def __init__(self, path: str, *, rodata: bytes | None = None,
                 max_entries: dict[str, int] | None = None, disable: set[str] = frozenset(),
                 only: set[str] | None = None, btf: str | None = None,
                 pin_root: str | None = None, no_pin: bool = False,
                 no_maps: set[str] = frozenset()):
        lib = _libbpf()
        if not os.path.exists(path):
            raise KernelError(f"BPF object {path} not found: build it with `make`")
        self.path = path
        self._links: list[tuple[str, int]] = []
        self._obj = None
        _libbpf_log.clear()   # so that an error quotes this object's log, not an older one
        opts = _OpenOpts(sz=ctypes.sizeof(_OpenOpts))
        if btf:
            opts.btf_custom_path = btf.encode()
        if pin_root:
            # maps marked LIBBPF_PIN_BY_NAME are pinned here at load, or reused when already there
            opts.pin_root_path = pin_root.encode()
        self._obj = lib.bpf_object__open_file(path.encode(), ctypes.byref(opts))
        if not self._obj:
            raise _fail(f"cannot open {path}", ctypes.get_errno())
        try:
            if rodata is not None:
                m = self._map_handle(".rodata")
                buf = ctypes.create_string_buffer(rodata, len(rodata))
                rc = lib.bpf_map__set_initial_value(m, buf, len(rodata))
                if rc < 0:
                    raise _fail("cannot set the BPF configuration", rc)
            for name, n in (max_entries or {}).items():
                rc = lib.bpf_map__set_max_entries(self._map_handle(name), n)
                if rc < 0:
                    raise _fail(f"cannot size map {name}", rc)
            for name in disable:
                lib.bpf_program__set_autoload(self._prog_handle(name), False)
            for name in no_maps:   # not created: a program that uses one fails to load, named
                lib.bpf_map__set_autocreate(self._map_handle(name), False)
            if only is not None:
                for name in set(self.programs()) - set(only):
                    lib.bpf_program__set_autoload(self._prog_handle(name), False)
            if no_pin:
                # a process-owned instance: its maps die with it instead of landing in bpffs
                m = None
                while True:
                    m = lib.bpf_object__next_map(self._obj, m)
                    if not m:
                        break
                    lib.bpf_map__set_pin_path(m, None)
            rc = lib.bpf_object__load(self._obj)
            if rc < 0:
                failed_map = _failed_map()
                raise _fail(f"cannot load {os.path.basename(path)} into the kernel", rc,
                            None if failed_map else _failed_program(), failed_map)
        except BaseException:
            self.close()
            raise

    def _map_handle(self, name: str):
        m = _libbpf().bpf_object__find_map_by_name(self._obj, name.encode())
        if not m:
            raise KernelError(f"{self.path} has no map {name}")
        return m

    def _prog_handle(self, name: str):
        p = _libbpf().bpf_object__find_program_by_name(self._obj, name.encode())
        if not p:
            raise KernelError(f"{self.path} has no program {name}")
        return p

    def programs(self) -> list[str]:
        lib = _libbpf()
        out, p = [], None
        while True:
            p = lib.bpf_object__next_program(self._obj, p)
            if not p:
                return out
            if lib.bpf_program__autoload(p):
                out.append(lib.bpf_program__name(p).decode())

    def map(self, name: str) -> BpfMap:
        return BpfMap(self._map_handle(name), name)

    def prog_fd(self, name: str) -> int:
        return _libbpf().bpf_program__fd(self._prog_handle(name))

    def attach(self, name: str) -> None:
        lib = _libbpf()
        link = lib.bpf_program__attach(self._prog_handle(name))
        if not link:
            raise _fail(f"cannot attach {name}", ctypes.get_errno(), name)
        self._links.append((name, link))

    def attach_all(self) -> None:
        for name in self.programs():
            self.attach(name)

    def attach_perf_event(self, name: str, perf_fd: int) -> None:
        """Attach NAME to an open perf event through a BPF link (kernel >= 5.15; libbpf falls back
        to the ioctl, which the perf fd's close undoes just as well)."""
        lib = _libbpf()
        link = lib.bpf_program__attach_perf_event(self._prog_handle(name), perf_fd)
        if not link:
            raise _fail(f"cannot attach {name} to a perf event", ctypes.get_errno(), name)
        self._links.append((name, link))

    def attach_iter(self, name: str, map_name: str) -> None:
        """Attach the iterator program NAME to the map MAP_NAME (iter/bpf_*_map programs)."""
        lib = _libbpf()
        info = ctypes.c_uint32(lib.bpf_map__fd(self._map_handle(map_name)))  # bpf_iter_link_info.map
        opts = _IterAttachOpts(sz=ctypes.sizeof(_IterAttachOpts), link_info=ctypes.addressof(info),
                               link_info_len=ctypes.sizeof(info))
        link = lib.bpf_program__attach_iter(self._prog_handle(name), ctypes.byref(opts))
        if not link:
            raise _fail(f"cannot attach the iterator {name}", ctypes.get_errno(), name)
        self._links.append((name, link))

    def run_iter(self, name: str) -> bytes:
        """Run the attached iterator NAME once over its map; returns what it wrote."""
        lib = _libbpf()
        link = next(link for n, link in self._links if n == name)
        fd = lib.bpf_iter_create(lib.bpf_link__fd(link))
        if fd < 0:
            raise _fail(f"cannot run the iterator {name}", -fd, name)
        try:
            out = []
            while chunk := os.read(fd, 65536):
                out.append(chunk)
            return b"".join(out)
        except OSError as e:
            raise KernelError(f"cannot run the iterator {name}: {e.strerror}", e.errno,
                              name) from None
        finally:
            os.close(fd)

    @property
    def attached(self) -> list[str]:
        return [n for n, _ in self._links]

    def detach(self, name: str) -> None:
        """Take the program NAME (attached once) off its hook."""
        lib = _libbpf()
        for i, (n, link) in enumerate(self._links):
            if n == name:
                del self._links[i]
                lib.bpf_link__destroy(link)
                return

    def detach_all(self) -> None:
        lib = _libbpf()
        while self._links:
            _, link = self._links.pop()
            lib.bpf_link__destroy(link)

    def close(self) -> None:
        lib = _libbpf()
        self.detach_all()
        if self._obj:
            lib.bpf_object__close(self._obj)
            self._obj = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def vmlinux_func_params(name: str) -> int | None:
    """How many parameters the kernel function NAME takes by the running kernel's BTF (None: no
    such function there), so that a hook is only attached where it reads the arguments it means."""
    lib = _libbpf()
    btf = lib.btf__load_vmlinux_btf()
    if not btf:
        return None
    try:
        fid = lib.btf__find_by_name_kind(btf, name.encode(), BTF_KIND_FUNC)
        if fid <= 0:
            return None
        proto = lib.btf__type_by_id(btf, lib.btf__type_by_id(btf, fid).contents.type)
        return proto.contents.info & 0xffff      # a FUNC_PROTO's vlen is its parameter count
    finally:
        lib.btf__free(btf)


def vmlinux_has_type(name: str, kind: int = BTF_KIND_TYPEDEF) -> bool:
    """Whether the running kernel's BTF defines NAME (a tracepoint exists as btf_trace_<name>)."""
    lib = _libbpf()
    btf = lib.btf__load_vmlinux_btf()
    if not btf:
        return False
    try:
        return lib.btf__find_by_name_kind(btf, name.encode(), kind) > 0
    finally:
        lib.btf__free(btf)


def generic_xdp_redirects_to_cpumap() -> bool:
    """Whether generic (skb) XDP can redirect to a cpumap: Linux 5.15 added that path
    (cpu_map_generic_redirect); before it the kernel refuses to attach generic XDP that uses a
    cpumap (5.9-5.14: EINVAL), or drops what it redirects."""
    return vmlinux_has_type("cpu_map_generic_redirect", BTF_KIND_FUNC)


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
_SYS_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}
_SYS_SETNS = {"x86_64": 308, "aarch64": 268}


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
        nr = _SYS_PERF_EVENT_OPEN.get(platform.machine())
        if nr is None:
            raise KernelError(f"perf_event_open: unknown syscall number on {platform.machine()}")
        fd = _libc.syscall(ctypes.c_long(nr), ctypes.byref(attr), ctypes.c_int(-1), ctypes.c_int(cpu),
                           ctypes.c_int(-1), ctypes.c_ulong(_PERF_FLAG_FD_CLOEXEC))
        if fd < 0:
            err = ctypes.get_errno()
            raise KernelError(f"perf_event_open on CPU {cpu}: {os.strerror(err)}", err)
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
    without CAP_SYSLOG (kptr_restrict): that raises, since nothing could be matched."""
    wanted = {n: gi for gi, group in enumerate(names) for n in group}
    found: dict[str, int] = {}
    pending: list[str] = []   # symbols found, waiting for the next address as their end
    ends: dict[str, int] = {}
    with open(path) as f:
        for line in f:
            addr, kind, name = line.split(maxsplit=3)[:3]
            if kind not in "tTwW":
                continue
            a = int(addr, 16)
            for p in pending:
                if a > found[p]:
                    ends[p] = a
            pending = [p for p in pending if p not in ends]
            if name in wanted and name not in found:
                if a == 0:
                    raise KernelError("/proc/kallsyms shows no addresses (kptr_restrict): "
                                      "sampled timing needs CAP_SYSLOG, or run as root")
                found[name] = a
                pending.append(name)
            if len(ends) == len(wanted):
                break
    out = []
    for group in names:
        hit = next((n for n in group if n in ends), None)
        out.append((found[hit], ends[hit]) if hit else (0, 0))
    return out


CLONE_NEWNET = 0x40000000


def setns(fd: int, nstype: int = CLONE_NEWNET) -> None:
    """Move the calling thread into a namespace (os.setns arrived only in Python 3.12)."""
    nr = _SYS_SETNS.get(platform.machine())
    rc = _libc.syscall(ctypes.c_long(nr), ctypes.c_int(fd), ctypes.c_int(nstype)) if nr else -1
    if rc < 0:
        err = ctypes.get_errno()
        raise KernelError(f"setns: {os.strerror(err)}", err)


def enter_netns(path: str) -> None:
    """The calling thread into the network namespace at PATH for good: in a child before exec,
    or in one that exits after its work (netns_of goes there and back)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise KernelError(f"network namespace {path}: {e.strerror}", e.errno) from None
    try:
        setns(fd, CLONE_NEWNET)
    finally:
        os.close(fd)


CLONE_NEWNS = 0x00020000
MS_REC, MS_PRIVATE = 0x4000, 0x40000
MNT_DETACH = 2
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_void_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def _mount(source: str, target: str, fstype: str | None, flags: int = 0,
           data: str | None = None) -> None:
    if _libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None,
                   flags, data.encode() if data else None) != 0:
        err = ctypes.get_errno()
        raise KernelError(f"mount {fstype or source} on {target}: {os.strerror(err)}", err)


def call_with_netns_sysfs(ns_path: str | None, fn, *args):
    """fn(sysfs_root, *ARGS) where sysfs_root shows the devices of the network namespace at
    NS_PATH (None: this one, /sys). sysfs shows the namespace of whoever mounts it, so another
    namespace's sysfs is mounted by a child process, in a mount namespace of its own that dies
    with it; FN's result must be JSON, and its exception comes back as a KernelError."""
    if not ns_path:
        return fn("/sys", *args)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            enter_netns(ns_path)
            if _libc.unshare(CLONE_NEWNS) != 0:
                raise KernelError(f"unshare: {os.strerror(ctypes.get_errno())}")
            _mount("none", "/", None, MS_REC | MS_PRIVATE)   # nothing leaks to the host
            mnt = tempfile.mkdtemp(prefix="steer-sysfs-")
            try:
                _mount("sysfs", mnt, "sysfs")
                out = fn(mnt, *args)
                _libc.umount2(mnt.encode(), MNT_DETACH)
            finally:
                os.rmdir(mnt)
            os.write(w, json.dumps({"ok": out}).encode())
            code = 0
        except BaseException as e:   # noqa: BLE001 - reported to the parent as one line
            os.write(w, json.dumps({"error": str(e)}).encode())
        finally:
            os._exit(code)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    reply = json.loads(data or b'{"error": "the child process died"}')
    if "error" in reply:
        raise KernelError(reply["error"])
    return reply["ok"]


PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int, sig: int = 9) -> None:
    """In a child between fork and exec: the kernel sends SIG when the parent (pid PARENT, read
    before the fork) dies, so that a parent killed with SIGKILL leaves no child behind it. A parent
    that died before the prctl sends nothing: then the child is already an orphan, and goes."""
    _libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


BPFFS = "/sys/fs/bpf"
_BPF_FS_MAGIC = 0xCAFE4A11


def _fs_magic(path: str) -> int | None:
    class _Statfs(ctypes.Structure):
        _fields_ = [("f_type", ctypes.c_long), ("rest", ctypes.c_byte * 112)]
    st = _Statfs()
    if _libc.statfs(path.encode(), ctypes.byref(st)) != 0:
        return None
    return st.f_type & 0xFFFFFFFF


def ensure_bpffs(path: str = BPFFS) -> str:
    """Mount bpffs at PATH unless it is there already; the pins of steer live below it."""
    if _fs_magic(path) == _BPF_FS_MAGIC:
        return path
    os.makedirs(path, exist_ok=True)
    try:
        # 0700: without mode= the kernel makes bpffs 1777, where anyone could make steer's pin
        # directory first
        _mount("bpf", path, "bpf", data="mode=0700")
    except KernelError as e:
        raise KernelError(f"no bpffs at {path} and mounting one failed: {os.strerror(e.errno)}",
                          e.errno) from None
    return path


BPF_XDP = 37                       # enum bpf_attach_type
XDP_FLAGS_SKB_MODE, XDP_FLAGS_DRV_MODE = 1 << 1, 1 << 2


class _LinkCreateOpts(ctypes.Structure):
    """struct bpf_link_create_opts of libbpf 1.x; steer sets sz and flags and leaves the rest 0."""
    _fields_ = [("sz", ctypes.c_size_t), ("flags", ctypes.c_uint32), ("iter_info", ctypes.c_void_p),
                ("iter_info_len", ctypes.c_uint32), ("target_btf_id", ctypes.c_uint32),
                ("_union", ctypes.c_uint64 * 4)]


def xdp_link(prog_fd: int, ifindex: int, flags: int) -> int:
    """Attach an XDP program to IFINDEX (of the calling thread's netns) through a BPF link; the
    returned fd owns the attachment: close it, or unlink its pin, and the program is detached."""
    opts = _LinkCreateOpts(sz=ctypes.sizeof(_LinkCreateOpts), flags=flags)
    fd = _libbpf().bpf_link_create(prog_fd, ifindex, BPF_XDP, ctypes.byref(opts))
    if fd < 0:
        raise KernelError(f"XDP attach: {os.strerror(-fd)}", -fd)
    return fd


def xdp_link_ifindex(link_fd: int) -> int:
    """The device an XDP link is attached to, 0 once that device is gone (unregistering a netdev
    detaches its links; the link object lives on while someone holds or pins it). struct
    bpf_link_info: type, id, prog_id, then the union at offset 16, whose xdp.ifindex comes first."""
    buf = ctypes.create_string_buffer(64)
    n = ctypes.c_uint32(len(buf))
    rc = _libbpf().bpf_obj_get_info_by_fd(link_fd, buf, ctypes.byref(n))
    if rc < 0:
        raise _fail("cannot read link info", rc)
    return struct.unpack_from("I", buf.raw, 16)[0]


def prog_run_stats(prog_fd: int) -> tuple[int, int]:
    """(run_time_ns, run_cnt) of a program: non-zero only while kernel.bpf_stats_enabled is 1.
    Offsets 192 and 200 of struct bpf_prog_info are uapi, stable since 5.1."""
    buf = ctypes.create_string_buffer(256)
    n = ctypes.c_uint32(len(buf))
    rc = _libbpf().bpf_obj_get_info_by_fd(prog_fd, buf, ctypes.byref(n))
    if rc < 0:
        raise _fail("cannot read program info", rc)
    if n.value < 208:
        return 0, 0
    return struct.unpack_from("QQ", buf.raw, 192)


BPF_F_RDONLY = 1 << 3


class _ObjGetOpts(ctypes.Structure):
    """struct bpf_obj_get_opts of libbpf 1.x, up to file_flags (1.2 adds path_fd after it)."""
    _fields_ = [("sz", ctypes.c_size_t), ("file_flags", ctypes.c_uint32)]


def obj_get(path: str) -> int:
    """An fd for a pinned object (the caller closes it)."""
    fd = _libbpf().bpf_obj_get(path.encode())
    if fd < 0:
        raise _fail(f"cannot open pinned {path}", fd)
    return fd


def obj_pin(fd: int, path: str) -> None:
    rc = _libbpf().bpf_obj_pin(fd, path.encode())
    if rc < 0:
        raise _fail(f"cannot pin {path}", rc)


class _TestRunOpts(ctypes.Structure):
    """struct bpf_test_run_opts of libbpf 1.x, up to the fields steer uses."""
    _fields_ = [("sz", ctypes.c_size_t), ("data_in", ctypes.c_void_p), ("data_out", ctypes.c_void_p),
                ("data_size_in", ctypes.c_uint32), ("data_size_out", ctypes.c_uint32),
                ("ctx_in", ctypes.c_void_p), ("ctx_out", ctypes.c_void_p),
                ("ctx_size_in", ctypes.c_uint32), ("ctx_size_out", ctypes.c_uint32),
                ("retval", ctypes.c_uint32), ("repeat", ctypes.c_int), ("duration", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("cpu", ctypes.c_uint32), ("batch_size", ctypes.c_uint32)]


def prog_test_run(prog_fd: int, packet: bytes, out_size: int = 16384,
                  repeat: int = 1) -> tuple[int, bytes, int]:
    """Run a program on PACKET through BPF_PROG_TEST_RUN, REPEAT times in the kernel:
    (return code, packet after, mean run time in ns as the kernel measured it)."""
    din = ctypes.create_string_buffer(packet, len(packet))
    dout = ctypes.create_string_buffer(out_size)
    opts = _TestRunOpts(sz=ctypes.sizeof(_TestRunOpts), data_in=ctypes.addressof(din),
                        data_out=ctypes.addressof(dout), data_size_in=len(packet),
                        data_size_out=out_size, repeat=repeat)
    rc = _libbpf().bpf_prog_test_run_opts(prog_fd, ctypes.byref(opts))
    if rc < 0:
        raise _fail("BPF_PROG_TEST_RUN", rc)
    return opts.retval, dout.raw[:opts.data_size_out], opts.duration


def network_namespaces(proc: str = "/proc") -> list[str]:
    """A path to each network namespace some process is in (/proc/PID/ns/net, one per namespace),
    the caller's first; processes that go away while we look are passed over."""
    seen: dict[tuple[int, int], str] = {}
    own = f"{proc}/thread-self/ns/net"
    for path in [own] + [f"{proc}/{p}/ns/net" for p in os.listdir(proc) if p.isdigit()]:
        try:
            st = os.stat(path)
        except OSError:
            continue
        seen.setdefault((st.st_dev, st.st_ino), path)
    return list(seen.values())


class netns_of:
    """Context manager: the calling thread in the network namespace at PATH, then back."""

    def __init__(self, path: str | None):
        self.path = path

    def __enter__(self):
        if not self.path:
            return self
        self._home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            enter_netns(self.path)
        except KernelError:
            os.close(self._home)
            raise
        return self

    def __exit__(self, *exc):
        if self.path:
            try:
                setns(self._home, CLONE_NEWNET)
            finally:
                os.close(self._home)


TRACEFS = "/sys/kernel/tracing"
_TRACEFS_MAGIC = 0x74726163


def ensure_tracefs(path: str = TRACEFS) -> str:
    """Mount tracefs at PATH unless it is there already (classic tracepoints need it)."""
    if _fs_magic(path) == _TRACEFS_MAGIC:
        return path
    try:
        _mount("tracefs", path, "tracefs")
    except KernelError as e:
        raise KernelError(f"no tracefs at {path} and mounting one failed: {os.strerror(e.errno)}",
                          e.errno) from None
    return path


def drop_reason_names() -> dict[int, str]:
    """enum skb_drop_reason value -> name (SOCKET_RCVBUFF, ...), as the running kernel numbers
    them: from the skb:kfree_skb event's print format in tracefs; {} where that is unreadable."""
    try:
        root = ensure_tracefs()
        with open(os.path.join(root, "events/skb/kfree_skb/format")) as f:
            text = f.read()
    except (KernelError, OSError):
        return {}
    return {int(n): name for n, name in re.findall(r'\{ (\d+), "(\w+)" \}', text)}


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_PR_SET_NO_NEW_PRIVS = 38
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}


_PR_SET_KEEPCAPS = 8


def bpf_syscall_needs_capability() -> bool:
    """Whether this kernel refuses every bpf() command, reading an open map included, to a process
    without CAP_BPF: before Linux 6.5 the syscall checked unprivileged_bpf_disabled at its entry
    (Debian and most distributions set it), since then only loading programs and making maps."""
    try:
        with open("/proc/sys/kernel/unprivileged_bpf_disabled") as f:
            disabled = int(f.read().strip() or 0)
    except (OSError, ValueError):
        disabled = 1
    major, minor = (int(x) for x in re.match(r"(\d+)\.(\d+)", os.uname().release).groups())
    return disabled != 0 and (major, minor) < (6, 5)


def drop_privileges(user: tuple[int, int] | None = None, keep: tuple[int, ...] = ()) -> None:
    """Give up every capability but KEEP (bit numbers), for good, in every thread of this process,
    and become USER (uid, gid) with no supplementary groups where one is given. What is already
    loaded and open keeps working: map and link fds are checked when opened, not when used.

    Call it before any thread starts: capset() changes the calling thread alone (setresuid() is
    applied to all of them by the C library). no_new_privs is set too."""
    if user is not None:
        uid, gid = user
        if keep and _libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise KernelError(f"prctl(PR_SET_KEEPCAPS): {os.strerror(err)}", err)
        try:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        except OSError as e:
            raise KernelError(f"switching to uid {uid}, gid {gid}: {e.strerror}", e.errno) from None
        # what the process ended with, not what was asked: an id the calls take for "unchanged"
        # ((uid_t)-1) or a call that a seccomp filter turns into a no-op would leave root
        ended = (os.getresuid(), os.getresgid(), os.getgroups())
        if ended != ((uid,) * 3, (gid,) * 3, []):
            raise KernelError(f"switching to uid {uid}, gid {gid}: the process has uids "
                              f"{ended[0]}, gids {ended[1]}, groups {ended[2]}", errno.EPERM)
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise KernelError(f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}", err)
    hdr = _CapHeader(version=_LINUX_CAPABILITY_VERSION_3, pid=0)
    data = (_CapData * 2)()
    for cap in keep:
        data[cap // 32].effective |= 1 << (cap % 32)
        data[cap // 32].permitted |= 1 << (cap % 32)
    nr = _SYS_CAPSET.get(platform.machine())
    rc = _libc.syscall(ctypes.c_long(nr), ctypes.byref(hdr), ctypes.byref(data)) if nr else -1
    if rc != 0:
        err = ctypes.get_errno()
        raise KernelError(f"capset: {os.strerror(err)}", err)
