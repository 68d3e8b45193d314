"""steer pin's per-queue methods on the lab's veth, with real traffic: where the flow's skbs go up
the stack is counted per CPU by tracefs (net:netif_receive_skb, a witness that shares no code with
steer), and what steer changed in the kernel is read back from sysfs and /proc and the netdev
netlink family; steer reset puts it back.

The lab's sender runs on CPU A, its reader on CPU B; the veth delivers the flow's packets on the
sender's CPU, so its stack runs there until something moves it: most of it, as the reader's ACKs,
taken in on CPU B, make the sender transmit from B's softirq now and then, and those segments are
received on B (1-12% of the data skbs here, 2026-11-27; more on a busy host). The witness's
shares need no statistics: every data skb is one event, 30,000-50,000 in its 1 s, and a moved
queue sends all of them to its CPU (an skb in flight as the setting changes is one in 10^4)."""
import json
import os
import subprocess

from autolog import AutoLog
from helpers import CPU_A, CPU_B, ROOT, STEER, alone, assert_one_line_error, live, steer, two_cpus
from witness import TraceEvents
from steer.experiment.lab import Lab, LabFlow
from steer.kernel.namespaces import call_with_netns_sysfs

pytestmark = [live, alone, two_cpus]
SHARE = 0.95      # of the skbs on the CPU a queue was moved to
# at most, of those on CPU B before the move and after the reset: 1% to 12% here (2026-11-27,
# seven runs); more, it seems, when the sender's CPU is busy with something else (its segments
# then leave more often from B's softirq as ACKs come in): one run beside two qemu guests failed
# a bound of half, its figures not kept. A queue moved to B takes them all; one not moved leaves
# a fifth on A at the least. Neither bound is a sampled figure's: tracefs counts every skb, and
# where each goes is the kernel's rule (RPS or the NAPI thread puts every one on B; the rest come
# from TCP's transmit path on whichever CPU the ACK arrived), so no sampling model gives odds.
# What made the unmoved share pass half was load beside the test, and the suite now runs the
# live tier with the host to itself (tests/conftest.py: the guests run beside the first tiers).
UNMOVED = 0.8
SPEC = "proto=tcp,dport=5201"


def _pin(lab, *args):
    return steer("pin", SPEC, "--dev", "veth-rx", "--netns", lab.rx, *args, timeout=60)


def _stack(seconds=1):
    w = TraceEvents("veth-rx")
    try:
        return w.count(seconds)
    finally:
        w.close()


def _share(counts, cpu):
    total = sum(counts.values())
    assert total > 1000, counts
    return counts.get(cpu, 0) / total


def _read(sysfs, path):
    with open(os.path.join(sysfs, path)) as f:
        return f.read().strip()


def _sysfs(lab, path):
    return call_with_netns_sysfs(lab.rx_netns, _read, path)


def test_rps_moves_the_queue_and_reset_puts_it_back():
    """--method rps on the veth's one RX queue: the stack goes to CPU B; a method the device
    cannot do is refused in one line first; steer reset puts the mask back and the stack with it."""
    with Lab([LabFlow(CPU_A, CPU_B)], seconds=20) as lab:   # stopped once measured
        lab.start_servers()
        lab.start_clients()
        try:
            assert_one_line_error(_pin(lab, "--cpu", str(CPU_B), "--method", "irq"),
                                  "--method irq on veth-rx", "no IRQs of its own")
            assert_one_line_error(_pin(lab, "--cpu", str(CPU_B), "--method", "napi"),
                                  "no NAPI instance", "gro on")
            before = _stack()
            r = _pin(lab, "--cpu", str(CPU_B), "--method", "rps")
            assert r.returncode == 0, r.stderr
            print(r.stdout)
            assert f"pinned RX queue 0 of veth-rx in {lab.rx} to CPU {CPU_B} by rps" in r.stdout
            assert int(_sysfs(lab, "class/net/veth-rx/queues/rx-0/rps_cpus"), 16) == 1 << CPU_B
            moved = _stack()
            listed = steer("rules")   # what steer changed, with what reset puts back
            settings = json.loads(steer("rules", "--json").stdout)["changed"]
        finally:
            reset = steer("reset")
        back = _stack()
        mask = _sysfs(lab, "class/net/veth-rx/queues/rx-0/rps_cpus")
        lab.stop_traffic()
    print(f"the veth's skbs by CPU (tracefs): before {before}, moved {moved}, after reset {back}; "
          f"reset: {reset.stdout.strip()}")
    counts = {"before": before, "moved": moved, "after reset": back}
    assert _share(before, CPU_B) <= UNMOVED, counts
    assert _share(moved, CPU_B) >= SHARE, counts
    assert f"  RPS of veth-rx in {lab.rx} rx-0: mask 0" in listed.stdout, listed.stdout
    assert {"kind": "rps", "netns": lab.rx, "dev": "veth-rx", "queue": "rx-0",
            "found": "0"} in settings, settings
    assert reset.returncode == 0 and "restored RPS of veth-rx rx-0" in reset.stdout
    assert int(mask, 16) == 0 and _share(back, CPU_B) <= UNMOVED, counts


