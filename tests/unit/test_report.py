"""Sweep report, CSV and figures on synthetic results (no kernel needed)."""
import csv
import io
import json
import re
import struct
from dataclasses import replace

import pytest

from steer.experiment.figures import write_figures
from steer.experiment.report import PAPERS, PAPERS_HARDWARE, by_class, llc_peer_choice, report_md, to_csv
from steer.experiment.sweep import SweepConfig, SweepError, load_results, save_results, summarize
from steer.model.topology import read_topology
from sysfs import xeon_2s_smt

GBPS = 1e9


@pytest.fixture
def xeon(tmp_path):
    return read_topology(xeon_2s_smt(str(tmp_path / "sys")))


def synthetic(topo, cpus=(0, 1, 12)):
    """Throughput shaped like the papers': same core 21, same socket 37, cross socket 27 Gbit/s."""
    shape = {"same-core": 21, "same-socket": 37, "cross-socket": 27}
    cells = []
    for k in cpus:
        for a in cpus:
            cls = summarize(k, a, [], topo)["class"]
            cells.append(summarize(k, a, [{"throughput_bps": shape[cls] * GBPS,
                                           "kernel_seconds_per_gb": 0.05, "app_seconds_per_gb": 0.2,
                                           "measured_kernel_cpu": k, "measured_app_cpu": a}], topo))
    cfg = SweepConfig(cpus=list(cpus), seconds=2, repeat=1, method="rps", mode="lab")
    return {"version": 1, "config": cfg.as_dict(), "host": {"hostname": "h", "kernel": "k"},
            "cells": cells, "complete": True}


def test_summarize_takes_medians_and_classifies(xeon):
    c = summarize(0, 12, [{"throughput_bps": v, "measured_kernel_cpu": 0} for v in (1, 5, 3)], xeon)
    assert c["throughput_bps"] == 3 and c["class"] == "cross-socket" and c["shared_llc"] is False
    assert c["measured_kernel_cpu"] == 0 and len(c["runs"]) == 3
    assert c["llc_misses_app_per_gb"] is None


def test_by_class_table(xeon):
    stats = by_class(synthetic(xeon)["cells"])
    assert set(stats) == {"same-core", "same-socket", "cross-socket"}
    assert stats["same-core"]["cells"] == 3 and stats["same-socket"]["cells"] == 2
    assert stats["cross-socket"]["cells"] == 4
    assert stats["same-socket"]["median_bps"] == 37 * GBPS


def test_report_names_best_llc_peer_and_papers(xeon):
    md = report_md(synthetic(xeon), xeon)
    assert "| same-core | 3 | 21.00 | 21.00 | 21.00 |" in md
    assert "| cross-socket | 4 | 27.00 |" in md
    assert "Kernel CPU 0, app CPU 1 (same-socket): 37.00 Gbit/s" in md
    # llc-peer for a reader on CPU 0 picks CPU 1 (socket 0, shares the L3): the best cell
    assert "| 0 | 1 | 37.00 | 1 (37.00) | 1.00 |" in md
    # for a reader on CPU 12, llc-peer wants a socket-1 core that is not in this sweep
    assert "| 12 | CPU 13 (not in the sweep) |" in md
    assert "theirs, not measured here" in md and PAPERS_HARDWARE in md
    # two measurements, two columns, each cited
    assert "| same-socket | ~35 | ~39 | 37.00 |" in md
    assert "| same-core | ~22 | ~20 | 21.00 |" in md
    assert all(f"- {p['name']}: {p['source']}." in md for p in PAPERS)


def test_incomplete_report_says_so(xeon):
    r = synthetic(xeon)
    r["complete"] = False
    r["cells"] = r["cells"][:2]
    md = report_md(r, xeon)
    assert "Incomplete" in md and "Cells: 2 of 9" in md


def test_llc_peer_choice_single_socket_vm():
    import os
    topo = read_topology(os.path.join(os.path.dirname(__file__), "../support/fixtures/sysfs-vm-2cpu"))
    assert llc_peer_choice(0, topo)[0] == 1 and llc_peer_choice(1, topo)[0] == 0


