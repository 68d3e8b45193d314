"""A reader's cgroup, from the v2 id the tracer records to the path people name it by.

A cgroup v2 id is the inode number of the cgroup's directory in the cgroup2 filesystem. The
hierarchy is found where it is mounted: /sys/fs/cgroup on a pure v2 host, a cgroup2 mount beside
the v1 controllers on a hybrid one (systemd puts it at /sys/fs/cgroup/unified). Directories are
walked once and again only when an id is not found, at most once a second and at most a tenth
of the time (a walk of 100,000 directories takes seconds, and any user with a delegated subtree
can make cgroups by the thousand): containers come and go, and a host has a few thousand cgroups
at most. What a walk found is kept after the cgroup is gone (up to MAX_CGROUPS ids), so that a
container that ended within a command's window is still named: `steer flows` walks once when it
starts. The exporter (background=True) walks in the scrape while walks are quick (under
SYNC_WALK, as on most hosts) and in a thread of its own once one was not: a scrape is then never
held by a walk, and an id the walk finds is named from the next scrape on.
"""
from __future__ import annotations

import os
import threading
import time

MOUNTINFO = "/proc/self/mountinfo"
RESCAN_INTERVAL = 1.0   # seconds: the least time between two walks for ids not found
MAX_CGROUPS = 100_000   # a walk stops there: the map stays bounded whatever the host holds
WALK_SHARE = 0.1        # the most of the time walks may take: the next waits 10x the last one
SYNC_WALK = 0.05        # seconds: a walk shorter than this one may run inside a scrape


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

    def __init__(self, root: str | None = None, clock=time.monotonic, background: bool = False):
        self.root = root if root is not None else cgroup2_mount()
        self._clock, self.background = clock, background
        self._paths: dict[int, str] = {}
        self._next_walk: float | None = None   # None: never walked
        self._took = 0.0                       # the last walk's seconds
        self.walking: threading.Thread | None = None

    def _walk(self) -> None:
        start = self._clock()
        try:
            self._walk_once()
        finally:
            self._took = self._clock() - start
            self._next_walk = start + max(RESCAN_INTERVAL, self._took / WALK_SHARE)

    def _walk_once(self) -> None:
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
        self._paths = paths

    def prime(self) -> None:
        """Walk now: the cgroups that exist now stay named after they are removed."""
        if self.root:
            self._walk()

    def __call__(self, cgroup_id: int | None) -> str | None:
        if not cgroup_id or not self.root:
            return None
        path = self._paths.get(cgroup_id)
        if path is None and (self._next_walk is None or self._clock() >= self._next_walk):
            if not self.background or self._took < SYNC_WALK:
                self._walk()
                return self._paths.get(cgroup_id)
            if self.walking is None or not self.walking.is_alive():
                self._next_walk = float("inf")   # until this walk ends and sets it
                self.walking = threading.Thread(target=self._walk, daemon=True,
                                                name="steer-cgroup-walk")
                self.walking.start()
        return path
