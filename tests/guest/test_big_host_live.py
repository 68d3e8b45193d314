"""Live tests for a bigger host than this dev VM (#32): two sockets of eight cores each, in the
qemu guest of tests/guest/vm/run.py --cores 8 (tests/guest/test_guest_live.py boots it). The
tracer on 16 CPUs, steer top at 80x24 with 16 CPUs above the flows, the sweep's default CPU
selection planned and three of its CPUs swept, steer auto's llc-peer policy on a cross-socket flow, and the exporter
folded by socket. Each test runs wherever its condition holds (a real server too) and is
skipped elsewhere."""
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from autolog import AutoLog
from helpers import ROOT, STEER, live, screen_until, steer, tmux
from kernel_scale import in_a_guest, measure_and_check
from steer.experiment.lab import Lab, LabFlow
from steer.model.classify import classify
from steer.model.flows import build_snapshot
from steer.model.topology import read_topology
from steer.trace.tracer import Tracer
from witness import TraceEvents
from web import free_port, http_get, stop_all, wait_http

pytestmark = live
TOPO = read_topology()
SOCKETS = sorted({c.socket for c in TOPO.cpus.values() if c.online})
BIG = len(SOCKETS) >= 2 and len(TOPO.online) >= 16
big_host = pytest.mark.skipif(not BIG, reason="needs two sockets and 16 CPUs "
                                              "(tests/guest/vm/run.py --cores 8)")
ENV = dict(os.environ, PYTHONPATH=ROOT)


def _on(socket: int, nth: int = 0) -> int:
    return sorted(c.cpu for c in TOPO.cpus.values() if c.online and c.socket == socket)[nth]


READER, SENDER = (_on(SOCKETS[0]), _on(SOCKETS[-1], 1)) if BIG else (0, 0)
# iperf3's pace for the flows of tests that time no throughput: under TCG a flow at full rate
# takes all of the guest's one emulation thread, and steer's start and every read behind it
PACED = ("-b", "200M")


def _flow(flows: list[dict], r) -> dict:
    (f,) = [f for f in flows if f["sport"] == r.sender_port and f["dport"] == r.flow.port]
    return f


def _traced(seconds: float, flows: list[LabFlow], before_traffic=None):
    """The tracer (started first: under TCG a command takes seconds to load) over a lab run of
    FLOWS: the lab's results and the snapshot of the whole run, as JSON dicts."""
    tracer = Tracer(sample_hz=199).start()
    try:
        with Lab(flows, seconds=seconds, client_args=PACED) as lab:
            lab.start_servers()
            a = tracer.sample()
            lab.start_clients()
            results = lab.wait(timeout=seconds + 60)
            time.sleep(0.3)
            b = tracer.sample()
        snap = build_snapshot(a, b, TOPO, tracer.capabilities)
    finally:
        tracer.stop()
    return results, snap.as_json()


@big_host
def test_the_tracer_on_sixteen_cpus_names_the_cross_socket_placement():
    """A flow received on one socket and read on the other: bytes against iperf3's, both CPUs,
    class cross-socket, a row per CPU."""
    (r,), j = _traced(4, [LabFlow(SENDER, READER)])
    f = _flow(j["flows"], r)
    print(f"16 CPUs: iperf3 {r.received_bytes} B, steer {f['rx_bytes']} B, CPUs "
          f"{f['kernel_cpu']}/{f['app_cpu']} {f['class']}; {len(j['cpus'])} CPUs in the snapshot")
    assert len(j["cpus"]) == len(TOPO.online)
    assert abs(f["rx_bytes"] / r.received_bytes - 1) < 0.02
    assert (f["kernel_cpu"], f["app_cpu"], f["class"]) == (SENDER, READER, "cross-socket")


