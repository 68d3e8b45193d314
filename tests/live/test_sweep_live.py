"""The sweep, live: a 2x2 sweep in the lab (2 s per cell) writes every file with consistent
content; Ctrl-C keeps the finished cells and tears the lab down; --resume finishes the rest."""
import csv
import json
import os
import signal
import subprocess
import time

import pytest

from helpers import CPU_A, CPU_B, ROOT, STEER, assert_one_line_error, live, steer, two_cpus
from steer.experiment.hostconfig import RECEIVER_TCP
from steer.experiment.lab import RECEIVER_DEV, lab_namespaces
from test_report import png_size, svg_cells

pytestmark = [live, two_cpus]
A, B = CPU_A, CPU_B
PAIR = f"{A},{B}"
EXPECTED = {(A, A): "same-core", (A, B): "same-socket", (B, A): "same-socket", (B, B): "same-core"}


def _check_outputs(out, stand_ins=False):
    """STAND_INS: the sweep ran with --counters software."""
    r = json.load(open(f"{out}/results.json"))
    cells = {(c["kernel_cpu"], c["app_cpu"]): c for c in r["cells"]}
    assert set(cells) == set(EXPECTED) and r["complete"]
    for key, cls in EXPECTED.items():
        c = cells[key]
        assert c["class"] == cls
        assert c["measured_kernel_cpu"] == key[0] and c["measured_app_cpu"] == key[1], c
        assert c["measured_stack_cpu"] == key[0], c
        assert c["throughput_bps"] > 1e8 and c["kernel_seconds_per_gb"] > 0
        assert c["app_seconds_per_gb"] > 0
        run = c["runs"][0]
        # iperf3's receiver count and the tracer's bytes read agree
        assert abs(run["app_bytes"] - run["iperf3_received_bytes"]) < 0.005 * run["iperf3_received_bytes"]
        # the receiving namespace's TCP counters moved by this run only. A veth loses nothing:
        # no segment out of order. A duplicate is a segment the sender sent again though it had
        # arrived: a tail loss probe or a timeout while the host stalled the receiver (two
        # clean clones under heavy steal read 1), so at most what the sending namespace sent
        # again, read after the receiver's counters. iperf3's own count is not that bound (a
        # clean clone read a duplicate with it at 0): it ends at its last reading of the data
        # sockets, and leaves out its control connection
        tcp = run["receiver_tcp"]
        assert tcp["out_of_order"] == 0 and tcp["duplicates"] <= run["sender_retransmits"], run
        assert run["retransmits"] <= run["sender_retransmits"], run
    # the receiving veth's configuration, read in its namespace before the sweep touched it
    dev = r["host"]["config"]["device"]
    assert dev["name"] == RECEIVER_DEV and dev["netns"] and "error" not in dev, dev
    assert dev["locality"] == "none: a virtual device" and dev["numa_node"] is None
    assert dev["mtu"] == 1500 and dev["rps"]["state"] == "off" and dev["rx_queues"] >= 1
    assert dev["congestion_control"] in open("/proc/sys/net/ipv4/tcp_available_congestion_control").read().split()
    assert set(dev["offloads"]) == {"gro", "gro-hw", "lro", "tso", "gso"}
    assert dev["channels"]["current"]["rx"] >= 1                  # veth answers ethtool -l
    assert dev["pause"].startswith("unsupported")                 # and has no pause frames
    assert r["host"]["config"]["irqbalance"] in ("not running",) or \
        r["host"]["config"]["irqbalance"].startswith("running")
    assert all(c["nic_local"] == {"kernel": None, "app": None} for c in r["cells"])
    rows = list(csv.DictReader(open(f"{out}/results.csv")))
    assert len(rows) == 4 and {(int(x["kernel_cpu"]), int(x["app_cpu"])) for x in rows} == set(EXPECTED)
    for name in ("throughput", "cpu_per_gb", "throughput_by_class"):
        w, h = png_size(f"{out}/{name}.png")
        assert w > 100 and h > 100
    assert svg_cells(f"{out}/throughput.svg") == 4 and svg_cells(f"{out}/cpu_per_gb.svg") == 4
    md = open(f"{out}/report.md").read()
    assert "## Throughput by class" in md and "| same-core | 2 |" in md and "| same-socket | 2 |" in md
    assert "## Best placement" in md and "llc-peer" in md and "theirs, not measured here" in md
    if stand_ins:
        for c in r["cells"]:
            # the reader's whole core (cpu-clock: wall time) covers at least its receive time;
            # references and misses are the same clock: a hit ratio of about 0
            assert c["app_core_cycles_per_gb"] / 1e9 >= c["app_seconds_per_gb"], c
            assert c["app_core_instructions_per_gb"] > 0 and c["app_core_llc_hit_ratio"] < 0.01, c
            # exact timing charges LLC misses alone to the flows' sides
            assert c["llc_hit_ratio_app"] is None and c["instructions_app_per_gb"] is None, c
        assert "## PMU counters" in md and "**Software stand-ins**" in md
        assert svg_cells(f"{out}/app_core_llc_hit.svg") == 4
        assert rows[0]["app_core_instructions_per_gb"]
    elif not r["capabilities"]["counters"].startswith("available"):
        assert all(c["app_core_llc_hit_ratio"] is None for c in r["cells"])
        assert "## PMU counters" not in md and not os.path.exists(f"{out}/app_core_llc_hit.png")
    return r


