"""Steering, live: real XDP programs on the lab's veth, real traffic, and the placement checked by
the tracer and by the kernel's own tracefs events; the parser fuzzed through BPF_PROG_TEST_RUN."""
import json
import os
import re
import subprocess
import time

import pytest

from helpers import (CPU_A, CPU_B, KERNEL_RELEASE, ROOT, SAMPLE_HZ, STEER, alone, assert_one_line_error,
                     assert_unprivileged, bpftool_objects, live, steer, two_cpus)
from bench.packets import FUZZ_SPECS, fuzz_packets, reference_tuple
from bench.peer import runtime_between, schedstat_runtime, task_pids, widened
from steer.model.classify import classify
from steer.model.flows import build_snapshot
from steer.model.flowspec import FlowSpec
from steer.kernel.links import prog_test_run
from steer.kernel.mounts import BPFFS
from steer.experiment.lab import Lab, LabFlow
from steer.steering.xdp import load_unattached, pin_root
from steer.model.topology import read_topology
from steer.trace.tracer import Tracer
from web import free_port, http_get, metric_sum, wait_http
from witness import TraceEvents

pytestmark = [live, alone]
XDP_PASS, XDP_REDIRECT = 2, 4
FUZZ_PACKETS = 12000


def _skbs_by_cpu(before, after, sport, dport):
    """Per CPU: skbs of the flow whose stack processing ran there (the tracer's view)."""
    out = {}
    for (fid, cpu), s in after.entries.items():
        if fid.sport == sport and fid.dport == dport:
            b = before.entries.get((fid, cpu))
            out[cpu] = s.rx_skbs - (b.rx_skbs if b else 0)
    return out


def _share(counts, cpu):
    total = sum(counts.values())
    return counts.get(cpu, 0) / total if total else 0.0


def _pin(lab, spec, cpu, *extra):
    r = steer("pin", spec, "--cpu", str(cpu), "--dev", "veth-rx", "--netns", lab.rx, *extra)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture
def tracer():
    t = Tracer(timing="exact").start()   # per-CPU skb counts need the per-skb program
    yield t
    t.stop()


@pytest.fixture(autouse=True)
def clean_pins():
    yield
    steer("reset")
    assert not os.path.isdir(pin_root()) or not os.listdir(pin_root())


@two_cpus
def test_pin_repin_unpin_generic(tracer):
    """Sender and reader on CPU A; pinning moves the flow's stack work to CPU B, re-pinning brings
    it back to A, and unpinning returns it to where the kernel put it."""
    with Lab([LabFlow(CPU_A, CPU_A)], seconds=9) as lab:
        lab.start_servers()
        out = _pin(lab, "proto=tcp,dport=5201", CPU_B)
        assert "generic XDP" in out
        lab.start_clients()
        time.sleep(1)
        a = tracer.sample()
        time.sleep(2)
        b = tracer.sample()
        rules = json.loads(steer("rules", "--json").stdout)["devices"]
        _pin(lab, "proto=tcp,dport=5201", CPU_A)   # re-pin: the same rule moves
        time.sleep(1)
        c = tracer.sample()
        time.sleep(2)
        d = tracer.sample()
        r = steer("unpin", "proto=tcp,dport=5201", "--dev", "veth-rx", "--netns", lab.rx)
        assert r.returncode == 0 and "XDP detached" in r.stdout
        time.sleep(0.5)
        e = tracer.sample()
        time.sleep(1.5)
        f = tracer.sample()
        (res,) = lab.wait(timeout=30)
    sport = res.sender_port
    pinned, repinned, unpinned = (_skbs_by_cpu(x, y, sport, 5201) for x, y in ((a, b), (c, d), (e, f)))
    print(f"skbs per CPU: pinned to {CPU_B} {pinned}, re-pinned to {CPU_A} {repinned}, "
          f"unpinned {unpinned}")
    assert _share(pinned, CPU_B) >= 0.95
    assert _share(repinned, CPU_A) >= 0.95
    assert _share(unpinned, CPU_A) >= 0.95   # the sender's CPU, as without steering
    (dev,) = rules
    (rule,) = dev["rules"]
    assert dev["mode"] == "generic" and rule["cpu"] == CPU_B and rule["packets"] > 1000
    assert dev["counters"]["redirected"] >= rule["packets"] and dev["counters"]["redirect_failed"] == 0
    assert not [d for d in (os.listdir(pin_root()) if os.path.isdir(pin_root()) else [])
                if lab.rx in d]
    # steered work shows as cpumap kthread time on the target
    kt = sum(s.kthread_ns for (fid, cpu), s in b.entries.items() if fid.sport == sport and cpu == CPU_B)
    assert kt > 0


