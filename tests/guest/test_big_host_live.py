"""Live tests for a bigger host than this dev VM (#32): two sockets of eight cores each, in the
qemu guest of tests/guest/vm/run.py --cores 8 (tests/guest/test_guest_live.py boots it). The
tracer on 16 CPUs, steer top at 80x24 with 16 CPUs above the flows, the sweep's default CPU
selection planned and run, steer auto's llc-peer policy on a cross-socket flow, and the exporter
scraped by Prometheus. Each test runs wherever its condition holds (a real server too) and is
skipped elsewhere."""
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from helpers import ROOT, STEER, live, screen_until, steer, tmux
from kernel_scale import in_a_guest, measure_and_check
from steer.experiment.lab import Lab, LabFlow
from steer.model.classify import classify
from steer.model.flows import build_snapshot
from steer.model.topology import read_topology
from steer.trace.tracer import Tracer
from web import free_port, prometheus, query, stop_all, wait_http

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


def _flow(flows: list[dict], r) -> dict:
    (f,) = [f for f in flows if f["sport"] == r.sender_port and f["dport"] == r.flow.port]
    return f


def _traced(seconds: float, flows: list[LabFlow], before_traffic=None):
    """The tracer (started first: under TCG a command takes seconds to load) over a lab run of
    FLOWS: the lab's results and the snapshot of the whole run, as JSON dicts."""
    tracer = Tracer(sample_hz=199).start()
    try:
        with Lab(flows, seconds=seconds) as lab:
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
    with Lab([LabFlow(SENDER, READER)], seconds=40) as lab:
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
    before it starts, and the sweep itself runs every cell of it, each cell's receive work
    measured on the CPU the cell put it on, every class among them."""
    r = steer("sweep", "--plan", "--seconds", "1", timeout=120)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    print(f"sweep plan on {len(TOPO.online)} CPUs: CPUs {plan['cpus']} ({plan['why']}), "
          f"{plan['cells']} cells {plan['classes']}, estimated {plan['estimated_seconds']} s")
    assert {"same-core", "same-socket", "cross-socket"} <= set(plan["classes"])
    assert plan["cells"] <= 64 and plan["estimated_seconds"] > 0
    out = os.path.join(ROOT, "build", "big-host-sweep")
    shutil.rmtree(out, ignore_errors=True)
    t = time.monotonic()
    r = steer("sweep", "--out", out, "--seconds", "1", timeout=1500)
    took = time.monotonic() - t
    assert r.returncode == 0, r.stderr[-3000:]
    with open(os.path.join(out, "results.json")) as f:
        done = json.load(f)["cells"]
    print(f"sweep ran {len(done)} cells in {took:.0f} s (estimated {plan['estimated_seconds']} s)")
    for c in done:
        print(f"kernel {c['kernel_cpu']} app {c['app_cpu']}: {c['class']}, "
              f"{c['throughput_bps'] / 1e9:.2f} Gbit/s, measured kernel CPU "
              f"{c['measured_kernel_cpu']}")
    assert len(done) == plan["cells"]
    assert {c["class"] for c in done} == {"same-core", "same-socket", "cross-socket"}
    # each cell's receive work ran where the cell put it (RPS), as the tracer saw it
    assert all(c["measured_kernel_cpu"] == c["kernel_cpu"] for c in done), done


@big_host
def test_auto_llc_peer_moves_a_cross_socket_flow_to_the_readers_socket():
    """steer auto (llc-peer) on a flow received on the other socket from its reader: the kernel
    side goes to another core of the reader's socket, and steer flows sees it there."""
    with Lab([LabFlow(SENDER, READER)], seconds=120) as lab:
        lab.start_servers()
        lab.start_clients()
        p = subprocess.Popen([*STEER, "auto", "--dev", "veth-rx", "--netns", lab.rx, "--interval",
                              "2", "--duration", "100", "--hold", "10", "--window", "2",
                              "--sample-hz", "199"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)
        # under TCG steer auto takes from 5 to 20 s to start: the move is waited for from its
        # first line on (a line at a time: readline blocks)
        log = [p.stderr.readline()]
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and log[-1] and "kernel CPU" not in log[-1]:
            log.append(p.stderr.readline())
        moved_at = time.monotonic()
        # windows of 3 s, up to three: with generic XDP the arrival CPU still runs XDP and the
        # skb's linearising, and under TCG one window gave it more time than the target had
        # (2026-11-26, once in CI: kernel CPU 9, the stack on CPU 1; the next run, CPU 1)
        tracer = Tracer(sample_hz=199).start()
        snaps = []
        try:
            for _ in range(3):
                a = tracer.sample()
                time.sleep(3)
                snaps.append(build_snapshot(a, tracer.sample(), TOPO, tracer.capabilities).as_json())
                if any(f["kernel_cpu"] != SENDER and f["dport"] == lab.flows[0].port
                       for f in snaps[-1]["flows"] if f["src"] == "198.18.0.1"):
                    break
        finally:
            tracer.stop()
        snap = snaps[-1]
        # past the hold (10 s) and two intervals to confirm: time for a second move, if any
        time.sleep(max(0.0, moved_at + 16 - time.monotonic()))
        p.terminate()
        err = "".join(log) + p.communicate(timeout=60)[1]
        port = lab.flows[0].port
        lab.stop_traffic()
    print(err)
    moves = [m for m in (re.search(rf"kernel CPU {SENDER} -> CPU (\d+)", l)
                         for l in err.splitlines()) if m]
    assert moves, err[-3000:]
    target = int(moves[0].group(1))
    # the move stands: judged by its kernel CPU (still the arrival CPU's XDP and linearising) the
    # flow went on 1 -> 2 ten seconds later (2026-11-26, CI); the policies judge by its stack CPU
    assert len(re.findall(r"kernel CPU \d+ -> CPU \d+", err)) == 1, err
    socket_of = {c.cpu: c.socket for c in TOPO.cpus.values()}
    assert socket_of[target] == socket_of[READER] and target != READER, err
    assert classify(target, READER, TOPO).cls == "same-socket"
    mine = [f for f in snap["flows"] if f["dport"] == port and f["src"] == "198.18.0.1"]
    assert mine, [(f["src"], f["sport"], f["dport"], f["rx_bytes"]) for f in snap["flows"]]
    f = max(mine, key=lambda f: f["rx_bytes"])
    print(f"after the move ({len(snaps)} windows): kernel CPU {f['kernel_cpu']}, stack CPU "
          f"{f['stack_cpu']}, app CPU {f['app_cpu']}, {f['class']}")
    assert f["stack_cpu"] == target, (mine, snap["cpus"])   # its skbs go up the stack there
    # its kernel time: on the target (the stack), the arrival CPU (generic XDP and the skb's
    # linearising, which under TCG took the most in all three windows once: 2026-11-26, CI) and
    # the reader's (the socket's backlog, run as the reader releases it), nowhere else; its
    # class follows the CPU that had the most
    ks = {int(c): s for c, s in f["kernel_cpus"].items()}
    total = sum(ks.values())
    assert {c for c, s in ks.items() if s > 0.05 * total} <= {SENDER, target, READER}, ks
    assert ks.get(target, 0) >= 0.1 * total, ks
    assert (f["kernel_cpu"], f["class"]) in ((target, "same-socket"), (SENDER, "cross-socket")), f


@big_host
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed")
def test_exporter_folded_by_socket_scraped_by_prometheus(tmp_path):
    """steer export --cpu-labels socket on 16 CPUs, scraped every 2 s by a real Prometheus: a
    per-CPU series per socket, not per CPU, and the cross-socket flow's bytes in its class. Half
    the scrapes, not each, must succeed: under TCG 16 vCPUs share this host's 2 while iperf3 runs,
    and a scrape can outlast its timeout (CI, 2026-11-26: the last of a 1 s interval; then by hand
    1 of 7 at 2 s). What one costs on 16 CPUs is measured idle: tests/guest/kernel_scale.py,
    ~0.15 s in this guest."""
    p_export, p_prom = free_port(), free_port()
    procs = []
    with Lab([LabFlow(SENDER, READER)], seconds=40) as lab:
        lab.start_servers()
        try:
            exporter = subprocess.Popen([*STEER, "export", "--listen", f"127.0.0.1:{p_export}",
                                         "--cpu-labels", "socket", "--sample-hz", "199"],
                                        env=ENV, cwd=ROOT, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True)
            procs.append(exporter)
            wait_http(f"http://127.0.0.1:{p_export}/metrics", exporter, timeout=120)   # TCG
            prom = prometheus(tmp_path, [f"127.0.0.1:{p_export}"], p_prom, interval="2s")
            procs.append(prom)
            url = f"http://127.0.0.1:{p_prom}"
            wait_http(f"{url}/-/ready", prom, timeout=120)
            lab.start_clients()
            time.sleep(20)   # rates need a few scrapes
            cross = query(url, 'sum(rate(steer_class_rx_bytes_total{class="cross-socket"}[16s]))')
            cpus = {s["metric"]["cpu"] for s in
                    query(url, "last_over_time(steer_cpu_kernel_seconds_total[16s])")}
            up = query(url, 'avg_over_time(up{job="steer"}[16s])')
            slowest = query(url, 'max_over_time(scrape_duration_seconds{job="steer"}[16s])')
        finally:
            stop_all(procs, timeout=20)
            lab.stop_traffic()
    rate = float(cross[0]["value"][1]) * 8 if cross else 0.0
    ok = float(up[0]["value"][1]) if up else 0.0
    print(f"Prometheus: cross-socket {rate / 1e9:.2f} Gbit/s; per-CPU series by {sorted(cpus)}; "
          f"{ok:.0%} of scrapes up, the slowest {slowest[0]['value'][1] if slowest else '-'} s")
    assert ok >= 0.5
    assert rate > 1e6
    assert cpus == {f"socket{s}" for s in SOCKETS}


@in_a_guest
@big_host
def test_the_kernels_part_of_a_read_and_a_scrape_on_sixteen_cpus():
    measure_and_check()