def test_two_by_two_sweep(tmp_path):
    """A 2x2 sweep with software counters, --profile and --latency (one sweep for all: each took
    10 s of the suite): every file, the stand-ins' figures, and every cell saying where its CPU
    went, each side's shares of its categories adding up to 1, the kernel side of a veth flow
    copying nothing, and the report's table; and how long its data waited, with the reader's
    wake-ups by it from another core where the cell put the stack on another CPU than the reader
    (RPS; the cell's measured CPUs say it did), all but 1%, and none where it put both on one
    (test_latency_live's bounds): the wake-up's CPU against the reader's, which the tracer reads
    at different events (sock:sk_data_ready's CPU, then sched_switch's). How long the waits are is held to the reader's own clock in
    test_latency_live."""
    out = str(tmp_path / "sweep")
    r = subprocess.run([*STEER, "sweep", "--out", out, "--cpus", PAIR, "--seconds", "2",
                        "--counters", "software", "--profile", "--latency"],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT),
                       cwd=ROOT, timeout=240)
    assert r.returncode == 0, r.stderr
    results = _check_outputs(out, stand_ins=True)
    md = open(f"{out}/report.md").read()
    print(md)
    assert not [n for n in lab_namespaces() if f"-{os.getpid()}-" not in n]
    assert results["config"]["method"] == "rps"
    assert results["config"]["profile"] is True
    for c in results["cells"]:
        p = c["profile"]
        assert p["samples"] > 100, c
        for side in ("kernel", "app"):
            assert p[f"{side}_seconds"] > 0, (side, c)
            assert sum(p[side].values()) == pytest.approx(1.0), (side, p)
        assert p["kernel"]["data_copy"] < 0.05, p
    assert "## Where the CPU went (steer profile)" in md
    assert md.count("| kernel |") >= 4 and md.count("| app |") >= 4
    assert results["config"]["latency"] is True
    for c in results["cells"]:
        print(f"cell {c['kernel_cpu']}:{c['app_cpu']}: wait p50 {c['wait_p50_us']} us p99 "
              f"{c['wait_p99_us']} us ({c['wait_samples']} samples), {c['wakeups']} wake-ups, "
              f"{c['cross_core_wakeup_share']} from another core")
        assert c["wait_samples"] > 100 and 0 < c["wait_p50_us"] <= c["wait_p99_us"], c
        assert c["wakeups"] > 0, c
        apart = c["kernel_cpu"] != c["app_cpu"]
        share = c["cross_core_wakeup_share"]
        assert (share >= 0.99) if apart else (share <= 0.01), c
    assert "## Receive wait by class" in md
    w, h = png_size(f"{out}/waits_by_class.png")
    assert w > 100 and h > 100