@big_host
def test_top_shows_the_flow_at_80x24_below_sixteen_cpus():
    if not shutil.which("tmux"):
        pytest.skip("tmux not installed")
    session = f"steerbig{os.getpid()}"
    cmd = (f"env -u COLUMNS -u LINES PYTHONPATH={ROOT} {' '.join(STEER)} top --interval 1 "
           "--sample-hz 199; sleep 60")
    with Lab([LabFlow(SENDER, READER)], seconds=40, client_args=PACED) as lab:
        lab.start_servers()
        tmux("new-session", "-d", "-s", session, "-x", "80", "-y", "24", cmd)
        try:
            # the traffic starts once top draws: under TCG top took so long to start once that
            # the 40 s flow was over before its first screen (2026-11-26, CI: idle flows only)
            screen_until(session, lambda s: re.search(r"^steer .*CPUs", s, re.M), timeout=90)
            lab.start_clients()
            screen = screen_until(session, lambda s: re.search(r":5201\s.*[MG]bit/s", s)
                                  and "cross-socket" in s, timeout=60)
            print(screen)
            lines = screen.splitlines()
            assert len(lines) <= 24 and all(len(l) <= 80 for l in lines)
            assert re.search(r":5201\s.*[MG]bit/s", screen), "no flow row at 80x24"
            assert "cross-socket" in screen
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


@big_host
def test_sweep_default_selection_is_bounded_covers_every_class_and_runs():
    """steer sweep's default CPUs on 16: a bounded plan that holds every class, its time said
    before it starts; and a sweep of three of its CPUs (a CPU, one sharing its socket, one of the
    other socket: 9 cells, where the plan's 16 took 112 s under TCG) runs every cell, each cell's
    receive work measured on the CPU the cell put it on, every class among them."""
    r = steer("sweep", "--plan", "--seconds", "1", timeout=120)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    print(f"sweep plan on {len(TOPO.online)} CPUs: CPUs {plan['cpus']} ({plan['why']}), "
          f"{plan['cells']} cells {plan['classes']}, estimated {plan['estimated_seconds']} s")
    assert {"same-core", "same-socket", "cross-socket"} <= set(plan["classes"])
    assert plan["cells"] <= 64 and plan["estimated_seconds"] > 0
    first = plan["plan"][0]["kernel_cpu"]
    peers = [next(c["app_cpu"] for c in plan["plan"]
                  if c["kernel_cpu"] == first and c["class"] == cls)
             for cls in ("same-socket", "cross-socket")]
    cpus = [first, *peers]
    out = os.path.join(ROOT, "build", "big-host-sweep")
    shutil.rmtree(out, ignore_errors=True)
    t = time.monotonic()
    # no figures: under TCG they took longer than half of the cells (the host's tier draws them)
    r = steer("sweep", "--out", out, "--cpus", ",".join(map(str, cpus)), "--seconds", "1",
              "--no-figures", timeout=1500)
    took = time.monotonic() - t
    assert r.returncode == 0, r.stderr[-3000:]
    with open(os.path.join(out, "results.json")) as f:
        done = json.load(f)["cells"]
    print(f"sweep of CPUs {cpus} ran {len(done)} cells in {took:.0f} s")
    for c in done:
        print(f"kernel {c['kernel_cpu']} app {c['app_cpu']}: {c['class']}, "
              f"{c['throughput_bps'] / 1e9:.2f} Gbit/s, measured kernel CPU "
              f"{c['measured_kernel_cpu']}")
    assert len(done) == len(cpus) ** 2
    assert {c["class"] for c in done} == {"same-core", "same-socket", "cross-socket"}
    # each cell's receive work ran where the cell put it (RPS), as the tracer saw it
    assert all(c["measured_kernel_cpu"] == c["kernel_cpu"] for c in done), done