def test_csv(xeon):
    rows = list(csv.DictReader(io.StringIO(to_csv(synthetic(xeon)))))
    assert len(rows) == 9 and rows[0]["kernel_cpu"] == "0" and rows[0]["class"] == "same-core"
    assert float(rows[1]["throughput_bps"]) == 37 * GBPS and rows[1]["runs"] == "1"


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def svg_cells(path):
    """Bubbles drawn in the cells group of an SVG figure."""
    text = open(path).read()
    m = re.search(r'<g id="cells">(.*?)</g>', text, re.S)
    assert m, f"no cells group in {path}"
    return len(re.findall(r"<path ", m.group(1)))


def test_figures(xeon, tmp_path):
    files = write_figures(synthetic(xeon), str(tmp_path))
    names = sorted(p.rsplit("/", 1)[1] for p in files)
    assert names == sorted(f"{n}.{e}" for n in ("throughput", "cpu_per_gb", "throughput_by_class",
                                                "histograms")
                           for e in ("png", "svg"))
    w, h = png_size(tmp_path / "throughput.png")
    assert w > 200 and h > 200
    assert svg_cells(tmp_path / "throughput.svg") == 9
    assert svg_cells(tmp_path / "cpu_per_gb.svg") == 9


def test_histograms_are_of_every_run_by_class(xeon, tmp_path):
    """NDM'13's Figs 6-7 count every measurement, not cells' medians; the LLC panel appears only
    where a PMU counted"""
    from steer.experiment.figures import histograms, run_values
    cells = [summarize(0, 0, [{"throughput_bps": v * GBPS} for v in (20, 22, 21)], xeon),
             summarize(0, 1, [{"throughput_bps": v * GBPS} for v in (36, 38)], xeon),
             summarize(0, 12, [{"throughput_bps": 27 * GBPS, "llc_misses_app_per_gb": None}], xeon)]
    by = run_values(cells, "throughput_bps")
    assert {k: len(v) for k, v in by.items()} == {"same-core": 3, "same-socket": 2,
                                                   "cross-socket": 1}
    histograms(cells, str(tmp_path / "h"))
    assert "LLC misses" not in (tmp_path / "h.svg").read_text()
    cells[2]["runs"][0]["llc_misses_app_per_gb"] = 3e6
    histograms(cells, str(tmp_path / "h2"))
    assert "LLC misses" in (tmp_path / "h2.svg").read_text()


def test_llc_figure_only_with_llc(xeon, tmp_path):
    r = synthetic(xeon)
    for c in r["cells"]:
        c["llc_misses_kernel_per_gb"], c["llc_misses_app_per_gb"] = 1e6, 2e6
    files = write_figures(r, str(tmp_path))
    assert str(tmp_path / "llc_per_gb.svg") in files and svg_cells(tmp_path / "llc_per_gb.svg") == 9


def test_resume_refuses_other_settings(xeon, tmp_path):
    r = synthetic(xeon)
    path = str(tmp_path / "results.json")
    save_results(path, r)
    cfg = SweepConfig(**r["config"])
    assert load_results(path, cfg)["cells"] == json.load(open(path))["cells"]
    cfg.seconds = 9
    with pytest.raises(SweepError, match="other settings"):
        load_results(path, cfg)
    with pytest.raises(SweepError, match="no .* to resume"):
        load_results(str(tmp_path / "none.json"), cfg)


def test_figures_draw_socket_quadrants_and_the_nic_socket(xeon, tmp_path):
    """CPUs 0 and 1 on socket 0, 12 on socket 1: the axes go by socket, a line parts the
    sockets, and the NIC's socket (node 1 here) is shaded."""
    r = synthetic(xeon)
    r["host"]["config"] = {"device": {"name": "eth0", "numa_node": 1, "local_cpus": list(range(12, 24))}}
    write_figures(r, str(tmp_path), xeon)
    svg = open(tmp_path / "throughput.svg").read()
    assert svg_cells(tmp_path / "throughput.svg") == 9
    assert svg.count('id="socket-boundary') == 2          # one vertical, one horizontal line
    assert 'id="nic-socket' in svg
    assert "socket 0" in svg and "socket 1" in svg
    plain = tmp_path / "plain"
    plain.mkdir()
    write_figures(synthetic(xeon), str(plain))              # no topology: no quadrants
    assert 'socket-boundary' not in open(plain / "throughput.svg").read()