# The exact mode brackets the kthread from its switch in to its switch out (and between softirqs)
# and adds the head of each run that the scheduler charges from the wake-up, before the switch in
# (syscall.bpf.h, charge_wakeup): without that head, on this VM, where the kthread wakes ~20,000
# times a second, it read 29-59% low. With it, 9 runs: -1.1% to -0.3% (the accuracy matrix's two
# cpumap scenarios, 18 runs: -4.4% to -0.6%). -10% is over 5 spreads below the mean at twice the
# spread measured (a chance below 1 in 100,000) and fails a figure 0.85x this one; +5% fails one
# 1.15x, and the brackets and the scheduler's own head cannot pass it but by the clocks'
# granularity. Before the bracket closed at the kthread's sleep (kernels >= 6.14 trace the batch
# before it goes up the stack), exact read +250%: that bound catches it.
# Sampled takes each sample's weight from the scheduler. At 4,999 Hz, 12 runs: mean -2.8%, sd
# 1.3%; counted with the other softirqs the kthread runs (kthread_softirq_ns), 6 runs: -0.5% to
# +0.4%, sd 0.3%. -10% and +10% are over 5 spreads from the older runs' mean (the spread at its
# 95% upper bound for 12 runs: a chance below 1e-6), and either fails a figure 0.85x or 1.15x.
# At 1,000 Hz it spread six times as far (-23% to -1%). Before the weights took the steal time out of the task clock,
# sampled read +107% here and -56% on CI; before the softirq the kthread runs counted as NET_RX,
# the ACK stream took 6-8% of the kthread from the steered flow.
KTHREAD_BOUND = {"exact": (-0.10, 0.05), "sampled": (-0.10, 0.10)}
KTHREAD_HZ = 4999


@two_cpus
@pytest.mark.parametrize("timing", ["exact", "sampled"])
def test_steered_flow_kthread_time_against_schedstat(timing, held):
    """A flow steered to CPU B runs up the stack in CPU B's cpumap kthread: each timing mode
    charges that time to the flow, against the kthread's own on-CPU time by the scheduler (within
    KTHREAD_BOUND), with little left unattributed. One mode at a time: a perf-event program does
    not run while another BPF program runs on its CPU, so the exact tracer's per-skb programs
    would hide part of the kthread from the sampler."""
    tracer = Tracer(timing=timing, sample_hz=KTHREAD_HZ).start()
    try:
        with Lab([LabFlow(CPU_A, CPU_A)], seconds=6) as lab:
            lab.start_servers()
            _pin(lab, "proto=tcp,dport=5201", CPU_B)
            lab.start_clients()
            time.sleep(1)
            # found once, read just before and just after each of the tracer's reads
            pids = task_pids(lambda pid, comm: comm.startswith(f"cpumap/{CPU_B}/"))
            a, k0 = tracer.sample(beside=lambda: schedstat_runtime(pids))
            time.sleep(3)
            b, k1 = tracer.sample(beside=lambda: schedstat_runtime(pids))
            (res,) = lab.wait(timeout=30)
    finally:
        tracer.stop()
    assert res.error is None
    assert pids, f"no cpumap/{CPU_B}/ kthread"
    truth, spread = runtime_between(*k0, *k1)
    assert truth > 0.1
    key = next(k for k in b.entries if k[0].sport == res.sender_port and k[1] == CPU_B)
    before = a.entries.get(key)
    flow = (b.entries[key].kthread_ns - (before.kthread_ns if before else 0)) / 1e9
    total = (b.cpus[CPU_B].kthread_ns - a.cpus[CPU_B].kthread_ns) / 1e9
    # the softirqs the kthread runs when it enables bottom halves (the ACKs its TCP sent through
    # the veth) are NET_RX time by both modes, and its own by the scheduler; those that ran on
    # CPU B outside it (in ksoftirqd, when the kthread's bottom half ran out of time, or at an
    # interrupt's exit over another task) are the scheduler's for another task or none
    net_rx = (b.cpus[CPU_B].kthread_net_rx_ns - a.cpus[CPU_B].kthread_net_rx_ns) / 1e9
    net_rx_outside = (b.cpus[CPU_B].net_rx_ns - a.cpus[CPU_B].net_rx_ns) / 1e9 - net_rx
    # and the other softirqs it runs there (timers) are the scheduler's, and no flow's
    other = (b.cpus[CPU_B].kthread_softirq_ns - a.cpus[CPU_B].kthread_softirq_ns) / 1e9
    unattributed = (b.cpus[CPU_B].kthread_unattributed_ns - a.cpus[CPU_B].kthread_unattributed_ns) / 1e9
    # what the kthread ran while the tracer read is the truth's own spread, not steer's error
    low, high = widened(KTHREAD_BOUND[timing], spread, truth)
    print(f"{timing}: cpumap kthread on CPU {CPU_B} {total:.3f} s, the flow {flow:.3f} s, unattributed "
          f"{unattributed:.3f} s, NET_RX {net_rx:.3f} s (on CPU {CPU_B} outside it {net_rx_outside:.3f} s), "
          f"other softirqs {other:.3f} s; schedstat {truth:.3f} s "
          f"({(total + net_rx + other) / truth - 1:+.1%}, bounds {low:+.0%} {high:+.0%})")
    held("kthread + NET_RX vs schedstat", (total + net_rx + other) / truth - 1, low, high)
    assert flow > 0.95 * total and unattributed < 0.05 * total
    # where its protocol stack ran: the kthread's CPU, though its arrival CPU (XDP, and generic
    # XDP's linearising) may take more time; by counted skbs (exact) or by the kthread's time
    snap = build_snapshot(a, b, read_topology(), tracer.capabilities)
    (f,) = [f for f in snap.flows if f.flow.sport == res.sender_port and f.flow.dport == 5201]
    assert f.stack_cpu == CPU_B and f.stack_cpu_share > 0.9, (f.stack_cpu, f.stack_cpu_share)
    # and its class is of that CPU against the reader's (taskset to CPU A by the lab), whichever
    # CPU took more kernel time
    print(f"kernel CPU {f.kernel_cpu} ({f.kernel_cpu_share:.2f}), stack CPU {f.stack_cpu}, "
          f"app CPU {f.app_cpu}: {f.placement.cls}")
    assert f.app_cpu == CPU_A and f.placement == classify(CPU_B, CPU_A, read_topology())


