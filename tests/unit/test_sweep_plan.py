"""The sweep's default CPUs on big hosts and `steer sweep --plan`, on fixture sysfs trees."""
import json

import pytest

from helpers import assert_one_line_error, steer
from steer.experiment.sweep import (DEFAULT_MAX_CPUS, SweepConfig, cells_of, default_cpus,
                                    estimated_seconds, plan)
from steer.model.classify import classify
from steer.model.topology import read_topology
from sysfs import epyc_2s, epyc_chiplet, sandy_bridge_2s_6c, xeon_2s_smt


def placements(topo, cpus):
    """Every (class, shared LLC, SMT sibling) the pairs of CPUS hold, and by socket the
    within-socket ones."""
    seen, per_socket = set(), {}
    for k in cpus:
        for a in cpus:
            p = classify(k, a, topo)
            seen.add((p.cls, p.shared_llc, p.smt_sibling))
            if topo.cpus[k].socket == topo.cpus[a].socket:
                per_socket.setdefault(topo.cpus[k].socket, set()).add(
                    (p.cls, p.shared_llc, p.smt_sibling))
    return seen, per_socket


@pytest.mark.parametrize("build,n_cpus", [(lambda r: epyc_2s(r), 192),
                                          (lambda r: epyc_2s(r, cores=64), 256),
                                          (xeon_2s_smt, 48), (epyc_chiplet, 32),
                                          (sandy_bridge_2s_6c, 12)])
def test_the_default_on_a_big_host_is_bounded_and_holds_every_placement_of_every_socket(
        tmp_path, build, n_cpus):
    topo = read_topology(build(str(tmp_path)))
    assert len(topo.online) == n_cpus
    cpus, why = default_cpus(topo, topo.online)
    assert len(cpus) <= 4 * len(topo.sockets) and "every placement" in why
    # what the whole matrix holds, the selection holds too: on each socket and across
    every, every_socket = placements(topo, topo.online)
    got, got_socket = placements(topo, cpus)
    assert every <= got, every - got
    for sock, held in every_socket.items():
        assert held <= got_socket[sock], (sock, held - got_socket[sock])


def test_the_192_cpu_host_has_every_class_in_64_cells(tmp_path):
    topo = read_topology(epyc_2s(str(tmp_path)))
    cpus, _ = default_cpus(topo, topo.online)
    cfg = SweepConfig(cpus=cpus, seconds=5, repeat=1, method="xdp", mode="host")
    p = plan(cfg, topo)
    assert p["cells"] == 64 == len(p["plan"])
    assert set(p["classes"]) == {"same-core", "same-socket", "cross-socket"}
    kinds = {(c["class"], c["shared_llc"], c["smt_sibling"]) for c in p["plan"]}
    assert {("same-core", True, False), ("same-core", True, True), ("same-socket", True, False),
            ("same-socket", False, False), ("cross-socket", False, False)} <= kinds
    assert p["estimated_seconds"] == round(estimated_seconds(cfg)) > 64 * 5
    # the full matrix would be 36,864 cells
    assert len(cells_of(SweepConfig(cpus=topo.online, seconds=5, repeat=1, method="xdp",
                                    mode="host"))) == 192 ** 2


def test_a_small_host_sweeps_every_usable_cpu(tmp_path):
    topo = read_topology(sandy_bridge_2s_6c(str(tmp_path)))
    usable = topo.online[:DEFAULT_MAX_CPUS]
    assert default_cpus(topo, usable) == (usable, "every usable CPU")


def test_plan_from_the_command_line(tmp_path):
    root = epyc_2s(str(tmp_path))
    r = steer("sweep", "--plan", "--sysfs", root, "--seconds", "2", "--repeat", "3")
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    assert p["cells"] == 64 and p["repeat"] == 3 and p["seconds"] == 2
    assert p["estimated_seconds"] == round(5 + 64 * 3 * (2 + 1))
    assert {c["kernel_cpu"] for c in p["plan"]} == {0, 96, 1, 8, 48, 144, 49, 56}
    r = steer("sweep", "--plan", "--sysfs", root, "--cpus", "all")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["cells"] == 192 ** 2
    r = steer("sweep", "--plan", "--sysfs", root, "--cpus", "0,191")
    assert json.loads(r.stdout)["classes"] == {"same-core": 2, "cross-socket": 2}
    assert_one_line_error(steer("sweep", "--plan", "--sysfs", root, "--cpus", "300"), "--cpus")
    assert_one_line_error(steer("sweep", "--sysfs", root, "--out", str(tmp_path / "o")),
                          "--sysfs plans for another machine: it goes with --plan", code=2)
    assert_one_line_error(steer("sweep", "--cpus", "0"), "--out DIR is required", code=2)
    assert_one_line_error(steer("sweep", "--plan", "--sysfs", str(tmp_path / "none")), "--sysfs")
