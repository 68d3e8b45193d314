"""Policies and the auto loop's hysteresis, on fixture topologies and synthetic snapshots."""
import os
import time
from dataclasses import replace

import pytest

from steer.steering.auto import AutoSteer, AutoStopped, run
from steer.model.classify import Placement
from steer.model.reports import CpuReport, FlowReport, Snapshot
from steer.steering.policies import (Decision, PolicyError, llc_peer, load_policy, same_core, spread,
                                     static)
from steer.model.topology import read_topology
from steer.model.capabilities import MISSING, WORKS, Capabilities, Figure
from steer.model.samples import FlowId
from sysfs import FakeCpu, epyc_chiplet, sandy_bridge_2s_6c, write_tree, xeon_2s_smt

VM = os.path.join(os.path.dirname(__file__), "../support/fixtures/sysfs-vm-2cpu")
CAPS = Capabilities(*[Figure(WORKS, "")] * 3, Figure(MISSING, ""))


def flow(n, kernel_cpu, app_cpu, rate_bps=10e9, port=5201):
    fid = FlowId("tcp", "198.18.0.1", 40000 + n, "198.18.0.2", port)
    return FlowReport(fid, 1.0, int(rate_bps / 8), 1000, kernel_cpu, 1.0, 0.1, 0.0, app_cpu, 1.0,
                      0.3, 0.0, int(rate_bps / 8), 100, 4242, "iperf3", None, None,
                      Placement("same-core", True), {}, {})


def snap(flows, busy=None, ncpu=2):
    busy = busy or {}
    cpus = [CpuReport(c, 0, busy.get(c, 0.0), 0.0, 0.0, 0.0, None, None) for c in range(ncpu)]
    return Snapshot(1.0, flows, cpus, CAPS, 0, 1024, 0, 0, 0)


def test_llc_peer_this_vm():
    (d,) = llc_peer(snap([flow(1, 0, 0)]), read_topology(VM))
    assert d.cpu == 1 and "L3" in d.reason


def test_llc_peer_never_the_readers_core_or_sibling(tmp_path):
    t = read_topology(xeon_2s_smt(str(tmp_path)))
    (d,) = llc_peer(snap([flow(1, 3, 3)], ncpu=48), t)
    assert d.cpu not in (3, 27) and t.cpus[d.cpu].socket == 0 and d.cpu == 0
    (d,) = llc_peer(snap([flow(1, 27, 27)], {0: 0.9}, ncpu=48), t)
    assert d.cpu == 1   # CPU 0 is busy: the least loaded peer
    (d,) = llc_peer(snap([flow(1, 12, 3)], ncpu=48), t)   # cross socket now
    assert t.cpus[d.cpu].socket == 0


def test_llc_peer_keeps_a_good_placement(tmp_path):
    t = read_topology(xeon_2s_smt(str(tmp_path)))
    (d,) = llc_peer(snap([flow(1, 5, 3)], ncpu=48), t)
    assert d.cpu == 5 and d.reason.startswith("already")


def test_llc_peer_judges_a_steered_flow_by_its_stack_cpu(tmp_path):
    # 2026-11-26, the big-host guest: after the move 9 -> 1 the arrival CPU 9 (generic XDP,
    # linearising) kept most of the flow's kernel time, CPU 1 its stack and now the most load of
    # the reader's LLC: judged by its kernel CPU the flow went on to CPU 2
    t = read_topology(xeon_2s_smt(str(tmp_path)))
    f = replace(flow(1, 12, 3), stack_cpu=5, kernel_cpus={12: 0.3, 5: 0.2})
    (d,) = llc_peer(snap([f], {5: 0.2, 12: 0.3}, ncpu=48), t)
    assert d.cpu == 5 and d.reason.startswith("already")


def test_spread_leaves_a_flow_alone_on_its_cpu(tmp_path):
    # its own work made its CPU the busier of two: it went to the other and back at every hold
    t = read_topology(VM)
    for cpu in (0, 1):
        f = replace(flow(1, cpu, cpu), kernel_seconds=0.4, kernel_cpus={cpu: 0.4}, stack_cpu=cpu)
        (d,) = spread(snap([f], {cpu: 0.4}), t)
        assert d.cpu == cpu