@two_cpus
def test_native_mode_placement_by_tracefs(tracer):
    """Native XDP redirects before any skb exists, so every netif_receive_skb of the data runs in
    the cpumap kthread of the target CPU: tracefs counts them per CPU, independently of steer."""
    with Lab([LabFlow(CPU_A, CPU_A)], seconds=8) as lab:
        # the veth native-XDP trap (docs/how-it-measures.md, "Steered flows"): without this TCP's checksums are lost
        subprocess.run(["ip", "netns", "exec", lab.tx, "ethtool", "-K", "veth-tx", "tx", "off"],
                       check=True, capture_output=True)
        lab.start_servers()
        assert "native XDP" in _pin(lab, "proto=tcp,dport=5201", CPU_B, "--mode", "native")
        ev = TraceEvents("veth-rx")
        try:
            lab.start_clients()
            time.sleep(1)
            a = tracer.sample()
            pinned = ev.count(2)
            b = tracer.sample()
            _pin(lab, "proto=tcp,dport=5201", CPU_A, "--mode", "native")
            time.sleep(0.5)
            c = tracer.sample()
            repinned = ev.count(2)
            d = tracer.sample()
        finally:
            ev.close()
        (res,) = lab.wait(timeout=30)
    assert res.error is None and res.received_bytes > 10**8
    traced1 = _skbs_by_cpu(a, b, res.sender_port, 5201)
    traced0 = _skbs_by_cpu(c, d, res.sender_port, 5201)
    print(f"tracefs per CPU: pinned to {CPU_B} {pinned}, re-pinned to {CPU_A} {repinned}; "
          f"tracer: {traced1}, {traced0}")
    assert sum(pinned.values()) > 1000
    assert _share(pinned, CPU_B) >= 0.95 and _share(traced1, CPU_B) >= 0.95
    assert _share(repinned, CPU_A) >= 0.95 and _share(traced0, CPU_A) >= 0.95


