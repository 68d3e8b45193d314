"""The C library: the syscalls Python's os module lacks, by number per architecture (one table),
mount() and statfs()."""
from __future__ import annotations

import ctypes
import os
import platform

from steer.kernel.errors import KernelError

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                       ctypes.c_void_p]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]

SYSCALLS = {"perf_event_open": {"x86_64": 298, "aarch64": 241},
            "setns": {"x86_64": 308, "aarch64": 268},
            "capset": {"x86_64": 126, "aarch64": 91}}


def syscall(name: str, *args) -> int:
    """libc's syscall() of NAME with ARGS (ctypes values); KernelError on an architecture whose
    number steer does not know."""
    nr = SYSCALLS[name].get(platform.machine())
    if nr is None:
        raise KernelError(f"{name}: unknown syscall number on {platform.machine()}")
    return libc.syscall(ctypes.c_long(nr), *args)


MS_REC, MS_PRIVATE = 0x4000, 0x40000
MNT_DETACH = 2


def mount(source: str, target: str, fstype: str | None, flags: int = 0,
          data: str | None = None) -> None:
    if libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None,
                  flags, data.encode() if data else None) != 0:
        err = ctypes.get_errno()
        raise KernelError(f"mount {fstype or source} on {target}: {os.strerror(err)}", err)


def fs_magic(path: str) -> int | None:
    """The magic number of the filesystem PATH is on (statfs's f_type); None where unreadable."""
    class _Statfs(ctypes.Structure):
        _fields_ = [("f_type", ctypes.c_long), ("rest", ctypes.c_byte * 112)]
    st = _Statfs()
    if libc.statfs(path.encode(), ctypes.byref(st)) != 0:
        return None
    return st.f_type & 0xFFFFFFFF