def test_llc_peer_chiplet_stays_in_the_ccx(tmp_path):
    t = read_topology(epyc_chiplet(str(tmp_path)))
    (d,) = llc_peer(snap([flow(1, 0, 5)], ncpu=32), t)
    assert d.cpu in (4, 6, 7, 20, 22, 23)
    assert t.cpus[d.cpu].llc == t.cpus[5].llc


def test_llc_peer_papers_machine(tmp_path):
    t = read_topology(sandy_bridge_2s_6c(str(tmp_path)))
    (d,) = llc_peer(snap([flow(1, 1, 0)], ncpu=12), t)
    assert d.cpu == 2   # even CPUs are socket 0


def test_llc_peer_spreads_several_flows(tmp_path):
    t = read_topology(xeon_2s_smt(str(tmp_path)))
    ds = llc_peer(snap([flow(1, 3, 3), flow(2, 3, 3)], ncpu=48), t)
    assert len({d.cpu for d in ds}) == 2


def test_llc_peer_single_core_socket_has_no_answer(tmp_path):
    root = write_tree(str(tmp_path), [FakeCpu(0, 0, 0, [0], [0], [0], 0, 0),
                                      FakeCpu(1, 1, 0, [1], [1], [1], 1, 1)])
    assert llc_peer(snap([flow(1, 0, 0)]), read_topology(root)) == []


def test_slow_and_readerless_flows_are_left_alone():
    t = read_topology(VM)
    assert llc_peer(snap([flow(1, 0, 0, rate_bps=1000), flow(2, 0, None)]), t) == []


def test_same_core_and_spread():
    t = read_topology(VM)
    assert [d.cpu for d in same_core(snap([flow(1, 1, 0)]), t)] == [0]
    ds = spread(snap([flow(1, 0, 0), flow(2, 0, 0)]), t)
    assert sorted(d.cpu for d in ds) == [0, 1]


def _write(tmp_path, name, text, mode=0o644):
    p = tmp_path / name
    p.write_text(text)
    os.chmod(p, mode)
    return str(p)


def test_static_rules(private_tmp):
    path = _write(private_tmp, "r.toml", '[[rule]]\nflow = "proto=tcp,dport=5201"\ncpu = 1\n')
    (d,) = static(path)(snap([flow(1, 0, 0), flow(2, 0, 0, port=80)]), read_topology(VM))
    assert d.cpu == 1 and d.flow.dport == 5201


def test_static_rules_select_by_the_readers_workload(private_tmp):
    from dataclasses import replace
    from steer.model.workloads import Workload
    pod = Workload(container_id="a" * 64, pod_uid="u").with_pod("shop", "api-0", "server")
    flows = [replace(flow(1, 0, 0, port=8080), app_workload=pod, app_cgroup="/kubepods/x"),
             replace(flow(2, 0, 0, port=9090), app_workload=pod, app_cgroup="/kubepods/x"),
             replace(flow(3, 0, 0, port=80), app_workload=Workload(unit="nginx.service"),
                     app_cgroup="/system.slice/nginx.service"),
             flow(4, 0, 0, port=8080)]   # its reader not seen: no workload
    path = _write(private_tmp, "w.toml",
                  '[[rule]]\npod = "shop/api-*"\nflow = "dport=8080"\ncpu = 1\n'
                  '[[rule]]\ncontainer = "server"\ncpu = 0\n'
                  '[[rule]]\ncgroup = "/system.slice/*"\nunit = "nginx.*"\ncpu = 1\n')
    got = {d.flow.sport: (d.cpu, d.reason) for d in static(path)(snap(flows), read_topology(VM))}
    assert got == {40001: (1, "static rule flow=dport=8080,pod=shop/api-*"),
                   40002: (0, "static rule container=server"),
                   40003: (1, "static rule unit=nginx.*,cgroup=/system.slice/*")}


