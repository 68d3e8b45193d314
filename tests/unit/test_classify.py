"""Classes on the fixture topologies."""
import os

import pytest

from steer.model.classify import CROSS_SOCKET, SAME_CORE, SAME_SOCKET, UNKNOWN, classify
from steer.model.topology import read_topology
from sysfs import epyc_chiplet, sandy_bridge_2s_6c, xeon_2s_smt

VM = os.path.join(os.path.dirname(__file__), "../support/fixtures/sysfs-vm-2cpu")


@pytest.fixture
def xeon(tmp_path):
    return read_topology(xeon_2s_smt(str(tmp_path)))


@pytest.mark.parametrize("k,a,cls,llc,smt", [
    (0, 0, SAME_CORE, True, False),         # the same CPU
    (0, 24, SAME_CORE, True, True),         # SMT siblings share the core: shown apart
    (36, 12, SAME_CORE, True, True),
    (0, 1, SAME_SOCKET, True, False),
    (0, 25, SAME_SOCKET, True, False),      # sibling of another core of the socket
    (0, 12, CROSS_SOCKET, False, False),
    (36, 0, CROSS_SOCKET, False, False),
])
def test_xeon(xeon, k, a, cls, llc, smt):
    p = classify(k, a, xeon)
    assert (p.cls, p.shared_llc, p.smt_sibling) == (cls, llc, smt)


def test_unknown_sides(xeon):
    assert classify(None, 3, xeon).cls == UNKNOWN
    assert classify(None, 3, xeon).smt_sibling is None
    assert classify(3, None, xeon).cls == UNKNOWN
    assert classify(3, 480, xeon).cls == UNKNOWN


def test_papers_machine(tmp_path):
    t = read_topology(sandy_bridge_2s_6c(str(tmp_path)))
    assert classify(0, 2, t).cls == SAME_SOCKET
    assert classify(0, 1, t).cls == CROSS_SOCKET
    assert classify(4, 4, t).cls == SAME_CORE


def test_chiplet_same_socket_without_shared_llc(tmp_path):
    t = read_topology(epyc_chiplet(str(tmp_path)))
    assert (classify(0, 1, t).cls, classify(0, 1, t).shared_llc) == (SAME_SOCKET, True)
    assert (classify(0, 4, t).cls, classify(0, 4, t).shared_llc) == (SAME_SOCKET, False)
    assert classify(0, 16, t).cls == SAME_CORE


def test_this_vm():
    t = read_topology(VM)
    assert classify(0, 1, t).cls == SAME_SOCKET and classify(1, 1, t).cls == SAME_CORE
