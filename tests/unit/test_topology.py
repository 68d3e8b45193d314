"""Topology parsing on sysfs trees: a copy of this VM's, and built dual-socket and chiplet ones."""
import os

import pytest

from steer.model.topology import format_cpulist, parse_cpulist, read_topology
from sysfs import epyc_chiplet, sandy_bridge_2s_6c, xeon_2s_smt

VM = os.path.join(os.path.dirname(__file__), "../support/fixtures/sysfs-vm-2cpu")


@pytest.mark.parametrize("text,cpus", [
    ("0", [0]), ("0-3", [0, 1, 2, 3]), ("0-1,8,10-11\n", [0, 1, 8, 10, 11]), ("", []),
    ("3,1", [1, 3])])
def test_cpulist_round_trip(text, cpus):
    assert parse_cpulist(text) == cpus
    assert parse_cpulist(format_cpulist(cpus)) == cpus


@pytest.mark.parametrize("bad", ["a", "3-1", "-1", "1-x", "1-"])
def test_cpulist_rejects_garbage(bad):
    with pytest.raises(ValueError):
        parse_cpulist(bad)


def test_this_vm():
    t = read_topology(VM)
    assert sorted(t.cpus) == [0, 1] and t.online == [0, 1]
    assert t.sockets == [0] and t.llc_level == 3
    c0, c1 = t.cpus[0], t.cpus[1]
    assert (c0.core, c1.core) == (0, 1)
    assert c0.siblings == (0,) and c1.siblings == (1,)
    assert c0.llc == c1.llc == 0 and c0.llc_cpus == (0, 1)
    assert c0.numa == c1.numa == 0


def test_live_sysfs_matches_fixture_shape():
    """The parser also works on the real /sys of whatever machine runs the tests."""
    t = read_topology("/sys")
    assert t.online and all(t.cpus[c].socket is not None for c in t.online)


def test_xeon_two_sockets_with_smt(tmp_path):
    t = read_topology(xeon_2s_smt(str(tmp_path)))
    assert len(t.cpus) == 48 and t.sockets == [0, 1]
    assert t.cpus[0].siblings == (0, 24) and t.cpus[24].core == t.cpus[0].core
    assert t.cpus[12].socket == 1 and t.cpus[36].socket == 1
    assert len({c.core for c in t.cpus.values()}) == 24
    assert len({c.llc for c in t.cpus.values()}) == 2
    assert t.cpus[5].llc == t.cpus[29].llc != t.cpus[12].llc
    assert t.cpus[13].numa == 1
    # core ids repeat across sockets: the global core index must not merge them
    assert t.cpus[0].core != t.cpus[12].core


def test_offline_cpu(tmp_path):
    t = read_topology(xeon_2s_smt(str(tmp_path), offline=(5,)))
    assert 5 not in t.online and 5 in t.cpus
    assert t.cpus[5].socket is None and not t.cpus[5].online
    with pytest.raises(ValueError, match="CPU 5 is offline"):
        t.check_online(5)
    with pytest.raises(ValueError, match="CPU 99 does not exist"):
        t.check_online(99)


def test_papers_machine_interleaved(tmp_path):
    t = read_topology(sandy_bridge_2s_6c(str(tmp_path)))
    assert t.sockets == [0, 1]
    assert [c for c in t.online if t.cpus[c].socket == 0] == [0, 2, 4, 6, 8, 10]
    assert all(c.siblings == (c.cpu,) for c in t.cpus.values())
    assert t.cpus[0].llc_cpus == (0, 2, 4, 6, 8, 10)


def test_chiplet_several_llc_in_one_socket(tmp_path):
    t = read_topology(epyc_chiplet(str(tmp_path)))
    assert t.sockets == [0]
    assert len({c.llc for c in t.cpus.values()}) == 4
    assert t.cpus[0].llc == t.cpus[3].llc == t.cpus[19].llc != t.cpus[4].llc


def test_json_shape(tmp_path):
    d = read_topology(xeon_2s_smt(str(tmp_path))).as_dict()
    assert set(d["cpus"][0]) == {"cpu", "core", "socket", "llc", "numa", "siblings", "online"}
    assert d["cpus"][0]["siblings"] == [0, 24]


def test_missing_tree(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_topology(str(tmp_path))
