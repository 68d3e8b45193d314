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
def made_cgroup(rel: str):
    """The cgroup REL ("kubepods/pod<uid>/<id>") under /steer-test-PID, made with its parents:
    yields its path in the hierarchy and its directory; removes them all after."""
    top = os.path.join(cgroup2_mount(), f"steer-test-{os.getpid()}")
    path = os.path.join(top, rel)
    os.makedirs(path)
    try:
        yield "/" + os.path.relpath(path, cgroup2_mount()), path
    finally:
        d = path
        while len(d) >= len(top):
            _rmdir_when_empty(d)
            d = os.path.dirname(d)


def move(path: str, pid: int) -> None:
    """Put process PID into the cgroup whose directory is PATH."""
    with open(os.path.join(path, "cgroup.procs"), "w") as f:
        f.write(str(pid))
