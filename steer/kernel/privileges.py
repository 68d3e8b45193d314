"""Which Linux capabilities this process holds, the one-line refusal when it lacks one, and giving
them up (with uid 0) for good."""
from __future__ import annotations

import ctypes
import errno
import os
import re

from steer.kernel.errors import KernelError
from steer.kernel.libc import libc, syscall


class PrivilegeError(Exception):
    """A capability is missing; str() is the one line to show."""


# capability bits (include/uapi/linux/capability.h)
CAP_SETGID, CAP_SETUID, CAP_NET_ADMIN, CAP_SYS_PTRACE, CAP_SYS_ADMIN = 6, 7, 12, 19, 21
CAP_PERFMON, CAP_BPF = 38, 39
CAP_NAMES = {CAP_NET_ADMIN: "CAP_NET_ADMIN", CAP_SYS_ADMIN: "CAP_SYS_ADMIN",
             CAP_PERFMON: "CAP_PERFMON", CAP_BPF: "CAP_BPF", CAP_SETUID: "CAP_SETUID",
             CAP_SETGID: "CAP_SETGID"}


def effective_caps(status: str = "/proc/self/status") -> int:
    with open(status) as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def seccomp_filtered(status: str = "/proc/self/status") -> bool:
    """Whether a seccomp filter sits on this process (a container runtime's default profile)."""
    try:
        with open(status) as f:
            for line in f:
                if line.startswith("Seccomp:"):
                    return line.split()[1] == "2"
    except OSError:
        pass
    return False


# why bpf() can fail with EPERM for a process that holds CAP_BPF
SECCOMP_BPF = ("a seccomp filter is on this process, and a container runtime's default profile "
               "admits bpf() and perf_event_open() to CAP_SYS_ADMIN alone (podman's and "
               "CRI-O's; containerd's admits CAP_BPF and CAP_PERFMON): see docs/guide/fleet.md")


def missing_caps(needed: list[int], caps: int | None = None) -> list[str]:
    """Capabilities among NEEDED that this process lacks; CAP_SYS_ADMIN stands in for BPF and
    PERFMON, as on kernels before 5.8."""
    caps = effective_caps() if caps is None else caps
    has = lambda c: bool(caps >> c & 1)  # noqa: E731
    if has(CAP_SYS_ADMIN):
        needed = [c for c in needed if c not in (CAP_BPF, CAP_PERFMON)]
    return [CAP_NAMES[c] for c in needed if not has(c)]


def require_caps(needed: list[int], what: str) -> None:
    missing = missing_caps(needed)
    if missing:
        raise PrivilegeError(f"{what} needs {' and '.join(missing)}: run as root "
                          f"(or grant {', '.join(missing)})")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_PR_SET_NO_NEW_PRIVS = 38


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
        if keep and libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0:
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
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise KernelError(f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}", err)
    hdr = _CapHeader(version=_LINUX_CAPABILITY_VERSION_3, pid=0)
    data = (_CapData * 2)()
    for cap in keep:
        data[cap // 32].effective |= 1 << (cap % 32)
        data[cap // 32].permitted |= 1 << (cap % 32)
    rc = syscall("capset", ctypes.byref(hdr), ctypes.byref(data))
    if rc != 0:
        err = ctypes.get_errno()
        raise KernelError(f"capset: {os.strerror(err)}", err)