@pytest.mark.parametrize("text,msg", [
    ("[[rule]\n", "not valid TOML"),
    ("x = 1\n", r"expected one or more \[\[rule\]\]"),
    ('[[rule]]\nflow = "proto=tcp"\ncpu = "one"\n', "cpu must be a CPU number"),
    ('[[rule]]\nflow = 5\ncpu = 1\n', "flow must be a non-empty string"),
    ('[[rule]]\nflow = "proto=icmp"\ncpu = 1\n', "tcp or udp"),
    ('[[rule]]\nflow = "proto=tcp"\ncpu = 1\nprio = 2\n', "no other key"),
    ('[[rule]]\ncpu = 1\n', "one or more of flow, pod"),
    ('[[rule]]\npod = ""\ncpu = 1\n', "pod must be a non-empty string"),
    ('[[rule]]\nunit = 7\ncpu = 1\n', "unit must be a non-empty string"),
])
def test_static_rules_errors(private_tmp, text, msg):
    with pytest.raises(PolicyError, match=msg):
        load_policy(_write(private_tmp, "bad.toml", text))


def test_user_policy_file(private_tmp):
    path = _write(private_tmp, "p.py", "from steer.steering.policies import Decision\n"
                  "def place(snapshot, topology):\n"
                  "    return [Decision(f.flow, 1, 'mine') for f in snapshot.flows]\n")
    name, place = load_policy(path)
    assert [d.cpu for d in place(snap([flow(1, 0, 0)]), read_topology(VM))] == [1]


@pytest.mark.parametrize("text,mode,msg", [
    ("def place(s, t): return []\n", 0o666, "policy file is writable by group or others"),
    ("def place(s, t): return []\n", 0o620, "policy file is writable by group or others"),
    ("import nonexistent_module_x\n", 0o644, "failed to load: ModuleNotFoundError"),
    ("def plac(s, t): return []\n", 0o644, "no place"),
    ("def place(:\n", 0o644, "SyntaxError"),
])
def test_user_policy_file_refused(private_tmp, text, mode, msg):
    with pytest.raises(PolicyError, match=msg):
        load_policy(_write(private_tmp, "p.py", text, mode))


def test_unknown_policy():
    with pytest.raises(PolicyError, match="unknown policy"):
        load_policy("fastest")


class Recorder:
    """Stands in for the XDP rule table: records what the engine asks for."""

    def __init__(self):
        self.calls = []

    def pin(self, spec, cpu):
        self.calls.append(("pin", str(spec), cpu))
        return None, 0

    def unpin(self, spec):
        self.calls.append(("unpin", str(spec)))
        return 0


def test_hysteresis_confirm_and_hold():
    t = read_topology(VM)
    want = {"cpu": 1}
    policy = lambda s, topo: [Decision(f.flow, want["cpu"], "test") for f in s.flows]  # noqa: E731
    rec, lines = Recorder(), []
    eng = AutoSteer(policy, rec, t, confirm=2, hold=10, expire=3, window=2, log=lambda m, **_: lines.append(m))
    s = snap([flow(1, 0, 0)])
    eng.step(s, now=-1)                                 # the flow's first interval: no window
    assert eng.step(s, now=0) == []                     # asked once: not yet
    (c,) = eng.step(s, now=1)                           # asked twice: move
    assert (c.old_cpu, c.new_cpu) == (0, 1) and rec.calls[-1][0] == "pin"
    assert "kernel CPU 0 -> CPU 1: test" in lines[-1]
    want["cpu"] = 0
    assert eng.step(s, now=2) == [] and eng.step(s, now=3) == []   # confirmed, but held
    (c,) = eng.step(s, now=12)
    assert (c.old_cpu, c.new_cpu) == (1, 0)


def test_flapping_answers_never_confirm():
    t = read_topology(VM)
    answers = iter([1, 0, 1, 0, 1, 0])
    policy = lambda s, topo: [Decision(f.flow, next(answers), "flap") for f in s.flows]  # noqa: E731
    rec = Recorder()
    eng = AutoSteer(policy, rec, t, confirm=2, hold=0, log=lambda _: None)
    s = snap([flow(1, 0, 0)])
    assert all(eng.step(s, now=i) == [] for i in range(6)) and rec.calls == []