def test_flows_per_core_section_figure_and_csv(xeon, tmp_path):
    """Cells of 1 and 8 flows: the matrix and class tables stay the one-flow ones, a section and
    a figure give throughput per core and per flow against flows per core."""
    r = synthetic(xeon)
    r["config"]["flows"] = [1, 8]
    for c in list(r["cells"]):
        eight = dict(c, flows=8, throughput_bps=c["throughput_bps"] * 0.9)
        eight["throughput_per_flow_bps"] = eight["throughput_bps"] / 8
        r["cells"].append(eight)
    md = report_md(r, xeon)
    assert "| same-core | 3 | 21.00 | 21.00 | 21.00 |" in md        # the one-flow matrix
    assert "## Flows per core" in md
    assert "| 8 | same-socket | 2 | 33.30 | 4.16 |" in md
    assert "| 1 | same-socket | 2 | 37.00 | 37.00 |" in md
    files = write_figures(r, str(tmp_path), xeon)
    assert str(tmp_path / "flows_per_core.svg") in files
    svg = open(tmp_path / "flows_per_core.svg").read()
    assert all(f'id="flows-{cls}' in svg for cls in ("same-core", "same-socket", "cross-socket"))
    assert svg_cells(tmp_path / "throughput.svg") == 9                 # one flow's cells only
    rows = to_csv(r).splitlines()
    assert rows[0].split(",")[:3] == ["kernel_cpu", "app_cpu", "flows"] and len(rows) == 19


def test_device_settings_section_csv_and_resume(xeon, tmp_path):
    """--offloads gro=on,gro=off: the matrix, class tables and figures are of the first setting;
    a section gives each setting by class with its packets per skb; the CSV names each row's
    setting; a resumed sweep knows a cell by its setting too."""
    from steer.experiment.sweep import cell_key, cells_of
    r = synthetic(xeon)
    r["config"]["offloads"] = [{"gro": "on"}, {"gro": "off"}]
    for c in r["cells"]:
        c.update(setting={"offloads": {"gro": "on"}}, packets_per_skb=30.0,
                 unattributed_seconds_per_gb=0.25)
    for c in list(r["cells"]):
        r["cells"].append(dict(c, setting={"offloads": {"gro": "off"}}, packets_per_skb=1.0,
                               unattributed_seconds_per_gb=None,
                               throughput_bps=c["throughput_bps"] / 2))
    md = report_md(r, xeon)
    assert "The device with gro on, the other settings under Device settings." in md
    assert "| same-core | 3 | 21.00 | 21.00 | 21.00 |" in md          # the first setting's matrix
    assert "| gro on | same-socket | 2 | 37.00 | 37.00 | 37.00 | 0.050 | 0.200 | 0.250 | 30.0 |" in md, md
    assert "| gro off | same-socket | 2 | 18.50 | 18.50 | 18.50 | 0.050 | 0.200 | - | 1.0 |" in md
    assert "In the lab the sender's TSO was off" in md
    write_figures(r, str(tmp_path), xeon)
    assert svg_cells(tmp_path / "throughput.svg") == 9
    rows = list(csv.DictReader(io.StringIO(to_csv(r))))
    assert [x["setting"] for x in rows] == ["gro on"] * 9 + ["gro off"] * 9   # in sweep order
    assert rows[0]["packets_per_skb"] == "30.0"
    # resume: the cells of gro off are done, those of gro on are not
    cfg = SweepConfig(**r["config"])
    done = {cell_key(c) for c in r["cells"] if c["setting"] == {"offloads": {"gro": "off"}}}
    todo = [c for c in cells_of(cfg) if cell_key({"kernel_cpu": c[0], "app_cpu": c[1],
                                                  "flows": c[2], "setting": c[3]}) not in done]
    assert len(cells_of(cfg)) == 18 and len(todo) == 9
    assert all(c[3] == {"offloads": {"gro": "on"}} for c in todo)
    # results of a steer before the settings resume as one setting, "as found"
    old = synthetic(xeon)
    for c in old["cells"]:
        c.pop("setting", None)
    del old["config"]["pause"], old["config"]["offloads"]
    path = str(tmp_path / "results.json")
    save_results(path, old)
    assert load_results(path, SweepConfig(**synthetic(xeon)["config"]))
    assert "Device settings" not in report_md(old, xeon)
    assert list(csv.DictReader(io.StringIO(to_csv(old))))[0]["setting"] == "as found"


