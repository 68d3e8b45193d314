"""Live tier: steer profile on real traffic, against the exact tracer attached at the same time,
and against Cai et al.'s finding that copying the data is the largest single cost of a bulk
TCP receiver."""
import json

import pytest

from helpers import CPUS, alone, live, sampling_bound, steer
from steer.model.flows import build_snapshot
from steer.experiment.lab import Lab, LabFlow
from steer.defaults import PROFILE_HZ
from steer.trace.profile import CATEGORIES, run_profile
from steer.model.topology import read_topology
from steer.trace.tracer import Tracer

pytestmark = [live, alone]

READER_CPU, SENDER_CPU = CPUS[-1], CPUS[0]
SECONDS = 6


@pytest.mark.skipif(len(CPUS) < 2, reason="needs two usable CPUs: reader and softirq apart")
def test_profile_agrees_with_exact_and_finds_the_copy(held):
    """Two lab flows (softirq and reader on different CPUs, and all on one CPU) with the exact
    tracer and the profiler attached at once: each side of each flow above 1% of a CPU has, summed
    over the categories, the exact tracer's seconds within sampling_bound at the profiler's
    default frequency; the kernel side of a veth flow copies nothing. (Which category leads is
    checked without the exact tracer, below: its programs slow the softirq that holds the socket
    lock, and the reader then spins on it: 35% of the reader's samples, 25% without it.)"""
    flows = [LabFlow(SENDER_CPU, READER_CPU), LabFlow(SENDER_CPU, SENDER_CPU)]
    topo = read_topology()
    exact = Tracer(timing="exact").start()
    prof = Tracer(timing="sampled", sample_hz=PROFILE_HZ, profile=True,
                  counters="off").start()
    try:
        with Lab(flows, seconds=SECONDS) as lab:
            lab.start_servers()
            e0 = exact.sample()
            holder = {}

            def window():
                lab.start_clients()
                holder["results"] = lab.wait(timeout=SECONDS + 30)
            p = run_profile(prof, window)
            e1 = exact.sample()
    finally:
        prof.stop()
        exact.stop()
    ex = build_snapshot(e0, e1, topo, exact.capabilities)
    by_flow = {f.flow: f for f in p.flows}
    checked = 0
    for r in holder["results"]:
        assert r.error is None, r.error
        f = next(f for f in ex.flows if f.flow.dport == r.flow.port and f.flow.sport == r.sender_port)
        g = by_flow[f.flow]
        assert g.rx_bytes >= r.received_bytes
        for side, want in (("kernel", f.kernel_seconds),  # NET_RX + cpumap kthread, as here
                           ("app", f.app_seconds)):
            split = getattr(g, side)
            if want < 0.01 * f.duration:
                continue
            got = split.total
            # two flows, kernel and app side: four sampled times held at once
            bound = sampling_bound(want, PROFILE_HZ, figures=4)
            low, high = 1 - bound, 1 + bound
            if side == "app" and r.flow.app_cpu != r.flow.kernel_cpu:
                # a reader on an idling CPU: the exact mode reads it low (test_timing_live), the
                # profile less so. 12 runs (2026-11-27): the profile +25.6% over exact, sd 7.1%;
                # these bounds are 4.1 and 5.2 spreads away at the spread's 95% upper bound:
                # by a normal model, out by chance 2 times in 100,000 (below) and 1 in 10 million
                low, high = 0.80, 1.1 / 0.6
            print(f"{f.flow} {side}: exact {want:.3f} s, profile {got:.3f} s in {split.samples} "
                  f"samples ({got / want - 1:+.1%}, bounds {low - 1:+.1%} {high - 1:+.1%}); "
                  + ", ".join(f"{c} {v:.0%}" for c, v in split.shares().items() if v))
            where = "apart" if r.flow.app_cpu != r.flow.kernel_cpu else "same core"
            held(f"{where} {side} profile vs exact", got / want - 1, low - 1, high - 1)
            checked += 1
        # a veth flow's kernel side copies nothing (no NIC DMA, no bounce): a check that the
        # stacks reach their categories, whatever the exact tracer does to the time split
        assert g.kernel.shares()["data_copy"] < 0.05, g.kernel.shares()
    assert checked >= 3


def test_profile_command_json_and_svg(tmp_path):
    """steer profile --json on lab traffic: the documented shape, the lab flow with its bytes and
    both sides, and an SVG. Cai et al.: copying the data is the largest single cost of a bulk
    TCP receiver. Here that holds where softirq and reader share a CPU (59% of the reader's
    samples in _copy_to_iter and its callers, lock 2%); with the softirq on another CPU the
    reader also spins on the socket lock the softirq holds (paravirtual spinlocks: a waiting vCPU
    halts), 11% to more than the copy's share across runs, so that placement is not held to it."""
    svg = tmp_path / "profile.svg"
    with Lab([LabFlow(READER_CPU, READER_CPU)], seconds=6) as lab:
        lab.start()
        r = steer("profile", "--duration", "2", "--json", "--svg", str(svg))
        lab.wait(timeout=30)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert set(j) >= {"duration", "frequency", "categories", "flows", "cpus", "unattributed"}
    assert j["frequency"] == PROFILE_HZ and j["categories"] == list(CATEGORIES)
    lab_flows = [f for f in j["flows"] if f["dport"] == lab.flows[0].port]
    assert lab_flows, j["flows"]
    f = lab_flows[0]
    assert f["rx_bytes"] > 0 and f["samples"] > 0
    assert sum(f["app"].values()) > 0 and sum(f["kernel"].values()) > 0
    assert max(f["app"], key=f["app"].get) == "data_copy", f["app"]
    assert svg.read_text().lstrip().startswith("<?xml")

