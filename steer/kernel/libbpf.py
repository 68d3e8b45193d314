"""libbpf itself: the system libbpf.so.1 through ctypes, loaded once, its functions declared, its
log kept for the errors (steer.kernel.errors). libbpf >= 1.0 is assumed: functions return NULL
or a negative errno and set errno, and nothing here needs libbpf_get_error()."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading

from steer.kernel.errors import KernelError, libbpf_log
from steer.kernel.libc import libc
from steer.kernel.signals import called_from_c, hold, raise_held

_lib = None
_lib_lock = threading.Lock()

# int (*)(enum libbpf_print_level, const char *fmt, va_list ap); va_list is passed as a pointer
_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
LIBBPF_DEBUG = 2   # enum libbpf_print_level: LIBBPF_WARN, LIBBPF_INFO, LIBBPF_DEBUG
RING_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
libc.vsnprintf.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p]


class _BtfType(ctypes.Structure):
    """struct btf_type (uapi/linux/btf.h): for a FUNC, `type` is its FUNC_PROTO; vlen is info's
    low 16 bits."""
    _fields_ = [("name_off", ctypes.c_uint32), ("info", ctypes.c_uint32),
                ("type", ctypes.c_uint32)]


@_PRINT_FN
@called_from_c
def _libbpf_print(level, fmt, args):
    try:
        debug = os.environ.get("STEER_LIBBPF_DEBUG")
        if level >= LIBBPF_DEBUG and not debug:
            return 0   # ~4,800 lines a load, none that an error quotes: a tenth of each start
        # a verifier log comes whole in one line, and says why at its end: its tail is kept
        whole = debug or b"LOAD LOG" in fmt
        buf = ctypes.create_string_buffer(1 << 20 if whole else 1024)
        libc.vsnprintf(buf, len(buf), fmt, args)
        line = buf.value.decode(errors="replace").rstrip()
        if len(line) > 4096 and not debug:
            line = line[:200] + " ... " + line[-3000:]
        if line:
            libbpf_log.append(line)
        if debug:
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


def libbpf():
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
            ("bpf_btf_get_next_id", i, [u32, ctypes.POINTER(u32)]),
            ("btf__find_by_name_kind", ctypes.c_int32, [vp, cp, u32]),
            ("btf__free", None, [vp]),
            ("btf__type_by_id", ctypes.POINTER(_BtfType), [vp, u32]),
            ("btf__name_by_offset", cp, [vp, u32]),
            ("bpf_map__set_pin_path", i, [vp, cp]),
            ("bpf_map__reuse_fd", i, [vp, i]),
            ("bpf_obj_get", i, [cp]),
            ("bpf_obj_get_opts", i, [cp, vp]),   # opts: _ObjGetOpts
            ("bpf_obj_pin", i, [i, cp]),
            ("bpf_obj_get_info_by_fd", i, [i, vp, ctypes.POINTER(u32)]),
            ("bpf_link_create", i, [i, i, ctypes.c_int, vp]),
            ("bpf_prog_test_run_opts", i, [i, vp]),
            ("bpf_prog_load", i, [i, cp, cp, vp, sz, vp]),   # opts: probes._ProgLoadOpts
            ("ring_buffer__new", vp, [i, RING_FN, vp, vp]),
            ("ring_buffer__consume", i, [vp]),
            ("ring_buffer__epoll_fd", i, [vp]),
            ("ring_buffer__free", None, [vp]),
        ]:
            f = getattr(lib, fn)
            f.restype, f.argtypes = res, args
        lib.libbpf_set_print(_libbpf_print)
        _lib = _Libbpf(lib)
        return _lib
