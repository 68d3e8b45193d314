"""The run clock's live steal (bpf/run_clock.bpf.h): the clock every exact-mode interval and the
NET_RX truth brackets read is the CPU's clock less its steal, and where the kernel is a KVM guest
the steal is read live from the host's per-CPU steal_time, reached from the run queue by the
offsets in the kernel's BTF (steer.kernel.btf.kvm_steal_offset). A wrong offset reads some other
per-CPU variable, which the clock would then drop silently for the run queue's lagging count: so
the live figure is held here to the kernel's own account of each CPU's steal, /proc/stat."""
import os
import struct
import time

import pytest

from helpers import beside_guest, live
from steer.kernel.btf import kvm_steal_offset
from bench.peer import truth_object

pytestmark = [live, beside_guest]

USER_HZ = os.sysconf("SC_CLK_TCK")


def _stat_steal_ns() -> dict[int, int]:
    """each CPU's steal since boot by /proc/stat, in ns (kept in 1/USER_HZ s: truncated)"""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            fields = line.split()
            if fields[0].startswith("cpu") and fields[0] != "cpu":
                out[int(fields[0][3:])] = int(fields[8]) * 10**9 // USER_HZ
    return out


def test_the_live_steal_is_each_cpus_steal_by_proc_stat():
    """A sched_switch program of bpf/truth.bpf.c records, on each CPU, the live steal as the run
    clock reads it and the run queue's count (prev_steal_time_rq). /proc/stat's steal column,
    read before it is attached and 50 ms after it is taken off (a tick or more on each CPU, so
    that /proc/stat has caught up with the last switch it saw), brackets the live figure:
    before - 1/USER_HZ <= live <= after + 1/USER_HZ (the column is truncated to 1/USER_HZ), and
    the run queue's count is never ahead of it. Exact, no chance: a wrong offset or a cast that
    reads another variable fails it (unless that variable happens to hold this CPU's steal to
    10 ms); where the guest shares no steal clock, the live figure is 0 and only that is held."""
    off = kvm_steal_offset()
    obj = truth_object({"truth_steal_read"})
    try:
        before = _stat_steal_ns()
        obj.attach("truth_steal_read")
        time.sleep(0.3)
        obj.detach("truth_steal_read")
        time.sleep(0.05)
        after = _stat_steal_ns()
        seen = [struct.unpack_from("2Q", v) for v in
                obj.map("truth_steals").lookup(struct.pack("I", 0))]
    finally:
        obj.close()
    tick = 10**9 // USER_HZ
    checked = 0
    for cpu, (live_ns, counted) in enumerate(seen):
        if cpu not in before or (live_ns, counted) == (0, 0):
            continue   # offline, or no switch on it while attached
        checked += 1
        if not off:
            assert live_ns == 0
            continue
        assert counted <= live_ns, (cpu, counted, live_ns)
        assert before[cpu] - tick <= live_ns <= after[cpu] + tick, \
            (cpu, before[cpu], live_ns, after[cpu])
    assert checked, seen
    if not off:
        pytest.skip("no KVM steal clock in this kernel's BTF: the run queue's count alone")
