"""The kernel filesystems steer needs, mounted where missing: bpffs (the pins) and tracefs
(classic tracepoints and their formats)."""
from __future__ import annotations

import os
import re

from steer.kernel.errors import KernelError
from steer.kernel.libc import fs_magic, mount

BPFFS = "/sys/fs/bpf"
BPF_FS_MAGIC = 0xCAFE4A11


def ensure_bpffs(path: str = BPFFS) -> str:
    """Mount bpffs at PATH unless it is there already; the pins of steer live below it."""
    if fs_magic(path) == BPF_FS_MAGIC:
        return path
    os.makedirs(path, exist_ok=True)
    try:
        # 0700: without mode= the kernel makes bpffs 1777, where anyone could make steer's pin
        # directory first
        mount("bpf", path, "bpf", data="mode=0700")
    except KernelError as e:
        raise KernelError(f"no bpffs at {path} and mounting one failed: {os.strerror(e.errno)}",
                          e.errno) from None
    return path


TRACEFS = "/sys/kernel/tracing"
TRACEFS_MAGIC = 0x74726163


def ensure_tracefs(path: str = TRACEFS) -> str:
    """Mount tracefs at PATH unless it is there already (classic tracepoints need it)."""
    if fs_magic(path) == TRACEFS_MAGIC:
        return path
    try:
        mount("tracefs", path, "tracefs")
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