def test_parser_fuzz_passes_everything_it_should_not_steer():
    """>= 10,000 truncated, malformed and random packets through BPF_PROG_TEST_RUN: each comes back
    unchanged, XDP_PASS unless it is a well-formed packet of a steered flow (judged by the
    independent reference parser in bench/packets.py)."""
    obj, table = load_unattached()
    try:
        specs = [FlowSpec.parse(s) for s in FUZZ_SPECS]
        for s in specs:
            table.pin(s, 0)
        fd = obj.prog_fd("steer_xdp")
        packets = fuzz_packets(FUZZ_PACKETS)
        verdicts = {XDP_PASS: 0, XDP_REDIRECT: 0}
        for pkt in packets:
            ret, out, _ = prog_test_run(fd, pkt)
            t = reference_tuple(pkt)
            steered = t is not None and any(s.matches(*t) for s in specs)
            assert ret == (XDP_REDIRECT if steered else XDP_PASS), (pkt.hex(), t, ret)
            assert out == pkt, pkt.hex()
            verdicts[ret] += 1
        c = table.counters()
    finally:
        obj.close()
    print(f"fuzz: {len(packets)} packets, {verdicts[XDP_PASS]} passed, "
          f"{verdicts[XDP_REDIRECT]} steered; counters {c}")
    assert len(packets) >= 10000 and verdicts[XDP_REDIRECT] > 0
    assert c["unparsed"] > 0 and c["passed"] > 0
    assert c["redirected"] == verdicts[XDP_REDIRECT]
    assert c["passed"] + c["unparsed"] == verdicts[XDP_PASS]


def test_bad_steering_input_is_one_line():
    with Lab([LabFlow(CPU_A, CPU_A)]) as lab:
        assert_one_line_error(steer("pin", "proto=tcp", "--cpu", "4096", "--dev", "veth-rx",
                                    "--netns", lab.rx), "CPU 4096 does not exist")
        assert_one_line_error(steer("pin", "proto=tcpx", "--cpu", "0", "--dev", "veth-rx",
                                    "--netns", lab.rx), "tcp or udp", code=2)
        assert_one_line_error(steer("pin", "proto=tcp", "--cpu", "0", "--dev", "nope0",
                                    "--netns", lab.rx), "no interface 'nope0'")
        assert_one_line_error(steer("pin", "proto=tcp", "--cpu", "0", "--dev", "veth-rx",
                                    "--netns", "no-such-ns"), "network namespace 'no-such-ns' not found")
        assert_one_line_error(steer("unpin", "proto=tcp", "--dev", "veth-rx", "--netns", lab.rx),
                              "no pinned steering on veth-rx")
        _pin(lab, "proto=tcp,dport=5201", 0)
        assert_one_line_error(steer("unpin", "proto=udp", "--dev", "veth-rx", "--netns", lab.rx),
                              "no rule proto=udp", "proto=tcp,dport=5201")
        assert_one_line_error(steer("auto", "--dev", "veth-rx", "--netns", lab.rx, "--duration", "1"),
                              "has pinned steering rules")
    assert_one_line_error(steer("pin", "proto=tcp", "--cpu", "x", "--dev", "lo"), "not a whole number", code=2)


def _xdp_links():
    return [l for l in bpftool_objects("link") if l.get("type") == "xdp"]


def test_kill_9_of_auto_leaves_nothing_attached():
    """Killed while a move it made is being judged (its rule in place, its trial running):
    nothing of it stays attached or pinned."""
    with Lab([LabFlow(CPU_A, CPU_A)], seconds=8) as lab:
        lab.start_servers()
        before = len(_xdp_links())
        p = subprocess.Popen([*STEER, "auto", "--dev", "veth-rx", "--netns", lab.rx,
                              "--interval", "0.5", "--window", "2", "--duration", "15"],
                             stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=ROOT),
                             cwd=ROOT)
        lab.start_clients()
        log = [p.stderr.readline()]
        while log[-1] and "kernel CPU" not in log[-1]:
            log.append(p.stderr.readline())
        assert "kernel CPU" in log[-1], "".join(log)
        assert len(_xdp_links()) == before + 1
        p.kill()
        out = "".join(log) + p.communicate()[1]
        end = time.monotonic() + 10
        while len(_xdp_links()) > before and time.monotonic() < end:
            time.sleep(0.1)
        assert len(_xdp_links()) == before
        lab.wait(timeout=30)
    assert not os.path.isdir(pin_root()) or not os.listdir(pin_root())
    print(out)


