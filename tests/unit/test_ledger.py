"""The exporter's arrays (steer.model.ledger) against the objects `steer flows`, `top` and `auto`
use (build_snapshot, PlacementMemory): over random reads in which entries grow, move CPUs,
restart from zero, go and come back, with UDP reads on a wildcard socket, IPv6 and several
CPUs of two sockets, every flow of every interval has the same counts, CPUs and class, and
every flow's totals are what recounting every entry gives."""
import random

import pytest

from sysfs import xeon_2s_smt
from steer.model.flowarrays import FlowArrays, flow_id
from steer.model.flows import NS, build_snapshot
from steer.model.placement import PlacementMemory
from steer.model.totals import FlowTotal
from steer.model.ledger import AT, TOTALS, FlowLedger
from steer.model.capabilities import MISSING, WORKS, Capabilities, Figure
from steer.model.samples import CpuSample, FlowCpuSample, FlowId, TraceSample
from steer.model.topology import read_topology

CAPS = Capabilities(*[Figure(WORKS, "")] * 3, Figure(MISSING, "no PMU"),
                    timing=Figure(WORKS, "sampled: 99 Hz"), mode="sampled")
FLOWS = [FlowId("tcp", "198.18.0.1", 40000 + i, "198.18.0.2", 5201) for i in range(5)] + [
    FlowId("udp", "198.18.0.1", 41000, "198.18.0.2", 9000),
    FlowId("udp", "0.0.0.0", 0, "198.18.0.2", 9000),           # its reader's unconnected socket
    FlowId("udp", "0.0.0.0", 0, "198.18.0.2", 9001),           # a wildcard with no peer
    FlowId("tcp", "fd00::1", 40000, "fd00::2", 5201)]
CPUS = [0, 1, 12, 13, 24]
S = 10**9   # socket 0 (12 and 0 SMT siblings), socket 1


@pytest.fixture(scope="module")
def topo(tmp_path_factory):
    return read_topology(xeon_2s_smt(str(tmp_path_factory.mktemp("xeon"))))


def _grow(rng, old: FlowCpuSample | None, flow: FlowId, cpu: int, t: int) -> FlowCpuSample:
    """The entry one read later: more of some counters, or (RESTART) counting from zero."""
    base = old if old is not None and rng.random() > 0.1 else FlowCpuSample(flow, cpu)
    add = lambda name, top: getattr(base, name) + (rng.randint(0, top) if rng.random() < 0.6 else 0)  # noqa: E731
    wild = flow.sport == 0
    return FlowCpuSample(
        flow, cpu, rx_bytes=0 if wild else add("rx_bytes", 10**6),
        rx_skbs=0 if wild else add("rx_skbs", 50), kernel_ns=0 if wild else add("kernel_ns", 10**6),
        kthread_ns=add("kthread_ns", 10**5) if rng.random() < 0.2 and not wild else base.kthread_ns,
        app_bytes=add("app_bytes", 10**6), app_calls=add("app_calls", 30),
        app_ns=add("app_ns", 10**6), rx_drops=add("rx_drops", 2) if not wild else 0,
        kernel_samples=add("kernel_samples", 3), app_samples=add("app_samples", 3),
        app_pid=rng.choice([0, 100 + cpu]), app_comm=f"r{cpu}", last_seen_ns=t)


def _reads(seed: int, n: int = 120):
    rng = random.Random(seed)
    live: dict = {}
    for step in range(n):
        for _ in range(rng.randint(0, 6)):
            key = (rng.choice(FLOWS), rng.choice(CPUS))
            if key in live and rng.random() < 0.15:
                del live[key]   # evicted, or expired
            else:
                live[key] = _grow(rng, live.get(key), *key, step)
        t = step * S // 2 + rng.randint(0, S // 4)
        # seq 0: the snapshot compares every entry (the ledger always does)
        yield TraceSample(t, dict(live), (CpuSample(0),), len(live), 1024)