def test_policy_error_keeps_placement_and_logs():
    t = read_topology(VM)

    def broken(s, topo):
        raise RuntimeError("boom")
    rec, lines = Recorder(), []
    eng = AutoSteer(broken, rec, t, log=lambda m, **_: lines.append(m))
    assert eng.step(snap([flow(1, 0, 0)]), now=0) == [] and rec.calls == []
    assert "policy error: RuntimeError: boom; keeping the last good placement" in lines[0]


def test_offline_cpu_decisions_are_ignored_and_gone_flows_expire():
    t = read_topology(VM)
    rec, lines = Recorder(), []
    eng = AutoSteer(lambda s, topo: [Decision(f.flow, 7, "x") for f in s.flows], rec, t,
                    confirm=1, log=lambda m, **_: lines.append(m))
    eng.step(snap([flow(1, 0, 0)]), now=0)
    assert rec.calls == [] and "not online" in lines[0]
    eng = AutoSteer(lambda s, topo: [Decision(f.flow, 1, "x") for f in s.flows], rec, t, window=2,
                    confirm=1, expire=2, log=lambda m, **_: lines.append(m))
    eng.step(snap([flow(1, 0, 0)]), now=-1)   # a move waits for its before window, which
    eng.step(snap([flow(1, 0, 0)]), now=0)    # leaves out the flow's first interval
    (c,) = eng.step(snap([flow(1, 0, 0)]), now=1)
    assert c.new_cpu == 1 and eng.trials
    eng.step(snap([]), now=2)
    (c,) = eng.step(snap([]), now=3)
    assert c.new_cpu is None and rec.calls[-1][0] == "unpin" and not eng.placed
    assert not eng.trials and eng.outcomes == {"ended": 1}


def test_a_rule_whose_cpu_goes_offline_falls_back_with_a_warning(tmp_path):
    """The flow is pinned to CPU 2; CPU 2 goes offline: its rule goes at once, with a warning, and
    the policy cannot put it back there."""
    up = read_topology(xeon_2s_smt(str(tmp_path / "up")))
    down = read_topology(xeon_2s_smt(str(tmp_path / "down"), offline=(2,)))
    rec, lines = Recorder(), []
    eng = AutoSteer(lambda s, topo: [Decision(f.flow, 2, "x") for f in s.flows], rec, up,
                    confirm=1, window=2, log=lambda m, **_: lines.append(m))
    for now in range(3):
        eng.step(snap([flow(1, 0, 0)]), now=now)
    assert eng.placed == {flow(1, 0, 0).flow: 2}
    eng.topo = down
    (c,) = eng.step(snap([flow(1, 2, 0)]), now=20)
    assert c.new_cpu is None and rec.calls[-1][0] == "unpin" and not eng.placed
    assert "warning: CPU 2 of the rule for" in lines[-3] and "went offline" in lines[-3]
    assert "CPU 2 is offline" in lines[-2] and "not online; ignored" in lines[-1]


class FakeIntervals:
    """Stands in for flows.Intervals: the same snapshot every interval."""

    def __init__(self, topo, s):
        self.topo, self.snap, self.calls = topo, s, 0

    def __call__(self):
        self.calls += 1
        return self.snap


def test_run_steps_every_period_until_the_duration():
    t = read_topology(VM)
    asked = []
    eng = AutoSteer(lambda s, topo: asked.append(s) or [], Recorder(), t, log=lambda _: None)
    iv = FakeIntervals(t, snap([flow(1, 0, 0)]))
    run(eng, iv, period=0.05, duration=0.3, sysfs=VM)
    assert 3 <= iv.calls <= 7 and len(asked) == iv.calls


class FakeClock:
    """auto.run's clock, so that the schedule is tested on its arithmetic, not on this host's
    load: sleep() advances monotonic() by exactly what was asked."""
    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now

    def sleep(self, s):
        assert s >= 0
        self.now += s