@two_cpus
def test_auto_llc_peer_moves_the_flow(tracer):
    """Reader and softirq on CPU A: llc-peer moves the kernel side to another core of the same L3
    (any CPU of the host: the cpumap kthread is not bound by this process's affinity), the tracer
    sees it there, and the move is logged with its reason."""
    with Lab([LabFlow(CPU_A, CPU_A)], seconds=10) as lab:
        lab.start_servers()
        lab.start_clients()
        r = subprocess.Popen([*STEER, "auto", "--dev", "veth-rx", "--netns", lab.rx, "--interval",
                              "1", "--duration", "8", "--hold", "3", "--window", "2"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=ROOT),
                             cwd=ROOT)
        # the tracer's window starts after the move, however long auto takes to start (CI's
        # machine took longer than a fixed wait allowed)
        log = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            line = r.stderr.readline()
            log.append(line)
            if not line or "kernel CPU" in line:
                break
        time.sleep(0.5)
        a = tracer.sample()
        time.sleep(2)
        b = tracer.sample()
        out, err = r.communicate(timeout=30)
        err = "".join(log) + err
        (res,) = lab.wait(timeout=30)
    assert r.returncode == 0, err
    # the log (stderr): a timestamp, then the line
    moves = [m for m in (re.search(rf"^\S+Z .*kernel CPU {CPU_A} -> CPU (\d+)", l)
                         for l in err.splitlines()) if m]
    assert len(moves) == 1 and f"shares the L3 of reader CPU {CPU_A}" in moves[0].string, err
    target = int(moves[0].group(1))
    skbs = _skbs_by_cpu(a, b, res.sender_port, 5201)
    print(err, skbs)
    assert target != CPU_A and _share(skbs, target) >= 0.95


def test_reset_removes_pins_and_detaches():
    with Lab([LabFlow(CPU_A, CPU_A)]) as lab:
        before = len(_xdp_links())
        _pin(lab, "proto=udp,dport=9000", 0)
        _pin(lab, "src=198.18.0.1", 0)
        assert len(_xdp_links()) == before + 1
        r = steer("rules")
        assert "proto=udp,dport=9000" in r.stdout and "src=198.18.0.1" in r.stdout
        r = steer("reset")
        assert r.returncode == 0 and f"removed XDP steering of veth-rx in {lab.rx}" in r.stdout
        assert len(_xdp_links()) == before
        assert steer("rules").stdout.strip() == "no pinned steering rules"


def test_app_affinity_of_every_thread():
    p = subprocess.Popen(["python3", "-c", "import threading, time\n"
                          "[threading.Thread(target=time.sleep, args=(30,), daemon=True).start() "
                          "for _ in range(3)]\ntime.sleep(30)"])
    try:
        time.sleep(0.5)
        r = steer("app", "--pid", str(p.pid), "--cpu", str(CPU_A))
        assert r.returncode == 0, r.stderr
        tids = os.listdir(f"/proc/{p.pid}/task")
        assert len(tids) == 4
        for tid in tids:
            out = subprocess.run(["taskset", "-p", "-c", tid], capture_output=True, text=True).stdout
            assert out.strip().endswith(f": {CPU_A}"), out
        assert_one_line_error(steer("app", "--pid", "999999", "--cpu", "0"), "no process 999999")
    finally:
        p.kill()


def test_rps_in_a_namespace_and_reset_restores_it():
    with Lab([LabFlow(CPU_A, CPU_A)]) as lab:
        read = ["ip", "netns", "exec", lab.rx, "cat", "/sys/class/net/veth-rx/queues/rx-0/rps_cpus"]
        orig = subprocess.run(read, capture_output=True, text=True, check=True).stdout.strip()
        r = steer("rps", "--dev", "veth-rx", "--netns", lab.rx, "--cpu", "0")
        assert r.returncode == 0, r.stderr
        now = subprocess.run(read, capture_output=True, text=True, check=True).stdout.strip()
        assert int(now.replace(",", ""), 16) == 1
        steer("reset")
        back = subprocess.run(read, capture_output=True, text=True, check=True).stdout.strip()
        assert back == orig


def test_irq_on_a_virtual_device_says_why():
    assert_one_line_error(steer("irq", "--dev", "lo", "--cpu", "0"), "has no IRQs of its own")