@pytest.mark.parametrize("seed", range(6))
def test_each_interval_has_the_counts_cpus_and_class_the_snapshot_gives(topo, seed):
    memory, ledger, before = PlacementMemory(topo), FlowLedger(topo), None
    compared = differ = 0
    for now in _reads(seed):
        want = {f.flow: f for f in memory.update(build_snapshot(before, now, topo, CAPS)).flows}
        duration = (now.monotonic_ns - before.monotonic_ns) / NS if before else 0.0
        fold = ledger.fold(FlowArrays.of_entries(now.entries), duration)
        got = {flow_id(fold.flows[a]): i for i, a in enumerate(fold.active)}
        assert set(got) == set(want), now.seq
        for flow, i in got.items():
            w = want[flow]
            assert (fold.kernel_cpu[i], fold.stack_cpu[i], fold.app_cpu[i]) == (
                -1 if w.kernel_cpu is None else w.kernel_cpu,
                -1 if w.stack_cpu is None else w.stack_cpu,
                -1 if w.app_cpu is None else w.app_cpu), (now.seq, flow)
            assert ledger.placement(fold.stack_cpu[i], fold.app_cpu[i]) == w.placement
            differ += fold.stack_cpu[i] != fold.kernel_cpu[i]
            assert fold.counts[i, AT["rx_bytes"]] == w.rx_bytes
            assert fold.counts[i, AT["app_bytes"]] == w.app_bytes
            assert fold.counts[i, AT["rx_drops"]] == w.rx_drops
            assert fold.kernel_seconds[i] == pytest.approx(w.kernel_seconds, abs=1e-12)
            assert fold.app_seconds[i] == pytest.approx(w.app_seconds, abs=1e-12)
            assert fold.rate_bps()[i] == pytest.approx(w.rate_bps)
            candidates = {p.app_pid for (f, _), p in now.entries.items() if p.app_pid}
            assert (fold.reader_pid[i] == 0) == (w.app_pid is None)
            assert not fold.reader_pid[i] or fold.reader_pid[i] in candidates
            compared += 1
        before = now
    assert compared > 200   # the random reads made many flows' intervals
    assert differ > 5       # and some whose class is not of their kernel CPU


def test_the_reader_is_the_process_with_most_calls_with_its_comm_and_cgroup(topo):
    a = FLOWS[0]
    read = {(a, 0): FlowCpuSample(a, 0, rx_bytes=10, app_calls=3, app_pid=7, app_comm="nginx",
                                  app_cgroup=99),
            (a, 1): FlowCpuSample(a, 1, app_calls=9, app_ns=5, app_pid=8, app_comm="worker",
                                  app_cgroup=1234)}
    fold = FlowLedger(topo).fold(FlowArrays.of_entries(read), 0.0)
    assert (fold.reader_pid[0], fold.reader_comm[0], fold.reader_cgroup[0]) == (8, b"worker", 1234)


@pytest.mark.parametrize("seed", range(4))
def test_every_flows_totals_are_a_recount_of_its_entries_and_of_those_it_lost(topo, seed):
    """A flow's total is what its entries count plus what its entries that went away (deleted,
    or made again from zero) had counted, while it has an entry; gone with its last one."""
    ledger, prev, retired = FlowLedger(topo), {}, {}
    for now in _reads(seed, 200):
        fold = ledger.fold(FlowArrays.of_entries(now.entries), 0.5)
        got = {flow_id(f): dict(zip(TOTALS, t.tolist())) for f, t in zip(fold.flows, fold.totals)}
        for key, old in prev.items():
            new = now.entries.get(key)
            if (new is None or new.rx_bytes < old.rx_bytes or new.app_calls < old.app_calls
                    or new.app_ns < old.app_ns
                    or new.kernel_ns + new.kthread_ns < old.kernel_ns + old.kthread_ns):
                retired.setdefault(key[0], FlowTotal()).add(old)
        want: dict = {}
        for (flow, _), e in now.entries.items():
            want.setdefault(flow, FlowTotal()).add(e)
        retired = {f: r for f, r in retired.items() if f in want}
        for f, r in retired.items():
            want[f].absorb(r)
        assert got == {f: {k: getattr(t, k) for k in TOTALS} for f, t in want.items()}, now.seq
        gone = {flow_id(f) for f in fold.gone}
        assert gone == {f for f, _ in prev} - set(want)
        prev = now.entries


def test_a_map_of_new_connections_folds_into_rows_not_objects(topo):
    """Connection churn: every read a map of new flows. What the ledger keeps is its arrays:
    a few hundred bytes an entry, whatever the number of reads."""
    import tracemalloc
    ledger = FlowLedger(topo)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for r in range(4):
        read = {}
        for i in range(2000):
            f = FlowId("tcp", f"198.19.{(r * 2000 + i) >> 8 & 255}.{i & 255}", 1024 + r * 2000 + i,
                       "198.18.0.2", 80)
            read[f, i % 2] = FlowCpuSample(f, i % 2, rx_bytes=100, rx_skbs=1, kernel_ns=1000,
                                           app_calls=1, app_ns=500, app_pid=9, app_comm="nginx")
        arrays = FlowArrays.of_entries(read)
        del read
        fold = ledger.fold(arrays, 1.0)
        assert len(fold.active) == 2000 and len(fold.gone) == (2000 if r else 0)
        del fold, arrays
        kept = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert kept < 2000 * 600, kept
