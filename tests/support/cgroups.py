"""Cgroups a test makes in the host's cgroup2 hierarchy, named as a runtime would name them, under
a parent of the test process's own, and removed after."""
import os
import time
from contextlib import contextmanager

from steer.trace.cgroups import cgroup2_mount


def _rmdir_when_empty(path: str) -> None:
    for _ in range(50):
        try:
            os.rmdir(path)
            return
        except OSError:
            time.sleep(0.1)   # the last process is still leaving


@contextmanager
def made_cgroups(rels: list[str]):
    """The cgroups RELS ("kubepods/pod<uid>/<id>", ...) under /steer-test-PID, made with their
    parents: yields each one's path in the hierarchy and its directory; removes them all after,
    the deepest first (a parent goes once every child has)."""
    top = os.path.join(cgroup2_mount(), f"steer-test-{os.getpid()}")
    paths = [os.path.join(top, rel) for rel in rels]
    made = set()
    try:
        for path in paths:
            os.makedirs(path)
            d = path
            while len(d) >= len(top):
                made.add(d)
                d = os.path.dirname(d)
        yield [("/" + os.path.relpath(p, cgroup2_mount()), p) for p in paths]
    finally:
        for d in sorted(made, key=lambda d: d.count("/"), reverse=True):
            _rmdir_when_empty(d)


@contextmanager
def made_cgroup(rel: str):
    """The cgroup REL under /steer-test-PID, made with its parents (made_cgroups)."""
    with made_cgroups([rel]) as (one,):
        yield one


def move(path: str, pid: int) -> None:
    """Put process PID into the cgroup whose directory is PATH."""
    with open(os.path.join(path, "cgroup.procs"), "w") as f:
        f.write(str(pid))