# The sampled mode once kept one hint per CPU, the last skb of any context, and the ACKs' softirq
# on top of the kthread overwrote the kthread's own: 24-96% of the kthread stayed the flow's
# (2026-11-25). Now a hint per receive context, told apart by where net_rx_action's
# bpf_net_context lives (6.11+; flowtrace/maps.bpf.h, HINT_*): 100% in five runs (2026-11-26).
# Before 6.11 there is one hint, as before. The exact mode left a kthread's intervals with no skb
# unattributed (after a softirq it ran, or switched back in): 1-2% here, 7% in a CI run under
# steal (2026-12-02); they are its last flow's tail now (kthread.bpf.h, close_kthread): 100%.
KEPT = {"exact": 0.95, "sampled": 0.90}
ONE_HINT = pytest.mark.skipif(KERNEL_RELEASE < (6, 11), reason="before Linux 6.11 the sampled mode keeps "
                              "one hint per CPU: the ACKs' softirq takes the kthread's samples")


@two_cpus
@pytest.mark.parametrize("timing", ["exact", pytest.param("sampled", marks=ONE_HINT)])
def test_a_flow_steered_to_its_readers_cpu_keeps_its_kthread_time(timing):
    """Sender on CPU A, reader on CPU B, the flow steered to CPU B: the reader's TCP sends its
    ACKs from the kthread's softirqs there, and they come back in on CPU B as a flow of their own
    (the reverse 4-tuple). The kthread's time is the data flow's (at least 90%), not the ACKs'."""
    tracer = Tracer(timing=timing, sample_hz=SAMPLE_HZ).start()
    try:
        with Lab([LabFlow(CPU_A, CPU_B)], seconds=5) as lab:
            lab.start_servers()
            _pin(lab, "proto=tcp,dport=5201", CPU_B)
            lab.start_clients()
            time.sleep(1)
            a = tracer.sample()
            time.sleep(3)
            b = tracer.sample()
            (res,) = lab.wait(timeout=30)
    finally:
        tracer.stop()
    assert res.error is None
    snap = build_snapshot(a, b, read_topology(), tracer.capabilities)
    total = snap.cpus[CPU_B].kthread_seconds
    flows = {(f.flow.sport, f.flow.dport): f for f in snap.flows}
    data = flows[(res.sender_port, 5201)]
    acks = flows.get((5201, res.sender_port))
    ack_kthread = acks.kernel_kthread_seconds if acks else 0.0
    print(f"{timing}: cpumap kthread on CPU {CPU_B} {total:.3f} s: the flow {data.kernel_kthread_seconds:.3f} s, "
          f"its ACKs {ack_kthread:.3f} s, unattributed {snap.cpus[CPU_B].kthread_unattributed_seconds:.3f} s; "
          f"stack CPU {data.stack_cpu}")
    assert total > 0.1
    assert data.kernel_kthread_seconds >= KEPT[timing] * total
    assert ack_kthread <= (1 - KEPT[timing]) * total
    assert data.stack_cpu == CPU_B



@pytest.mark.parametrize("mode", ["auto", "generic"])
def test_a_kernel_without_generic_cpumap_redirect_is_told_what_to_do(mode, monkeypatch):
    """Before Linux 5.15 generic XDP cannot redirect to a cpumap (5.9-5.14 refuse to attach it,
    EINVAL with no message; the 5.10 guest of make test-kernels does). Such a kernel, as the
    probe sees it, is refused before anything is attached, with the remedy for a veth; nothing is
    left pinned or attached. The native path the remedy names is test_native_mode_placement_by_tracefs
    here and test_kernel_smoke's pin on 5.10."""
    from steer.steering import xdp
    from steer.steering.xdp import SteerError, XdpSteering
    monkeypatch.setattr(xdp, "generic_xdp_redirects_to_cpumap", lambda: False)
    with Lab([LabFlow(CPU_A, CPU_A)], seconds=1) as lab:
        with pytest.raises(SteerError) as e:
            XdpSteering("veth-rx", lab.rx, mode=mode).open()
        assert "Linux 5.15" in str(e.value) and "ethtool -K PEER tx off" in str(e.value)
        assert "\n" not in str(e.value)
        link = subprocess.run(["ip", "-n", lab.rx, "-d", "link", "show", "veth-rx"],
                              capture_output=True, text=True, check=True).stdout
        assert "xdp" not in link.split("\n")[0] and "prog/xdp" not in link, link
    assert not [d for d in (os.listdir(pin_root()) if os.path.isdir(pin_root()) else [])
                if lab.rx in d]
    assert not [p for p in bpftool_objects("prog") if p.get("name") == "steer_xdp"]


