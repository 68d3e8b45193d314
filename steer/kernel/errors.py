"""What the kernel and libbpf said when an operation failed: KernelError, one line a user can
act on, naming the BPF program or map that libbpf's log blames."""
from __future__ import annotations

import ctypes
import errno
import os
import re
from collections import deque

# libbpf's latest lines (its print callback, steer.kernel.libbpf, appends them): an error quotes
# the most telling one
libbpf_log: deque[str] = deque(maxlen=200)


class KernelError(Exception):
    """A kernel or libbpf operation failed; str() is one line a user can act on. `program`: the
    BPF program it failed on, where libbpf's log or the operation names one."""

    def __init__(self, message: str, err: int = 0, program: str | None = None,
                 map_name: str | None = None):
        super().__init__(message)
        self.errno = err
        self.program = program
        self.map = map_name
        self.uses_map = failed_map(UNCREATED_MAP) if program else None   # one not created



def _last_libbpf_error() -> str:
    """The most telling libbpf log line: verifier and relocation failures come before the summary."""
    for line in reversed(libbpf_log):
        if "libbpf:" in line and ("failed" in line or "error" in line.lower()):
            return line.replace("libbpf: ", "")
    return ""


ENOTSUPP = 524     # kernel-internal, leaks to userspace (no BPF trampoline, for one); not in errno


# libbpf names the program a load failed on ("prog 'ft_x': BPF program load failed: ...", "prog
# 'ft_x': failed to find kernel BTF type ID of ...") before it sums up for the whole object
FAILED_PROGRAM = re.compile(r"prog '([^']+)': .*fail")
# and the map whose creation failed ("map 'readers': failed to create: ..."): a map type the kernel
# lacks (task storage came in 5.11), before any program is loaded
FAILED_MAP = re.compile(r"map '([^']+)': failed to create")


def failed_program() -> str | None:
    """The program libbpf's latest failure line names, if any."""
    for line in reversed(libbpf_log):
        m = FAILED_PROGRAM.search(line)
        if m:
            return m.group(1)
    return None


# a program that uses a map not created: libbpf puts a marker in the instruction, which the
# verifier names
UNCREATED_MAP = re.compile(r"BPF map '([^']+)' is referenced but wasn't created")


def failed_map(pattern: re.Pattern = FAILED_MAP) -> str | None:
    for line in reversed(libbpf_log):
        m = pattern.search(line)
        if m:
            return m.group(1)
    return None


def fail(what: str, err: int, program: str | None = None,
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
