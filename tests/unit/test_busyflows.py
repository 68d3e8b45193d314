"""The auto loop's snapshots (steer.model.busyflows) against Intervals': over random reads (entries
grow, restart from zero, go and come back; UDP reads on a wildcard socket with one peer, with
several and with none; IPv6; CPUs of two sockets), every flow at the floor or above, and every
flow it is told to keep, is there with the figures Intervals gives it, and no other busy flow."""
from dataclasses import replace

import pytest

from sysfs import xeon_2s_smt
from test_ledger import CAPS, _reads
from steer.model.busyflows import BusyIntervals
from steer.model.flowarrays import FlowArrays, pack_key, pack_value
from steer.model.flows import Intervals
from steer.model.samples import FlowCpuSample, FlowId, TraceSample
from steer.model.topology import read_topology


class Reads:
    """A tracer that gives READS in turn, as sample() or as sample_arrays() (its entries then
    found again by their bytes, as the real tracer unpacks them)."""
    capabilities = CAPS

    def __init__(self, reads: list[TraceSample]):
        self.reads, self.at = reads, 0
        self.known: dict[bytes, FlowCpuSample] = {}

    def sample(self) -> TraceSample:
        self.at += 1
        return self.reads[self.at - 1]

    def sample_arrays(self) -> TraceSample:
        s = self.sample()
        for (flow, cpu), e in s.entries.items():
            self.known[pack_key(flow, cpu) + bytes(pack_value(e))] = e
        return replace(s, entries={}, arrays=FlowArrays.of_entries(s.entries))

    def entries_of(self, arrays: FlowArrays) -> dict:
        found = (self.known[k.tobytes() + v.tobytes()] for k, v in zip(arrays.keys, arrays.values))
        return {(e.flow, e.cpu): e for e in found}


@pytest.fixture(scope="module")
def topo(tmp_path_factory):
    return read_topology(xeon_2s_smt(str(tmp_path_factory.mktemp("xeon"))))


def _report(f, snap):
    return f.as_json(snap.capabilities)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("floor", [0.0, 4e6, 12e6])
def test_the_busy_flows_have_the_figures_intervals_give_them(topo, seed, floor):
    reads = list(_reads(seed))
    keep = {FlowId("tcp", "198.18.0.1", 40002, "198.18.0.2", 5201)}
    full, busy = Intervals(Reads(reads), topo), BusyIntervals(Reads(reads), topo, floor,
                                                              keep=lambda: keep)
    shown = left = 0
    for _ in reads[1:]:
        want, got = full(), busy()
        wanted = {f.flow: f for f in want.flows}
        for f in got.flows:
            assert _report(f, got) == _report(wanted[f.flow], want), f.flow
        must = {f.flow for f in want.flows if f.rate_bps >= floor or f.flow in keep}
        assert must <= {f.flow for f in got.flows}
        assert busy.left_out == len(want.flows) - len(got.flows)
        shown, left = shown + len(got.flows), left + busy.left_out
        assert got.cpus == want.cpus and got.duration == want.duration
    assert shown and (left if floor else not left)   # the floors do leave flows out


def test_a_wildcard_sockets_reads_go_to_its_one_flow_or_to_none(topo):
    """A slow flow beside a fast one to the same port keeps the reads of their unconnected
    socket from either, as in Intervals; alone, the fast one gets them."""
    fast = FlowId("udp", "198.18.0.1", 41000, "198.18.0.2", 9000)
    slow = FlowId("udp", "198.18.0.1", 41001, "198.18.0.2", 9000)
    wild = FlowId("udp", "0.0.0.0", 0, "198.18.0.2", 9000)

    def read(t, with_slow):
        entries = {(fast, 1): FlowCpuSample(fast, 1, rx_bytes=10**7 * t, kernel_ns=10**6 * t),
                   (wild, 3): FlowCpuSample(wild, 3, app_calls=10 * t, app_ns=10**6 * t,
                                            app_pid=7, app_comm="server")}
        if with_slow:
            entries[slow, 1] = FlowCpuSample(slow, 1, rx_bytes=10 * t, kernel_ns=10 * t)
        return TraceSample(t * 10**9, entries, (), len(entries), 1024)
    for with_slow, app_cpu in ((True, None), (False, 3)):
        reads = [read(t, with_slow) for t in range(3)]
        full, busy = Intervals(Reads(reads), topo), BusyIntervals(Reads(reads), topo, 1e6)
        for _ in reads[1:]:
            want, got = full(), busy()
            f = next(f for f in got.flows if f.flow == fast)
            assert f.app_cpu == app_cpu
            assert _report(f, got) == _report(next(w for w in want.flows if w.flow == fast), want)