def _napi(lab):
    """The veth's NAPI as the netdev netlink family tells it, in the lab's namespace."""
    def read(sysfs):
        from steer.kernel import netdev
        ifindex = int(_read(sysfs, "class/net/veth-rx/ifindex"))
        queues, napis = netdev.rx_queues_and_napis(ifindex)
        return {"queues": queues, "napis": {i: n.as_dict() for i, n in napis.items()}}
    got = call_with_netns_sysfs(lab.rx_netns, read)
    return {int(q): n for q, n in got["queues"].items()}, \
        {int(i): n for i, n in got["napis"].items()}


def test_napi_threads_the_queues_napi_on_the_cpu_and_reset_stops_it():
    """--method napi on a veth that polls (GRO on, the sender's packets wire-sized): the queue's
    NAPI gets a kthread of its own (that NAPI alone, on 6.17+), pinned to CPU B, and the stack
    runs there; steer reset stops the threading and the stack comes back to the sender's CPU."""
    with Lab([LabFlow(CPU_A, CPU_B)], seconds=20, wire_sized=True) as lab:
        subprocess.run(["ip", "netns", "exec", lab.rx, "ethtool", "-K", "veth-rx", "gro", "on"],
                       check=True, capture_output=True)
        queues, napis = _napi(lab)
        # a veth reports its NAPI but not which queue it polls: pin finds it from the packets
        assert len(napis) == 1, napis
        (nid,) = napis
        lab.start_servers()
        lab.start_clients()
        try:
            before = _stack()
            r = _pin(lab, "--cpu", str(CPU_B), "--method", "napi")
            assert r.returncode == 0, r.stderr
            print(r.stdout)
            _, threaded = _napi(lab)
            napi = threaded[nid]
            assert napi["pid"], threaded
            with open(f"/proc/{napi['pid']}/comm") as f:
                comm = f.read().strip()
            affinity = os.sched_getaffinity(napi["pid"])
            moved = _stack()
        finally:
            reset = steer("reset")
        _, after = _napi(lab)
        back = _stack()
        lab.stop_traffic()
    print(f"NAPI {nid}: kthread {napi['pid']} ({comm}) on CPUs {sorted(affinity)}; the veth's "
          f"skbs by CPU (tracefs): before {before}, moved {moved}, after reset {back}; reset: "
          f"{reset.stdout.strip()}")
    assert f"kthread {napi['pid']} on CPU {CPU_B}" in r.stdout
    assert comm.startswith("napi/veth-rx") and affinity == {CPU_B}
    assert napi["threaded"] in (True, None)   # None: the kernel says only the device's
    assert f"NAPI {nid} threaded on its own" in r.stdout or napi["threaded"] is None
    counts = {"before": before, "moved": moved, "after reset": back}
    assert _share(before, CPU_B) <= UNMOVED and _share(moved, CPU_B) >= SHARE, counts
    assert reset.returncode == 0 and "stopped threaded NAPI" in reset.stdout
    assert not after[nid]["pid"] and _share(back, CPU_B) <= UNMOVED, counts