def test_profiled_cells_combine_runs_and_reach_the_report(xeon):
    """a cell's profile is the shares of its runs' summed seconds (a run with more samples weighs
    more), and the report shows each side's shares"""
    from steer.trace.profile import CATEGORIES
    zero = dict.fromkeys(CATEGORIES, 0.0)
    runs = [{"throughput_bps": GBPS, "profile": {"kernel": {**zero, "tcp_ip": 0.3, "netdev": 0.1},
                                                 "app": {**zero, "data_copy": 0.6}, "samples": 100}},
            {"throughput_bps": GBPS, "profile": {"kernel": {**zero, "tcp_ip": 0.1, "netdev": 0.3},
                                                 "app": {**zero, "data_copy": 0.1, "lock": 0.1},
                                                 "samples": 60}}]
    c = summarize(0, 1, runs, xeon)
    p = c["profile"]
    assert p["samples"] == 160
    assert p["kernel"]["tcp_ip"] == pytest.approx(0.5) and p["kernel"]["netdev"] == pytest.approx(0.5)
    assert p["app"]["data_copy"] == pytest.approx(0.7 / 0.8) and p["app_seconds"] == pytest.approx(0.8)
    res = synthetic(xeon)
    res["cells"].append(c)
    md = report_md(res, xeon)
    assert "## Where the CPU went (steer profile)" in md
    assert "| 0 | 1 | 1 | same-socket | app | 0.800 | 160 | 88% |" in md
    # no profile, no section
    assert "steer profile" not in report_md(synthetic(xeon), xeon)


def test_paper_preset_is_named_in_the_report(xeon):
    from steer.experiment.report import paper_text
    from steer.experiment.sweep import paper_sender_cpu
    assert paper_sender_cpu([0, 1], [0, 1, 2, 3]) == 3
    assert paper_sender_cpu([0, 1], [0, 1]) is None
    r = synthetic(xeon)
    r["config"].update(paper=True, sender_cpu=3, seconds=30, repeat=3)
    md = report_md(r, xeon)
    assert "Method: --paper: iperf3 -Z (sendfile), the first 2 s left out" in md
    assert "the sender pinned to CPU 3" in md
    assert "left to the scheduler" in paper_text({**r["config"], "sender_cpu": None})
    assert "client on the other host" in paper_text({**r["config"], "mode": "host"})
    assert "Method:" not in report_md(synthetic(xeon), xeon)