def steer_in_own_bpffs(*args, before: str, after: str = ":"):
    """steer ARGS in a mount namespace of its own, with a fresh bpffs at /sys/fs/bpf: the shell
    BEFORE runs there first, AFTER last (its output follows steer's). The host's pin directory is
    never touched, so a test killed halfway leaves no hostile pin directory for the runs after it
    (one owned by nobody, left by a killed run, failed every steering test of the next)."""
    script = (f"set -e; mount -t bpf -o mode=0700 bpf {BPFFS}; {before}; set +e; "
              f'"$@"; rc=$?; {after}; exit $rc')
    return steer(*args, prefix=("unshare", "--mount", "--propagation", "private",
                                "sh", "-c", script, "sh"))


def test_a_pin_directory_someone_else_made_is_refused_and_nothing_attaches():
    """An unprivileged user who makes /sys/fs/bpf/steer first (bpffs mounted 1777 by another
    tool) must not get root to pin into it, read from it or remove through it."""
    links = len(_xdp_links())
    for args in (("pin", "proto=udp,dport=9", "--cpu", "0", "--dev", "lo"), ("rules",), ("reset",),
                 ("unpin", "proto=udp,dport=9", "--dev", "lo")):
        r = steer_in_own_bpffs(*args, before=f"mkdir -m 755 {pin_root()}; "
                                             f"chown 65534:65534 {pin_root()}")
        assert_one_line_error(r, "refusing the pin directory: /sys/fs/bpf/steer "
                                 "belongs to uid 65534")
    assert len(_xdp_links()) == links
    r = steer_in_own_bpffs("rules", before=f"mkdir -m 777 {pin_root()}")
    assert_one_line_error(r, "writable by others (mode 0777); chmod go-w")


def test_reset_removes_a_planted_link_not_its_target(tmp_path):
    victim = tmp_path / "precious"
    victim.write_text("keep")
    plant = [f"mkdir -m 700 {pin_root()} {pin_root()}/lo", f"ln -s {victim} {pin_root()}/lo/rules"]
    # device directories, old names and new
    plant += [f"ln -s {tmp_path} '{pin_root()}/{name}'" for name in ("eth9", "eth9@root", "eth9@ns")]
    r = steer_in_own_bpffs("reset", before="; ".join(plant),
                           after=f"echo; echo left: $(ls -A {pin_root()})")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "left:", r.stdout   # the pin root stays, empty
    assert victim.read_text() == "keep" and sorted(os.listdir(tmp_path)) == ["precious"]


@pytest.fixture
def no_pins():
    """No pins before and after (steer reset leaves the pin root, empty)."""
    assert not os.path.lexists(pin_root()) or not os.listdir(pin_root()), os.listdir(pin_root())
    yield
    subprocess.run(["rm", "-rf", pin_root()], check=True)


NASTY_NETNS = "st@a|b x"


def test_a_namespace_named_with_separators_pins_and_resets_as_itself(no_pins):
    subprocess.run(["ip", "netns", "add", NASTY_NETNS], check=True)
    try:
        r = steer("pin", "proto=udp,dport=9", "--cpu", "0", "--dev", "lo", "--netns", NASTY_NETNS)
        assert r.returncode == 0, r.stderr
        (entry,) = os.listdir(pin_root())
        assert entry == "lo@st%40a%7Cb%20x", entry
        rules = json.loads(steer("rules", "--json").stdout)["devices"]
        assert [(d["dev"], d["netns"], len(d["rules"])) for d in rules] == [("lo", NASTY_NETNS, 1)]
        r = steer("reset")
        assert r.returncode == 0 and f"removed XDP steering of lo in {NASTY_NETNS}" in r.stdout
    finally:
        subprocess.run(["ip", "netns", "del", NASTY_NETNS])


def test_steer_mounts_its_own_bpffs_private_to_root(tmp_path):
    from steer.kernel.mounts import ensure_bpffs
    mnt = tmp_path / "bpf"
    ensure_bpffs(str(mnt))
    try:
        assert (os.stat(mnt).st_mode & 0o777) == 0o700   # (bpffs adds the sticky bit)
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


EXPORT_ENV = dict(os.environ, PYTHONPATH=ROOT)


def _mode(path: str) -> tuple[str, int, int]:
    st = os.lstat(path)
    return f"{st.st_mode & 0o7777:04o}", st.st_uid, st.st_gid