def test_auto_moves_a_queue_only_for_flows_alone_on_it():
    """--method auto traces the flows for a second: a flow that shares the veth's queue with
    another moves by its own XDP rule (cpumap), both flows together by the queue (rps here: the
    veth has no IRQ, and no NAPI without GRO)."""
    with Lab([LabFlow(CPU_A, CPU_B), LabFlow(CPU_A, CPU_B)], seconds=30) as lab:
        lab.start_servers()
        lab.start_clients()
        try:
            one = _pin(lab, "--cpu", str(CPU_B), "--method", "auto")
            rules = json.loads(steer("rules", "--json").stdout)
            both = steer("pin", "proto=tcp", "--dev", "veth-rx", "--netns", lab.rx, "--cpu",
                         str(CPU_B), "--method", "auto", timeout=60)
            mask = _sysfs(lab, "class/net/veth-rx/queues/rx-0/rps_cpus")
        finally:
            steer("reset")
        lab.stop_traffic()   # the flows ran for as long as the two pins took (each loads a tracer)
    print(one.stdout, both.stdout, rules)
    assert one.returncode == 0, one.stderr
    assert "auto: 1 other flow(s) arrive on RX queue 0" in one.stdout and ": cpumap" in one.stdout
    assert f"pinned {SPEC} on veth-rx in {lab.rx} to CPU {CPU_B}" in one.stdout
    assert [r["spec"] for d in rules["devices"] for r in d["rules"]] == [SPEC], rules
    assert both.returncode == 0, both.stderr
    assert "auto: the flows are alone on RX queue 0" in both.stdout and ": rps" in both.stdout
    assert int(mask, 16) == 1 << CPU_B


def test_a_flow_with_no_packets_is_not_guessed():
    with Lab([LabFlow(CPU_A, CPU_B)], seconds=5) as lab:
        r = steer("pin", "proto=udp,dport=9", "--dev", "veth-rx", "--netns", lab.rx, "--cpu",
                  str(CPU_B), "--method", "auto", "--find", "0.5", timeout=60)
    assert_one_line_error(r, "no packet of proto=udp,dport=9 arrived on veth-rx in 0.5 s",
                          "--queue N")


def test_auto_moves_a_flow_alone_on_its_queue_by_the_queue_and_puts_it_back(private_tmp):
    """steer auto --method auto with a rule that moves the lab flow's stack to CPU B: the flow is
    alone on the veth's queue, which has RPS (no IRQ, no NAPI), so the move is the queue's RPS
    mask, and the stack goes there while it stands (tracefs, the 1 s right after the move: a
    verdict comes three 1 s intervals after it at the earliest). The verdict may be any: where
    the stack runs is what this test is about (the verdicts' own tests judge them). When auto
    exits, the mask is as it found it."""
    policy = private_tmp / "rules.toml"
    policy.write_text(f'[[rule]]\nflow = "{SPEC}"\ncpu = {CPU_B}\n')
    with Lab([LabFlow(CPU_A, CPU_B)], seconds=12) as lab:
        lab.start_servers()
        auto = subprocess.Popen(
            [*STEER, "auto", "--policy", str(policy), "--dev", "veth-rx", "--netns", lab.rx,
             "--method", "auto", "--interval", "1", "--window", "2", "--confirm", "1",
             "--hold", "0", "--duration", "9", "--log-format", "json"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=ROOT))
        log = AutoLog(auto)
        log.wait_for(lambda e: True, timeout=30)   # it traces: the traffic may start
        lab.start_clients()
        moved = _stack() if log.wait_for(lambda e: e.get("event") == "move", timeout=9) else None
        auto.wait(timeout=60)
        log.join()
        mask = _sysfs(lab, "class/net/veth-rx/queues/rx-0/rps_cpus")
        (res,) = lab.wait(timeout=30)
    events = log.events
    print(log.text(), f"the veth's skbs by CPU while moved (tracefs): {moved}")
    assert auto.returncode == 0 and res.error is None
    (move,) = [e for e in events if e.get("event") == "move"]
    assert (move["method"], move["queue"], move["new_cpu"]) == ("rps", 0, CPU_B), move
    assert "by rps (RX queue 0)" in move["msg"]
    assert _share(moved, CPU_B) >= SHARE
    assert int(mask, 16) == 0
    assert any("queue(s) put back" in e["msg"] or e.get("event") == "undo" for e in events)
