"""This process's own settings: its C heap, its children's death with it, the CPUs it may run on."""
from __future__ import annotations

import os
import platform

from steer.kernel.libc import libc
from steer.model.topology import format_cpulist, online_cpus

# The exporter folds a map of new connections into a few MB of temporary arrays at every scrape,
# in whichever of its server's threads took the request. Numpy's arrays over 128 KB are mmap()ed
# at first; once one is freed, glibc raises its mmap threshold to that size and serves the next
# from a heap, whose freed pages stay with the process, and each thread gets a heap (arena) of
# its own. A map of 16,384 new entries at every scrape, the 2-vCPU VM, 2026-11-26: the process
# kept 70-79 MB with a trim after each scrape, 57-61 MB with one arena as well, 87 MB in one
# thread without a trim, 53 with it.
_M_ARENA_MAX = -8   # mallopt()'s parameter number (glibc malloc.h)


def one_heap() -> None:
    """Every thread started from now on allocates from the main thread's heap (glibc's
    M_ARENA_MAX 1), which trim_heap() then keeps small; nothing on another C library. For a
    process whose threads take turns (the exporter's scrapes hold one lock)."""
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is not None and "glibc" in " ".join(platform.libc_ver()):
        mallopt(_M_ARENA_MAX, 1)


def trim_heap() -> None:
    """Give the C heap's free pages back to the kernel: glibc's malloc_trim(0), nothing on a C
    library without it."""
    trim = getattr(libc, "malloc_trim", None)
    if trim is not None:
        trim(0)


PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int, sig: int = 9) -> None:
    """In a child between fork and exec: the kernel sends SIG when the parent (pid PARENT, read
    before the fork) dies, so that a parent killed with SIGKILL leaves no child behind it. A parent
    that died before the prctl sends nothing: then the child is already an orphan, and goes."""
    libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def widen_to_online_cpus() -> str | None:
    """Let this process run on every online CPU its cpuset allows (the kernel intersects the
    mask with the cpuset). An affinity inherited from a narrow parent (a CI machine's init had
    CPU 1 only, of 0-1) would otherwise put both ends of a benchmark, or every test that needs
    two CPUs, on one CPU. Returns a line saying what changed, or None."""
    before = sorted(os.sched_getaffinity(0))
    try:
        os.sched_setaffinity(0, online_cpus())
    except OSError:
        return None
    after = sorted(os.sched_getaffinity(0))
    if after == before:
        return None
    return f"CPUs: affinity widened from {format_cpulist(before)} to {format_cpulist(after)}"