def test_pmu_figures_of_a_run_per_side_and_of_the_readers_whole_core(xeon):
    """counter_figures: each side's hit ratio from its flows' misses and references, instructions
    and cycles per GB; the reader's core (CPU 0 and its SMT sibling 24 on this fixture) from
    the per-CPU counts between the two samples."""
    from steer.model.reports import FlowReport
    from steer.model.classify import classify
    from steer.model.samples import FlowId, TraceSample
    from steer.experiment.sweep import counter_figures
    assert xeon.cpu(0).siblings == (0, 24)
    f = FlowReport(FlowId("tcp", "198.18.0.1", 1, "198.18.0.2", 2), 1.0, 2 * 10**9, 1, 0, 1.0,
                   1.0, 0.0, 0, 1.0, 1.0, 0.0, 2 * 10**9, 1, 7, "r", llc_misses_kernel=100,
                   llc_misses_app=300, placement=classify(0, 0, xeon), kernel_cpus={},
                   app_cpus={}, llc_references_kernel=1000, llc_references_app=400,
                   instructions_kernel=4 * 10**9, instructions_app=6 * 10**9,
                   cycles_kernel=10**9, cycles_app=2 * 10**9)
    before = TraceSample(0, {}, (), 0, 1, cpu_events={0: {"llc_misses": 10, "llc_references": 10,
                                                          "instructions": 5, "cycles": 5}})
    after = TraceSample(1, {}, (), 0, 1, cpu_events={
        0: {"llc_misses": 110, "llc_references": 410, "instructions": 10**9 + 5, "cycles": 105},
        24: {"llc_misses": 100, "llc_references": 600, "instructions": 10**9, "cycles": 100},
        1: {"llc_misses": 10**6, "llc_references": 10**6, "instructions": 1, "cycles": 1}})
    out = counter_figures([f], before, after, xeon, 0, 2 * 10**9)
    assert out["llc_hit_ratio_kernel"] == 0.9 and out["llc_hit_ratio_app"] == 0.25
    assert out["instructions_kernel_per_gb"] == 2e9 and out["instructions_app_per_gb"] == 3e9
    assert out["cycles_kernel_per_gb"] == 5e8 and out["cycles_app_per_gb"] == 1e9
    # core 0: misses 100 + 100, references 400 + 600 (CPU 1 is another core)
    assert out["app_core_llc_hit_ratio"] == 0.8
    assert out["app_core_instructions_per_gb"] == 1e9 and out["app_core_cycles_per_gb"] == 100
    # without PMU events: None, not 0
    bare = replace(f, llc_references_app=None, llc_misses_app=None)
    none = counter_figures([bare], TraceSample(0, {}, (), 0, 1), TraceSample(1, {}, (), 0, 1),
                           xeon, 0, 10**9)
    assert none["llc_hit_ratio_app"] is None and none["app_core_llc_hit_ratio"] is None
    assert none["app_core_instructions_per_gb"] is None


def test_pmu_table_and_figure_only_with_pmu_figures(xeon, tmp_path):
    r = synthetic(xeon)
    assert "## PMU counters" not in report_md(r, xeon)
    (tmp_path / "none").mkdir()
    assert not any("app_core" in f for f in write_figures(r, str(tmp_path / "none")))
    for c in r["cells"]:
        c.update(llc_hit_ratio_kernel=0.5, llc_hit_ratio_app=0.25, app_core_llc_hit_ratio=0.75,
                 app_core_instructions_per_gb=3e9, app_core_cycles_per_gb=4e9)
    md = report_md(r, xeon)
    assert "## PMU counters" in md and "Software stand-ins" not in md
    assert "| 0 | 1 | same-socket | 50.0% | 25.0% | 75.0% | - | - | 3e+09 | 4e+09 |" in md
    r["capabilities"] = {"counters": "available (software cpu-clock standing in for ...)"}
    assert "**Software stand-ins**" in report_md(r, xeon)
    files = write_figures(r, str(tmp_path))
    assert svg_cells(tmp_path / "app_core_llc_hit.svg") == 9
    assert str(tmp_path / "app_core_instructions_per_gb.png") in files
    rows = list(csv.DictReader(io.StringIO(to_csv(r))))
    assert rows[0]["app_core_llc_hit_ratio"] == "0.75"


def test_the_report_says_where_the_queue_irq_fired(xeon):
    """Host mode records the CPU the flow's queue IRQ fired on: with --method irq it is each
    cell's kernel CPU, a cell where it is not is named as a fault; with xdp it stays put."""
    r = synthetic(xeon)
    assert "Arrival:" not in report_md(r, xeon)   # the lab: no IRQ
    r["config"]["method"] = "irq"
    for c in r["cells"]:
        c["measured_irq_cpu"] = c["kernel_cpu"]
    md = report_md(r, xeon)
    assert "Arrival: the flow's queue IRQ fired mostly on the cell's kernel CPU in 9 of 9 cells " \
           "(on CPU 0, 1, 12)." in md
    r["cells"][0]["measured_irq_cpu"] = 5
    assert "in 8 of 9 cells" in report_md(r, xeon) and "irqbalance?" in report_md(r, xeon)
    r["config"]["method"] = "xdp"
    for c in r["cells"]:
        c["measured_irq_cpu"] = 5
    assert "in 0 of 9 cells (on CPU 5); xdp moves the receive processing, not the arrival." \
        in report_md(r, xeon)
    assert "measured_irq_cpu" in to_csv(r).splitlines()[0]


