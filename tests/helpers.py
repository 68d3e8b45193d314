"""Shared by the test modules: running the real `steer` command, and the skip conditions of the
live tier (each skip says why)."""
import functools
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEER = [sys.executable, "-m", "steer"]

# the CPUs the tests may place lab processes on: a CI runner's taskset or cgroup cpuset can allow
# fewer than are online, and not CPU 0 (one did: only CPU 1 of 0-1)
CPUS = sorted(os.sched_getaffinity(0))
CPU_A = CPUS[0]
CPU_B = CPUS[1] if len(CPUS) > 1 else CPUS[0]   # tests that need it distinct skip with two_cpus
two_cpus = pytest.mark.skipif(len(CPUS) < 2, reason="needs two usable CPUs")


# sampled timing is tested at the rate `steer flows --sample-hz` offers for precise windows; at the
# always-on default (99 Hz) the same bounds hold for flows with 10x the CPU time
SAMPLE_HZ = 1000


def sampling_bound(seconds: float, hz: int = SAMPLE_HZ) -> float:
    """The relative error sampled timing is held to against exact, for a flow that took SECONDS of
    CPU: 10%, plus three standard deviations of a count of seconds*hz samples (1/sqrt(n) each)."""
    return 0.10 + 3 / (seconds * hz) ** 0.5


def steer(*args, env=None, timeout=120, prefix=()):
    e = dict(os.environ, PYTHONPATH=ROOT)
    e.update(env or {})
    return subprocess.run([*prefix, *STEER, *args], capture_output=True, text=True, env=e,
                          timeout=timeout, cwd=ROOT)


def assert_one_line_error(r, *fragments, code=1):
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


@functools.lru_cache(maxsize=None)
def live_skip_reason():
    if os.geteuid() != 0:
        return "live tier needs root (BPF programs, namespaces)"
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        return "kernel has no BTF"
    for tool in ("iperf3", "bpftool"):
        if not shutil.which(tool):
            return f"{tool} not installed (make setup installs it)"
    if not os.path.exists(os.path.join(ROOT, "build", "flowtrace.bpf.o")):
        return "BPF object not built (make)"
    return None


# the live tier: `pytest -m "not live"` leaves it out; conftest skips it, saying why, where it
# cannot run (live_skip_reason)
live = pytest.mark.live
