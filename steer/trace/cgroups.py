"""A reader's cgroup, from the v2 id the tracer records to the path people name it by.

A cgroup v2 id is the inode number of the cgroup's directory in the cgroup2 filesystem. The
hierarchy is found where it is mounted: /sys/fs/cgroup on a pure v2 host, a cgroup2 mount beside
the v1 controllers on a hybrid one (systemd puts it at /sys/fs/cgroup/unified). Directories are
walked once and again only when an id is not found, at most once a second: containers come and
go, and a host has a few thousand cgroups at most. What a walk found is kept after the cgroup is
gone (up to MAX_CGROUPS ids), so that a container that ended within a command's window is
still named: `steer flows` walks once when it starts.
"""
from __future__ import annotations

import os
import time

MOUNTINFO = "/proc/self/mountinfo"
RESCAN_INTERVAL = 1.0   # seconds: the least time between two walks for ids not found
MAX_CGROUPS = 100_000   # a walk stops there: the map stays bounded whatever the host holds


def cgroup2_mount(mountinfo: str = MOUNTINFO) -> str | None:
    """Where the cgroup2 hierarchy is mounted (the first such mount), None without one."""
    try:
        with open(mountinfo) as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split(" ", 1)[0] == "cgroup2":
                    return left.split()[4].replace("\\040", " ")
    except OSError:
        pass
    return None


def as_text(name: str) -> str:
    """A file name as text: bytes that are not UTF-8 (any user with a delegated cgroup subtree
    can make `\\xff.scope`) written as \\xNN, so that no lone surrogate reaches a label value
    or a terminal, which would refuse to encode it. The path is for people: nothing opens it."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


class CgroupResolver:
    """cgroup v2 id -> its path under the hierarchy's root ("/" for the root itself), None for an
    id that is not (or no longer) there."""

    def __init__(self, root: str | None = None, clock=time.monotonic):
        self.root = root if root is not None else cgroup2_mount()
        self._clock = clock
        self._paths: dict[int, str] = {}
        self._walked = None

    def _walk(self) -> None:
        # on top of what earlier walks found (an id of a removed cgroup stays named; one that
        # the kernel gave again takes its new path), unless that would pass the bound
        paths: dict[int, str] = dict(self._paths) if len(self._paths) < MAX_CGROUPS // 2 else {}
        for top, dirs, _ in os.walk(self.root):
            try:
                ino = os.stat(top, follow_symlinks=False).st_ino
            except OSError:
                continue   # gone during the walk
            rel = os.path.relpath(top, self.root)
            paths[ino] = "/" if rel == "." else "/" + as_text(rel)
            if len(paths) >= MAX_CGROUPS:
                break
        self._paths, self._walked = paths, self._clock()

    def prime(self) -> None:
        """Walk now: the cgroups that exist now stay named after they are removed."""
        if self.root:
            self._walk()

    def __call__(self, cgroup_id: int | None) -> str | None:
        if not cgroup_id or not self.root:
            return None
        path = self._paths.get(cgroup_id)
        if path is None and (self._walked is None
                             or self._clock() - self._walked >= RESCAN_INTERVAL):
            self._walk()
            path = self._paths.get(cgroup_id)
        return path