@big_host
def test_auto_llc_peer_moves_a_cross_socket_flow_to_the_readers_socket():
    """steer auto (llc-peer) on a flow sent from the other socket than its reader's: the move goes
    to another core of the reader's socket, and while it stands the flow's skbs go up the stack
    there, by tracefs (net:netif_receive_skb, a witness that shares no code with steer; where
    steer's own snapshot puts a steered flow's stack is tested on the host, test_steering_live).
    The verdict may be any of the three: under TCG the move has cut the flow to a third (1.18 to
    0.39 Gbit/s, 2026-11-27) and auto put it back, as it should; the verdicts are held to iperf3's
    rate in tests/live/test_verdicts_live.py. The witness's window comes right after the move,
    which stands at least its settling interval and the window after it (three intervals, 6 s)
    before any verdict. No tracer of the test's own runs beside auto's: with one at 199 Hz on
    the 16 vCPUs, no move came within 90 s once (CI, 2026-11-27; the cause not shown: auto
    logged nothing after its first line), and without one the guest has less to emulate."""
    with Lab([LabFlow(SENDER, READER)], seconds=300, client_args=PACED) as lab:
        lab.start_servers()
        lab.start_clients()
        p = subprocess.Popen([*STEER, "auto", "--dev", "veth-rx", "--netns", lab.rx,
                              "--interval", "2", "--duration", "280", "--hold", "10",
                              "--window", "2", "--sample-hz", "199", "--log-format", "json"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)
        log = AutoLog(p)
        events = log.events
        witness = TraceEvents("veth-rx")
        try:
            # under TCG auto takes 5 to 20 s to start alone, and the move needs three intervals
            # of the flow (the window before it, and one to see it). With the host's faults and
            # kills run beside the guests (clean clones 167 and 168; undone) its first line came
            # after 150 s and 270 s: the waits are for a move at all, not for its speed, and
            # the flow outlasts them
            started = log.wait_for(lambda e: True, timeout=120)
            witness.start()
            move = log.wait_for(lambda e: e.get("event") == "move", timeout=150)
            before = witness.stop()
            running = [c.poll() is None for c in lab._clients.values()]
            assert move, (started, events, f"iperf3 clients running: {running}")
            skbs = witness.count(2)
            counted = time.monotonic()
            verdict = log.wait_for(lambda e: e.get("event") == "verdict", timeout=60)
            time.sleep(1)   # an undo follows its verdict
        finally:
            witness.close()
            p.terminate()
            p.wait(timeout=60)
            log.join()
        lab.stop_traffic()
    for e in events:
        print(json.dumps({k: v for k, v in e.items() if k != "seen"}))
    target = move["new_cpu"]
    socket_of = {c.cpu: c.socket for c in TOPO.cpus.values()}
    # the CPU auto moved the flow from is one where its skbs went up the stack before the move,
    # by tracefs. Not always the sender's: the reader's ACKs make the sender transmit from the
    # softirq that takes them, on the reader's CPU, and what it sends there goes up the stack
    # there too (CI 2026-12-01: auto moved the flow from the reader's CPU 0, not the sender's 9).
    # auto's stack CPU is its last interval's (most skbs), which may not be the span's; a CPU
    # with under 5% of the span's skbs (the floor of "elsewhere" below) is a misreading: one
    # calm run had 2,773 on the sender's CPU, 78 on the target's (its first redirects), 7 on
    # the reader's
    print(f"the veth's skbs up the stack by CPU before the move (tracefs): {before}")
    if move["old_cpu"] is not None:
        assert before.get(move["old_cpu"], 0) > 0.05 * sum(before.values()), (move, before)
    assert socket_of[target] == socket_of[READER] and target != READER, move
    assert classify(target, READER, TOPO).cls == "same-socket"
    undone = [e for e in events if e.get("event") == "undo" and e["seen"] <= counted]
    assert not undone, "the move was undone before the witness's window ended"
    # tracefs: the skbs go up the stack on the target (the cpumap kthread) and, with generic
    # XDP, a first time where they arrive before the redirect: the sender's CPU, and the
    # reader's, whose ACKs make the sender transmit from its softirq (1,680 of 8,163 there once
    # under TCG, CI 2026-11-27); nowhere else. Counts of every skb, not samples: no sampling odds.
    # Each data skb goes up once where it arrives and once on the target, so the target holds
    # about half of them by the kernel's own path (3,502 and 3,364 of 6,883 in one run), five
    # times the bound; the 5% floor for "elsewhere" is what no CPU but these three has reached
    total = sum(skbs.values())
    print(f"moved to CPU {target}; the veth's skbs up the stack by CPU (tracefs): {skbs}")
    assert total > 200, skbs
    assert skbs.get(target, 0) >= 0.1 * total, skbs
    assert {c for c, n in skbs.items() if n > 0.05 * total} <= {SENDER, target, READER}, skbs
    assert verdict and verdict["verdict"] in ("kept", "reverted", "inconclusive"), verdict
    assert (verdict["from_cpu"], verdict["to_cpu"]) == (move["old_cpu"], target), verdict
    print(f"verdict: {verdict['verdict']}: {verdict['why']}")
    if verdict["verdict"] == "reverted":
        assert verdict["undone"] is True
        assert any(e.get("event") == "undo" for e in events), events


def _scrape(url: str) -> tuple[float, dict]:
    """One scrape of the exporter at URL, parsed: (when it was asked, families by name). A minute
    to answer: under TCG 16 vCPUs share the host's 2 with iperf3 and the other tier's guest."""
    from prometheus_client.parser import text_string_to_metric_families
    asked = time.monotonic()
    body = http_get(url, timeout=60).decode()
    return asked, {f.name: f for f in text_string_to_metric_families(body)}


@big_host
def test_exporter_folded_by_socket_on_sixteen_cpus(tmp_path):
    """steer export --cpu-labels socket on 16 CPUs, scraped twice 8 s apart while a cross-socket
    flow runs: a per-CPU series per socket, not per CPU, and the flow's bytes in its class.
    Scraped here as Prometheus would, not by a Prometheus server: under TCG a scrape's time is
    the emulation's (the slowest took 2-4.6 s beside the other guest, so a server's timeouts
    failed half the scrapes in clean clone 148 and CI on 2026-12-01), and the host's suite runs
    a real Prometheus against the exporter (tests/live/test_exporter_live.py). What a scrape
    costs on 16 CPUs is measured idle: tests/guest/kernel_scale.py, ~0.15-0.2 s in this guest."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    with Lab([LabFlow(SENDER, READER)], seconds=40, client_args=PACED) as lab:
        lab.start_servers()
        exporter = subprocess.Popen([*STEER, "export", "--listen", f"127.0.0.1:{port}",
                                     "--cpu-labels", "socket", "--sample-hz", "199"],
                                    env=ENV, cwd=ROOT, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True)
        try:
            wait_http(url, exporter, timeout=120)   # TCG
            lab.start_clients()
            time.sleep(4)
            t0, first = _scrape(url)
            time.sleep(8)
            t1, second = _scrape(url)
        finally:
            stop_all([exporter], timeout=20)
            lab.stop_traffic()

    def cross_bytes(families) -> float:
        return sum(s.value for s in families["steer_class_rx_bytes"].samples
                   if s.name.endswith("_total") and s.labels.get("class") == "cross-socket")

    rate = (cross_bytes(second) - cross_bytes(first)) * 8 / (t1 - t0)
    cpus = {s.labels["cpu"] for s in second["steer_cpu_kernel_seconds"].samples}
    print(f"scrapes: cross-socket {rate / 1e9:.2f} Gbit/s; per-CPU series by {sorted(cpus)}")
    assert rate > 1e6
    assert cpus == {f"socket{s}" for s in SOCKETS}


@in_a_guest
@big_host
def test_the_kernels_part_of_a_read_and_a_scrape_on_sixteen_cpus():
    measure_and_check()