@pytest.mark.parametrize("step,steps", [(0.02, 10), (0.0, 11), (0.07, 5)])
def test_run_keeps_its_schedule_when_steps_take_time(monkeypatch, step, steps):
    """N intervals take N periods, not N periods plus what each step took (a read waits for the
    gap between the tracer's windows): a step of 0.02 s every 0.05 s, 10 of them in 0.52 s
    (instant steps: the 11th reads the last 0.02 s); a step that runs past its slot (0.07 s) is
    followed at the next slot, not at once."""
    import steer.steering.auto as auto
    clock = FakeClock()
    monkeypatch.setattr(auto, "time", clock)
    t = read_topology(VM)
    eng = AutoSteer(lambda s, topo: clock.sleep(step) or [], Recorder(), t, log=lambda _: None)
    iv = FakeIntervals(t, snap([flow(1, 0, 0)]))
    began = clock.now
    run(eng, iv, period=0.05, duration=0.52, sysfs=VM)
    assert iv.calls == steps and clock.now - began < 0.52 + 0.05 + step, (iv.calls, clock.now - began)


def test_run_stops_when_the_device_is_gone():
    t = read_topology(VM)
    eng = AutoSteer(lambda s, topo: [], Recorder(), t, log=lambda _: None)
    iv = FakeIntervals(t, snap([]))
    with pytest.raises(AutoStopped, match="stopping: veth-rx was removed, so there is nothing"):
        run(eng, iv, period=0.01, detached=lambda: "veth-rx was removed", sysfs=VM)
    assert iv.calls == 0


def test_run_reads_the_topology_again_after_hotplug(tmp_path):
    before = read_topology(xeon_2s_smt(str(tmp_path / "a")))
    now = xeon_2s_smt(str(tmp_path / "b"), offline=(5,))
    eng = AutoSteer(lambda s, topo: [], Recorder(), before, log=lambda _: None)
    iv = FakeIntervals(before, snap([]))
    run(eng, iv, period=0.01, duration=0.05, sysfs=now)
    assert 5 in before.online and 5 not in eng.topo.online and iv.topo is eng.topo


def test_auto_log_lines_carry_their_time_and_json_carries_the_moves_fields():
    import io
    import json
    from datetime import datetime, timezone
    from steer.cli.logs import make_logger
    at = lambda: datetime(2026, 11, 23, 7, 45, 1, 234000, tzinfo=timezone.utc)  # noqa: E731
    text, js = io.StringIO(), io.StringIO()
    for log in (make_logger("text", text, at), make_logger("json", js, at)):
        log("warning: CPU 3 of the rule for x went offline")
        log("tcp a:1 -> b:2: kernel CPU 0 -> CPU 1: reason", flow="tcp a:1 -> b:2", old_cpu=0,
            new_cpu=1, reason="reason", dry_run=False)
    assert text.getvalue().splitlines() == [
        "2026-11-23T07:45:01.234Z warning: CPU 3 of the rule for x went offline",
        "2026-11-23T07:45:01.234Z tcp a:1 -> b:2: kernel CPU 0 -> CPU 1: reason"]
    first, move = (json.loads(l) for l in js.getvalue().splitlines())
    assert first == {"time": "2026-11-23T07:45:01.234Z", "level": "warning",
                     "msg": "warning: CPU 3 of the rule for x went offline"}
    assert move["level"] == "info" and move["old_cpu"] == 0 and move["new_cpu"] == 1
    assert move["dry_run"] is False and move["flow"] == "tcp a:1 -> b:2"


def test_a_move_is_logged_with_its_fields():
    t = read_topology(VM)
    f = flow(1, 0, 0).flow
    calls = []
    eng = AutoSteer(lambda s, topo: [Decision(f, 1, "test")], None, t, confirm=1,
                    log=lambda m, **fields: calls.append((m, fields)))
    eng.step(snap([flow(1, 0, 0)]), now=0.0)
    ((msg, fields),) = calls
    assert msg.endswith("kernel CPU 0 -> CPU 1: test (dry run)")
    assert fields == {"flow": str(f), "old_cpu": 0, "new_cpu": 1, "reason": "test",
                      "method": "cpumap", "queue": None, "dry_run": True, "event": "move"}