def test_the_report_says_where_the_flows_napi_polled(xeon):
    """The lab's veth has no IRQ but a NAPI instance where XDP or GRO is on: the CPU it polled on
    is the sender's, a third CPU of an xdp cell; a cell without polls (backlog) is left out."""
    r = synthetic(xeon)
    r["config"]["method"] = "xdp"
    for c in r["cells"]:
        c["measured_poll_cpu"] = 12
    r["cells"][0]["measured_poll_cpu"] = None
    md = report_md(r, xeon)
    assert "Arrival: the flow's NAPI instance polled mostly on the cell's kernel CPU in 3 of 8 " \
           "cells (on CPU 12); xdp moves the receive processing, not the arrival." in md
    assert "queue IRQ" not in md
    assert "measured_poll_cpu" in to_csv(r).splitlines()[0]


def test_latency_figures_of_runs_make_the_cells_the_class_table_and_the_chart(xeon, tmp_path):
    """--latency: a cell's wait figures are the medians of its runs' quantiles, its cross-core
    share of wake-ups that of all its runs; the report has a table by class and per cell, the
    CSV the columns, the figures a chart; a sweep without them has none of it."""
    def run(p50, p99, wakes, cross):
        return {"throughput_bps": GBPS, "wait_samples": 100, "wait_lost": 0,
                "wait_p50_us": p50, "wait_p90_us": p50 * 2, "wait_p99_us": p99,
                "wakeups": wakes, "cross_core_wakeups": cross, "wakeup_p50_us": 5.0,
                "wakeup_p90_us": 8.0, "wakeup_p99_us": 20.0}
    res = synthetic(xeon)
    for c in res["cells"]:
        same = c["kernel_cpu"] == c["app_cpu"]
        runs = [run(40.0 if same else 20.0, 400.0, 10, 0 if same else 10),
                run(60.0 if same else 30.0, 600.0, 30, 0 if same else 20)]
        c.update(summarize(c["kernel_cpu"], c["app_cpu"], runs, xeon))
    cell = next(c for c in res["cells"] if c["kernel_cpu"] == 0 and c["app_cpu"] == 1)
    assert cell["wait_p50_us"] == 25.0 and cell["wait_p99_us"] == 500.0
    assert cell["wait_samples"] == 200 and cell["wakeups"] == 40
    assert cell["cross_core_wakeup_share"] == pytest.approx(30 / 40)
    same = next(c for c in res["cells"] if c["kernel_cpu"] == c["app_cpu"] == 0)
    assert same["cross_core_wakeup_share"] == 0 and same["wait_p50_us"] == 50.0
    md = report_md(res, xeon)
    assert "## Receive wait by class" in md
    assert "| same-core | 3 | 600 | 50.0 | 100.0 | 500.0 | 5.0 | 20.0 | 0% |" in md, md
    assert "| 0 | 1 | same-socket | 200 | 25.0 | 500.0 | 40 | 5.0 | 75% |" in md, md
    rows = list(csv.DictReader(io.StringIO(to_csv(res))))
    assert rows[0]["wait_p50_us"] == "50.0" and rows[0]["cross_core_wakeup_share"] == "0.0"
    files = write_figures(res, str(tmp_path))
    assert str(tmp_path / "waits_by_class.svg") in files
    assert "waits-same-core-wait_p99_us" in open(tmp_path / "waits_by_class.svg").read()
    plain = synthetic(xeon)
    assert "Receive wait" not in report_md(plain, xeon)
    (tmp_path / "plain").mkdir()
    assert not any(f.endswith("waits_by_class.svg")
                   for f in write_figures(plain, str(tmp_path / "plain")))
    assert list(csv.DictReader(io.StringIO(to_csv(plain))))[0]["wait_p50_us"] == ""
