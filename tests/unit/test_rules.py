"""RuleTable, the bookkeeping of `steer pin`/`unpin` over the steering program's maps, on fake
maps: which rules, masks, rule counters and cpumap entries each operation leaves. The same
operations on the real maps, with packets, are in test_steering_live."""
import struct

import pytest

from steer.abi import xdp as abi
from steer.model.flowspec import FlowSpec
from steer.steering.xdp import RuleTable, SteerError

CPUS = 4


class FakeMap:
    """A BPF map as steer's gateway presents one: raw bytes in and out."""

    def __init__(self, max_entries=0, per_cpu=None):
        self.data, self.max_entries = {}, max_entries
        if per_cpu is not None:
            self.data[struct.pack("I", 0)] = per_cpu

    def lookup(self, key):
        return self.data.get(key)

    def update(self, key, value):
        self.data[key] = value

    def delete(self, key):
        return self.data.pop(key, None) is not None

    def items(self):
        return list(self.data.items())


def table():
    counters = [bytes(abi.Counters(passed=1, redirected=cpu)) for cpu in range(CPUS)]
    maps = {"rules": FakeMap(), "masks": FakeMap(), "rule_stats": FakeMap(),
            "counters": FakeMap(per_cpu=counters), "cpu_map": FakeMap(max_entries=CPUS)}
    return RuleTable(maps, "veth-rx"), maps


def masks(maps):
    m = abi.Masks.from_buffer_copy(maps["masks"].lookup(struct.pack("I", 0)))
    return list(m.mask[:m.count])


def cpumap(maps):
    return sorted(struct.unpack("I", k)[0] for k in maps["cpu_map"].data)


EXACT = FlowSpec.parse("proto=tcp,src=198.18.0.1,sport=40000,dst=198.18.0.2,dport=5201")
PORT = FlowSpec.parse("proto=tcp,dport=5202")


def test_pin_writes_rule_masks_and_cpumap():
    t, maps = table()
    assert t.pin(PORT, 1) == (None, 0)
    assert t.pin(EXACT, 2) == (None, 1)
    assert [(str(r.spec), r.cpu, r.id) for r in t.rules()] == [(str(PORT), 1, 0), (str(EXACT), 2, 1)]
    assert masks(maps) == [abi.F_ALL, abi.F_PROTO | abi.F_DPORT]   # most specific first
    assert cpumap(maps) == [1, 2]
    assert t.counters() == {"passed": CPUS, "unparsed": 0, "redirected": sum(range(CPUS)),
                            "redirect_failed": 0}


def test_pin_again_moves_the_rule_and_frees_the_old_cpu():
    t, maps = table()
    t.pin(PORT, 1)
    maps["rule_stats"].update(struct.pack("I", 0), bytes(abi.RuleStats(packets=5, bytes=500)))
    assert t.pin(PORT, 3) == (1, 0)
    (r,) = t.rules()
    assert (r.cpu, r.id, r.packets) == (3, 0, 5)   # the same rule: its counters go on
    assert cpumap(maps) == [3]                     # no rule left on CPU 1: its kthread goes


def test_unpin_removes_rule_mask_and_cpu_and_names_the_rules_there_are():
    t, maps = table()
    t.pin(PORT, 1)
    t.pin(EXACT, 1)
    assert t.unpin(EXACT) == 1
    assert [str(r.spec) for r in t.rules()] == [str(PORT)] and masks(maps) == [PORT.mask]
    assert cpumap(maps) == [1]
    with pytest.raises(SteerError, match=r"no rule proto=udp on veth-rx \(rules: proto=tcp,dport=5202\)"):
        t.unpin(FlowSpec.parse("proto=udp"))
    t.unpin(PORT)
    assert t.rules() == [] and masks(maps) == [] and cpumap(maps) == []


def test_rule_ids_are_reused_and_bounded():
    t, maps = table()
    t.pin(PORT, 1)
    t.pin(EXACT, 1)
    t.unpin(PORT)
    assert t.pin(FlowSpec.parse("dport=9"), 0)[1] == 0   # the lowest free id
    t.pin_many([(FlowSpec.parse(f"dport={p}"), 0) for p in range(10, 10 + abi.MAX_RULES - 2)])
    assert len(t.rules()) == abi.MAX_RULES
    with pytest.raises(SteerError, match=f"already has {abi.MAX_RULES} rules"):
        t.pin(FlowSpec.parse("sport=1"), 0)
    with pytest.raises(SteerError, match="exists already"):
        t.pin_many([(EXACT, 0)])