def test_llc_peer_prefers_the_nics_numa_node_within_the_llc(tmp_path):
    """Sub-NUMA clustering: one socket, one L3, two NUMA nodes. The kernel side goes to an LLC
    peer of the reader on the NIC's node, where the packets' memory is; without a NIC (or on a
    veth) any peer."""
    from dataclasses import replace
    cpus = [FakeCpu(n, 0, n, [n], [n], list(range(8)), 0, 0 if n < 4 else 1) for n in range(8)]
    t = read_topology(write_tree(str(tmp_path), cpus))
    f = flow(1, 1, 1)
    (d,) = llc_peer(snap([f], ncpu=8), t)
    assert d.cpu == 0
    (d,) = llc_peer(snap([replace(f, rx_device={"dev": "eth0", "numa_node": 1})], ncpu=8), t)
    assert d.cpu == 4 and "NIC's NUMA node 1" in d.reason
    (d,) = llc_peer(snap([replace(f, rx_device={"dev": "veth0", "numa_node": None})], ncpu=8), t)
    assert d.cpu == 0


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o1777])
def test_a_policy_in_a_directory_others_may_write_is_refused(private_tmp, mode):
    """sshd's StrictModes: whoever may write a directory above the file may replace it."""
    d = private_tmp / "shared"
    d.mkdir()
    path = _write(d, "p.py", "def place(s, t): return []\n")
    os.chmod(d, mode)
    with pytest.raises(PolicyError, match=f"its directory {d} is writable by group or others"):
        load_policy(path)
    with pytest.raises(PolicyError, match="writable by group or others"):
        load_policy(_write(d, "r.toml", '[[rule]]\nflow = "dport=1"\ncpu = 0\n'))


def test_a_policy_in_tmp_is_refused(tmp_path):
    with pytest.raises(PolicyError, match="its directory /tmp is writable by group or others"):
        load_policy(_write(tmp_path, "p.py", "def place(s, t): return []\n"))


def test_a_policy_runs_from_its_source_and_leaves_no_bytecode(private_tmp):
    """A stale or planted __pycache__/p.cpython-*.pyc must not run in place of the source."""
    import importlib.util
    import py_compile
    path = _write(private_tmp, "p.py", "from steer.steering.policies import Decision\n"
                  "def place(s, t): return [Decision(f.flow, 1, 'source') for f in s.flows]\n")
    evil = private_tmp / "evil.py"
    evil.write_text("def place(s, t): raise SystemExit('the bytecode ran')\n")
    _, place = load_policy(path)
    assert not os.path.exists(private_tmp / "__pycache__")
    # bytecode that Python's import would run without looking at the source at all
    py_compile.compile(str(evil), cfile=importlib.util.cache_from_source(path),
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    _, place = load_policy(path)
    assert [d.reason for d in place(snap([flow(1, 0, 0)]), read_topology(VM))] == ["source"]


def test_a_policy_may_define_dataclasses(private_tmp):
    _, place = load_policy(_write(private_tmp, "p.py", "from dataclasses import dataclass\n"
                                  "@dataclass\nclass R:\n    cpu: int\n"
                                  "def place(s, t): return []\n"))
    assert place(snap([]), read_topology(VM)) == []


def test_auto_remembers_no_more_flows_than_the_last_interval_had():
    """20,000 short connections, each asked about once and gone: the engine's memory stays with
    the flows of the last interval (it kept every flow it ever saw)."""
    t = read_topology(VM)
    policy = lambda s, topo: [Decision(f.flow, 1, "test") for f in s.flows]  # noqa: E731
    eng = AutoSteer(policy, Recorder(), t, confirm=3, hold=10, log=lambda m, **_: None)
    for step in range(200):
        eng.step(snap([flow(step * 100 + i, 0, 0) for i in range(100)]), now=step)
    assert len(eng._pending) == 100 and len(eng._moved_at) == 0 and not eng.placed
    # a flow moved at t is held until t + hold, then forgotten
    eng = AutoSteer(policy, Recorder(), t, confirm=1, hold=10, window=2, log=lambda m, **_: None)
    for now in range(3):
        eng.step(snap([flow(1, 0, 0)]), now=now)
    assert len(eng._moved_at) == 1
    eng.step(snap([]), now=12)
    assert eng._moved_at == {}