def test_exporter_started_as_root_becomes_steer_and_still_reads_the_pinned_rules():
    """Started as root without --user, the exporter becomes the steer user (scripts/setup.sh and
    the package make it), with no capability in any thread, and still reads the rules `steer
    pin` leaves: their maps are the steer group's to read (links stay root's), and it reads them
    from the pin directory it entered as root, since bpffs's root is root's alone. After a
    `steer reset` and a new pin it sees the new rule, and whether a device of its own namespace
    is still attached (by the ifindex pinned beside the link)."""
    import pwd
    try:
        user = pwd.getpwnam("steer")
    except KeyError:
        pytest.fail("no user steer: scripts/setup.sh (make test runs it) creates it")
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    p = None
    with Lab([LabFlow(CPU_A, CPU_A)], seconds=3) as lab:
        try:
            lab.start_servers()
            r = steer("pin", "proto=tcp,dport=5201", "--cpu", str(CPU_A), "--dev", "veth-rx",
                      "--netns", lab.rx)
            assert r.returncode == 0, r.stderr
            (dev_dir,) = [os.path.join(pin_root(), d) for d in os.listdir(pin_root())]
            assert _mode(pin_root()) == ("0750", 0, user.pw_gid)
            assert _mode(dev_dir) == ("0750", 0, user.pw_gid)
            assert _mode(os.path.join(dev_dir, "rule_stats")) == ("0640", 0, user.pw_gid)
            assert _mode(os.path.join(dev_dir, "link-generic")) == ("0600", 0, 0)
            p = subprocess.Popen([*STEER, "export", "--listen", f"127.0.0.1:{port}"], env=EXPORT_ENV,
                                 cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
            wait_http(url, p)
            line = p.stdout.readline()
            assert f"as steer (uid {user.pw_uid})" in line, line
            assert_unprivileged(p.pid, uid=user.pw_uid, gid=user.pw_gid)
            lab.start_clients()
            (res,) = lab.wait()
            assert res.error is None, res.error
            body = http_get(url).decode()
            (dev,) = json.loads(steer("rules", "--json").stdout)["devices"]
            (rule,) = dev["rules"]
            # the exporter's reading, as the steer user, is root's reading of the same map
            got = metric_sum(body, r'steer_rule_packets_total\{[^}]*dev="veth-rx"[^}]*\}')
            print(f"rule packets: exporter {got:,.0f}, steer rules as root {rule['packets']:,}")
            assert rule["packets"] > 1000 and got == rule["packets"]
            assert 'steer_steering_readable{why=""} 1.0' in body
            # a device in another namespace: whether it is attached needs its link (root's)
            assert 'steer_xdp_detached{dev="veth-rx"' not in body
            r = steer("reset")
            assert r.returncode == 0, r.stderr
            assert os.path.isdir(pin_root()) and not os.listdir(pin_root())
            r = steer("pin", "proto=udp,dport=9", "--cpu", str(CPU_A), "--dev", "lo")
            assert r.returncode == 0, r.stderr
            body = http_get(url).decode()
            assert 'steer_steering_readable{why=""} 1.0' in body, body
            assert re.search(r'^steer_rule_packets_total\{cpu="\d+",dev="lo",netns="",'
                             r'rule="proto=udp,dport=9"\} 0\.0$', body, re.M), body
            assert re.search(r'^steer_xdp_detached\{dev="lo",netns=""\} 0\.0$', body, re.M)
        finally:
            if p is not None:
                p.terminate()
                p.wait(timeout=10)
            steer("reset")
    # --user root opts out of all that, and says what it keeps
    r = subprocess.run([*STEER, "export", "--listen", f"127.0.0.1:{free_port()}", "--user",
                        "root", "--duration", "0.5"], env=EXPORT_ENV, cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "--user root: staying uid 0" in r.stderr, r.stderr


def test_pinning_without_cap_chown_keeps_the_pins_root_s(no_pins):
    """Root without CAP_CHOWN (a container's root may lack it) still pins: the pins stay root's
    alone (0700, 0600) instead of a traceback from giving them to the steer group."""
    drop = "-chown,-fowner"
    r = steer("pin", "proto=udp,dport=9", "--cpu", str(CPU_A), "--dev", "lo",
              prefix=("setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}", "--"))
    assert r.returncode == 0, r.stderr
    assert _mode(os.path.join(pin_root(), "lo")) == ("0700", 0, 0)
    assert _mode(os.path.join(pin_root(), "lo", "rules")) == ("0600", 0, 0)