def test_interrupt_keeps_cells_and_resume_finishes(tmp_path):
    out = str(tmp_path / "sweep")
    args = [*STEER, "sweep", "--out", out, "--cpus", PAIR, "--seconds", "2"]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT)
    path = f"{out}/results.json"
    end = time.monotonic() + 120
    while time.monotonic() < end:
        try:
            if json.load(open(path))["cells"]:
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 130, stderr
    assert "--resume" in stdout
    partial = json.load(open(path))
    assert 1 <= len(partial["cells"]) < 4 and not partial["complete"]
    assert "Incomplete" in open(f"{out}/report.md").read()
    assert not any(f"-{p.pid}-" in n for n in lab_namespaces())
    assert subprocess.run(["pgrep", "-f", "iperf3 -s -1 -B 198.18"], capture_output=True).returncode == 1
    # running again without --resume is refused; with it, the sweep completes
    assert_one_line_error(steer("sweep", "--out", out, "--cpus", PAIR, "--seconds", "2"),
                          "already holds a sweep")
    assert_one_line_error(steer("sweep", "--out", out, "--cpus", PAIR, "--seconds", "3", "--resume"),
                          "other settings")
    r = subprocess.run([*args, "--resume"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT, timeout=240)
    assert r.returncode == 0, r.stderr
    done = _check_outputs(out)
    assert done["cells"][:len(partial["cells"])] == partial["cells"]


def test_bad_sweep_arguments():
    assert_one_line_error(steer("sweep", "--out", "/tmp/x", "--dev", "lo"), "--dev and --server-cmd",
                          code=2)
    assert_one_line_error(steer("sweep", "--out", "/tmp/x", "--cpus", f"{A},77"), "CPU 77 does not exist")


def test_the_irq_method_refuses_a_device_without_irqs(tmp_path):
    """The papers' method needs a NIC queue IRQ to move (the guest's virtio-net has them:
    tests/guest/test_vm_live.py); loopback has none, and the sweep says so before it starts anything."""
    r = steer("sweep", "--out", str(tmp_path / "s"), "--method", "irq", "--dev", "lo",
              "--server-cmd", "iperf3 -s -p 5301", "--port", "5301", "--seconds", "1")
    assert_one_line_error(r, "--method irq: lo has no receive IRQs of its own", "--method xdp")
    assert not (tmp_path / "s" / "results.json").exists()


def _host_sweep(lab, out, *options, stop=None, figures=False):
    """`steer sweep --dev veth-rx` as on a real host, the 'other machine' being LAB's sending
    namespace, whose client keeps sending from when the server listens: (exit code, stderr).
    STOP: a signal sent once results.json holds a cell. FIGURES: draw them too."""
    from steer.experiment.lab import _in_netns
    sweep = subprocess.Popen(
        [*STEER, "sweep", "--out", out, "--dev", "veth-rx", "--netns", lab.rx, "--port", "5301",
         "--server-cmd", "iperf3 -s -p 5301 -B 198.18.0.2",
         *([] if figures else ["--no-figures"]), *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT)
    client = None
    end = time.monotonic() + 30
    while client is None and time.monotonic() < end and sweep.poll() is None:
        c = subprocess.Popen(["iperf3", "-c", "198.18.0.2", "-p", "5301", "-t", "40"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             preexec_fn=_in_netns(lab.tx, None))
        time.sleep(1)
        if c.poll() is None:
            client = c
    try:
        end = time.monotonic() + 60
        while stop and sweep.poll() is None and time.monotonic() < end:
            try:
                if json.load(open(f"{out}/results.json"))["cells"]:
                    sweep.send_signal(stop)
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        _, stderr = sweep.communicate(timeout=120)
    finally:
        if client:
            client.kill()
            client.wait()
    return sweep.returncode, stderr


def test_real_host_mode_with_an_outside_client(tmp_path):
    """--dev/--server-cmd as on a real host: the 'other machine' is a lab namespace whose client
    keeps sending while the sweep re-pins the receiver and re-steers the flow (XDP) per cell."""
    from steer.experiment.lab import Lab, LabFlow
    out = str(tmp_path / "host")
    with Lab([LabFlow(CPU_A, CPU_A)]) as lab:
        code, stderr = _host_sweep(lab, out, "--cpus", PAIR, "--seconds", "1.5", figures=True)
    assert code == 0, stderr
    r = json.load(open(f"{out}/results.json"))
    assert r["config"]["method"] == "xdp" and r["complete"] and len(r["cells"]) == 4
    for c in r["cells"]:
        assert c["class"] == EXPECTED[(c["kernel_cpu"], c["app_cpu"])]
        # the stack work moved; with generic XDP the arrival CPU may still spend the most time
        assert c["measured_stack_cpu"] == c["kernel_cpu"], c
        assert c["measured_app_cpu"] == c["app_cpu"], c
        assert c["throughput_bps"] > 1e8
        # the other host's retransmits, as this namespace's TCP saw them (none on a veth)
        assert set(c["receiver_tcp"]) == set(RECEIVER_TCP), c
        assert all(v >= 0 for v in c["receiver_tcp"].values()), c
    assert svg_cells(f"{out}/throughput.svg") == 4


MSS = 1500 - 20 - 20 - 12   # the lab veth's MTU less IPv4, TCP and the timestamp option


def _gro(cell):
    return cell["setting"]["offloads"]["gro"]


def test_offloads_axis_in_the_lab(tmp_path):
    """--offloads gro=off,gro=on: each cell under each setting, in that order, the receiving veth
    showing it (ethtool, read back) and the rest as found. The sender's packets come wire-sized
    (iperf3's bytes over the tracer's packets: one MSS each) and GRO on aggregates them (several
    MSS per skb that went up the stack, taken in by the veth's NAPI); GRO off sends every packet
    up alone, through the backlog. The bytes the kernel took in where no BPF program runs on
    this VM kind (bench.unseen, counted by ftrace over the whole sweep) reach iperf3 in packets
    steer cannot count, so they are taken off iperf3's bytes before the division."""
    from bench.unseen import UnseenReceive
    out = str(tmp_path / "sweep")
    witness = UnseenReceive()
    try:
        r = subprocess.run([*STEER, "sweep", "--out", out, "--cpus", str(A), "--seconds", "2",
                            "--offloads", "gro=off,gro=on", "--no-figures"], capture_output=True,
                           text=True, env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT, timeout=300)
        unseen = witness.bytes()
    finally:
        witness.close()
    print(f"unseen by any BPF program: {unseen:,} B ({witness.error or 'ftrace'})")
    assert r.returncode == 0, r.stderr
    res = json.load(open(f"{out}/results.json"))
    found = {f: v.split()[0] for f, v in res["host"]["config"]["device"]["offloads"].items()}
    assert res["complete"] and [_gro(c) for c in res["cells"]] == ["off", "on"]
    for c in res["cells"]:
        run = c["runs"][0]
        got = run["iperf3_received_bytes"]
        print(f"gro {_gro(c)}: {c['throughput_bps'] / 1e9:.2f} Gbit/s, {got / run['rx_packets']:.1f} "
              f"B a packet, {got / run['rx_skbs']:.1f} B an skb, NAPI polls on "
              f"{c['measured_poll_cpu']}, kernel CPU-s/GB {c['kernel_seconds_per_gb']:.3f}")
        assert run["device_state"]["offloads"] == dict(found, gro=_gro(c)), run["device_state"]
        # wire-sized: none bigger than an MSS, and more than half of one on average (a packet
        # counted twice reads half or less). How full they are is the sender's pushes', no
        # figure of steer's: with GRO off a run whose host stole 7% of the CPUs read 1,400 B a
        # packet (clean clone 179) where 0.97 MSS had been the bound, others 1,422-1,442 B. The
        # packets steer saw carried all but the unseen bytes (an unseen skb's length counts its
        # headers too: the bound only loosens); with them counted whole, clean clone 187 read
        # 1,449.6 B a packet against 1,449.4
        assert 0.5 * MSS < got / run["rx_packets"], run
        assert (got - unseen) / run["rx_packets"] <= 1.001 * MSS, (run, unseen)
        assert abs(run["app_bytes"] - got) < 0.005 * got
        if _gro(c) == "off":
            assert run["rx_packets"] == run["rx_skbs"] and c["measured_poll_cpu"] is None, run
        else:
            assert got / run["rx_skbs"] > 4 * MSS and c["measured_poll_cpu"] is not None, run
    md = open(f"{out}/report.md").read()
    assert "The device with gro off, the other settings under Device settings." in md
    assert "| gro off | same-core | 1 |" in md and "| gro on | same-core | 1 |" in md
    rows = list(csv.DictReader(open(f"{out}/results.csv")))
    assert [x["setting"] for x in rows] == ["gro off", "gro on"]
    # --no-figures: the numbers, and no figure drawn
    assert sorted(os.listdir(out)) == ["report.md", "results.csv", "results.json"]
    assert "no-figures" not in r.stdout and "wrote 3 files" in r.stdout
    assert not [n for n in lab_namespaces() if f"-{os.getpid()}-" not in n]


def test_a_setting_the_device_cannot_take_is_refused(tmp_path):
    """A veth's driver fixes LRO off and has no pause frames: said in one line before any cell is
    measured, in the lab and on a host device, and nothing is left running."""
    r = steer("sweep", "--out", str(tmp_path / "lab"), "--cpus", str(A), "--seconds", "1",
              "--offloads", "lro=on,lro=off")
    assert_one_line_error(r, "--offloads: the lab's veth-rx's driver fixes lro off")
    assert not (tmp_path / "lab" / "results.json").exists()
    from steer.experiment.lab import Lab, LabFlow
    with Lab([LabFlow(CPU_A, CPU_A)]) as lab:
        code, stderr = _host_sweep(lab, str(tmp_path / "host"), "--cpus", str(A), "--seconds", "1",
                                   "--pause", "on,off")
    assert code == 1 and len(stderr.strip().splitlines()) == 1, stderr
    assert "--pause: veth-rx has no Ethernet flow control to switch" in stderr
    assert not (tmp_path / "host" / "results.json").exists()
    assert subprocess.run(["pgrep", "-f", "iperf3 -s -p 5301"], capture_output=True).returncode == 1
    assert not [n for n in lab_namespaces() if f"-{os.getpid()}-" not in n]


def test_host_mode_switches_the_offloads_and_puts_them_back(tmp_path):
    """On a host device the setting changes once per setting, under a flow that keeps going, and
    the device is put back as found after (read by ethtool, not by steer); so it is when the
    sweep is stopped with SIGTERM, and when a sweep killed with SIGKILL, which can put nothing
    back, is resumed: the state to put back is the one results.json recorded at its start."""
    from steer.experiment.lab import Lab, LabFlow

    def gro(lab):
        out = subprocess.run(["ip", "netns", "exec", lab.rx, "ethtool", "-k", "veth-rx"],
                             capture_output=True, text=True, check=True).stdout
        return next(x.split(":")[1].strip() for x in out.splitlines()
                    if x.startswith("generic-receive-offload:"))
    out = str(tmp_path / "host")
    with Lab([LabFlow(CPU_A, CPU_A)]) as lab:
        assert gro(lab) == "off"     # a veth's default
        # one CPU, so one cell per setting: the cells of a setting all run under it alike
        code, stderr = _host_sweep(lab, out, "--cpus", str(CPU_A), "--seconds", "1",
                                   "--offloads", "gro=off,gro=on")
        after = gro(lab)
    assert code == 0, stderr
    assert after == "off"
    res = json.load(open(f"{out}/results.json"))
    assert res["complete"] and [_gro(c) for c in res["cells"]] == ["off", "on"]
    for c in res["cells"]:
        assert c["runs"][0]["device_state"]["offloads"]["gro"] == _gro(c)
        assert c["throughput_bps"] > 1e8 and c["measured_app_cpu"] == c["app_cpu"], c
    with Lab([LabFlow(CPU_A, CPU_A)]) as lab:
        code, stderr = _host_sweep(lab, str(tmp_path / "stopped"), "--cpus", PAIR, "--seconds",
                                   "1", "--offloads", "gro=on", stop=signal.SIGTERM)
        after = gro(lab)
    assert code == 143, stderr
    assert after == "off"
    assert 1 <= len(json.load(open(tmp_path / "stopped" / "results.json"))["cells"]) < 4
    killed = str(tmp_path / "killed")
    with Lab([LabFlow(CPU_A, CPU_A)]) as lab:
        options = ("--cpus", PAIR, "--seconds", "1", "--offloads", "gro=on")
        code, stderr = _host_sweep(lab, killed, *options, stop=signal.SIGKILL)
        left = gro(lab)
        # its receiver went with it (else the resumed sweep's could not listen on the port)
        end = time.monotonic() + 5
        while subprocess.run(["pgrep", "-f", "iperf3 -s -p 5301"]).returncode == 0:
            assert time.monotonic() < end, "the killed sweep's server command is still running"
            time.sleep(0.1)
        code2, stderr2 = _host_sweep(lab, killed, *options, "--resume")
        after = gro(lab)
    assert code == -signal.SIGKILL and left == "on"
    assert code2 == 0, stderr2
    assert after == "off"
    assert len(json.load(open(f"{killed}/results.json"))["cells"]) == 4


def test_flows_per_core(tmp_path):
    """--flows 1,3: a matrix of one flow and one of three parallel flows per cell, each flow
    read on the cell's app CPU with its kernel side on the cell's kernel CPU; what the readers got
    (iperf3) is what the tracer counted for the three flows together."""
    out = str(tmp_path / "sweep")
    r = subprocess.run([*STEER, "sweep", "--out", out, "--cpus", PAIR, "--seconds", "2",
                        "--flows", "1,3"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.load(open(f"{out}/results.json"))
    cells = {(c["kernel_cpu"], c["app_cpu"], c["flows"]): c for c in res["cells"]}
    assert set(cells) == {(k, a, n) for (k, a) in EXPECTED for n in (1, 3)} and res["complete"]
    for (k, a, n), c in cells.items():
        run = c["runs"][0]
        assert c["class"] == EXPECTED[(k, a)]
        assert run["traced_flows"] == n, run
        assert c["measured_kernel_cpu"] == k and c["measured_app_cpu"] == a, c
        assert abs(run["app_bytes"] - run["iperf3_received_bytes"]) < 0.005 * run["iperf3_received_bytes"]
        if n == 3:
            assert len(run["throughput_per_flow_bps"]) == 3
            assert c["throughput_per_flow_bps"] == pytest.approx(c["throughput_bps"] / 3)
    md = open(f"{out}/report.md").read()
    assert "## Flows per core" in md and "| 3 | same-core | 2 |" in md
    w, h = png_size(f"{out}/flows_per_core.png")
    assert w > 100 and h > 100
    assert not [n for n in lab_namespaces() if f"-{os.getpid()}-" not in n]


def test_paper_preset(tmp_path):
    """--paper in the lab: iperf3 -Z with its first 2 s left out, by iperf3 and by the tracer
    alike (what the reader got after them is what the tracer counted), the sender where the
    preset puts it (a CPU the sweep does not measure: one CPU is swept, so there is one), and
    the report naming the method (short runs here: --seconds overrides). One cell: the classes
    of a 2x2 sweep are test_two_by_two_sweep's."""
    out = str(tmp_path / "sweep")
    r = subprocess.run([*STEER, "sweep", "--out", out, "--cpus", str(A), "--seconds", "3",
                        "--repeat", "1", "--paper"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.load(open(f"{out}/results.json"))
    from steer.experiment.lab import usable_cpus
    from steer.experiment.sweep import paper_sender_cpu
    assert res["config"]["paper"] is True
    assert res["config"]["sender_cpu"] == paper_sender_cpu([A], usable_cpus())
    assert len(res["cells"]) == 1
    for c in res["cells"]:
        run = c["runs"][0]
        assert c["class"] == EXPECTED[(c["kernel_cpu"], c["app_cpu"])]
        # the two windows start within the iperf3 client's connect of each other
        assert abs(run["app_bytes"] - run["iperf3_received_bytes"]) < 0.05 * run["iperf3_received_bytes"], run
    md = open(f"{out}/report.md").read()
    assert "Method: --paper: iperf3 -Z (sendfile), the first 2 s left out" in md
    assert os.path.exists(f"{out}/histograms.svg")
