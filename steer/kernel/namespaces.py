"""Network namespaces: entering one (a thread, for good or there and back), finding them all, and
another namespace's sysfs, mounted by a thread of its own."""
from __future__ import annotations

import ctypes
import json
import os
import tempfile
import threading

from steer.kernel.errors import KernelError
from steer.kernel.libc import MNT_DETACH, MS_PRIVATE, MS_REC, libc, mount, syscall

CLONE_NEWNET = 0x40000000


def setns(fd: int, nstype: int = CLONE_NEWNET) -> None:
    """Move the calling thread into a namespace (os.setns arrived only in Python 3.12)."""
    rc = syscall("setns", ctypes.c_int(fd), ctypes.c_int(nstype))
    if rc < 0:
        err = ctypes.get_errno()
        raise KernelError(f"setns: {os.strerror(err)}", err)


def enter_netns(path: str) -> None:
    """The calling thread into the network namespace at PATH for good: in a child before exec,
    or in a thread that ends after its work (netns_of goes there and back)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise KernelError(f"network namespace {path}: {e.strerror}", e.errno) from None
    try:
        setns(fd, CLONE_NEWNET)
    finally:
        os.close(fd)


CLONE_NEWNS = 0x00020000


def call_with_netns_sysfs(ns_path: str | None, fn, *args):
    """fn(sysfs_root, *ARGS) where sysfs_root shows the devices of the network namespace at
    NS_PATH (None: this one, /sys). sysfs shows the namespace of whoever mounts it, so another
    namespace's sysfs is mounted by a thread of our own, in that namespace and in a mount
    namespace of its own, both of which end with it. A thread, not a forked child: a child
    holds a copy of every open file, the tracer's BPF links among them, until it exits, so a
    program the windows take off meanwhile stays attached (Linux 6.10 on: it runs twice once
    attached again; before: attaching it again fails with EEXIST). FN's result comes back as
    JSON carries it (string keys), and its exception as a KernelError."""
    if not ns_path:
        return fn("/sys", *args)
    reply: dict = {}

    def in_the_namespace():
        try:
            enter_netns(ns_path)
            # CLONE_NEWNS takes CLONE_FS with it: this thread's own root, cwd and mounts
            if libc.unshare(CLONE_NEWNS) != 0:
                raise KernelError(f"unshare: {os.strerror(ctypes.get_errno())}")
            mount("none", "/", None, MS_REC | MS_PRIVATE)   # nothing leaks to the host
            mnt = tempfile.mkdtemp(prefix="steer-sysfs-")
            try:
                mount("sysfs", mnt, "sysfs")
                try:
                    reply["ok"] = json.loads(json.dumps(fn(mnt, *args)))
                finally:
                    libc.umount2(mnt.encode(), MNT_DETACH)
            finally:
                os.rmdir(mnt)
        except BaseException as e:   # noqa: BLE001 - reported to the caller as one line
            reply["error"] = str(e) or type(e).__name__

    # a daemon: a caller stopped by a signal does not wait for it to end
    t = threading.Thread(target=in_the_namespace, name="steer-netns-sysfs", daemon=True)
    t.start()
    t.join()
    if "error" in reply:
        raise KernelError(reply["error"])
    return reply["ok"]


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
