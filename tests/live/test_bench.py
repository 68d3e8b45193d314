"""The benchmarks' smoke mode: each one runs end to end and writes its JSON and table. The
measurements themselves are `python -m bench.NAME` without --smoke (docs/performance.md)."""
import json
import os
import re
import subprocess
import sys
import time

import pytest

from helpers import CALM, ROOT, alone, hold_accuracy_rows, live
from steer.trace.tracer import net_rx_softirqs

pytestmark = [live, alone]
BENCHES = ["overhead", "bulk", "rr", "syscall_tax", "roundtrip", "event_cost", "steering_cost", "scale",
           "scale_cpus", "peer", "fuzz"]   # and soak, below


@pytest.mark.parametrize("name", BENCHES)
def test_smoke(name, tmp_path):
    r = subprocess.run([sys.executable, "-m", f"bench.{name}", "--smoke", "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    data = json.load(open(tmp_path / f"{name}.json"))
    assert data["benchmark"] == name and data["smoke"] is True
    table = open(tmp_path / f"{name}.md").read()
    assert table.startswith("### ") and "|---" in table


def test_smoke_udp_round_trips(tmp_path):
    r = subprocess.run([sys.executable, "-m", "bench.roundtrip", "--smoke", "--proto", "udp",
                        "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT,
                       timeout=300, env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    data = json.load(open(tmp_path / "roundtrip_udp.json"))
    assert data["proto"] == "udp" and data["smoke"] is True
    assert "one-byte UDP round trips" in open(tmp_path / "roundtrip_udp.md").read()


def test_what_steer_refuses_ends_a_bench_in_one_line(tmp_path):
    """No iperf3 on PATH: the lab's refusal, in one line and exit 1, not a traceback."""
    r = subprocess.run([sys.executable, "-m", "bench.overhead", "--smoke", "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT, timeout=60,
                       env=dict(os.environ, PYTHONPATH=ROOT, PATH=str(tmp_path)))
    assert r.returncode == 1 and r.stderr.strip() == "overhead: iperf3 not found: apt-get install iperf3"


def test_sigterm_tears_the_lab_down(tmp_path):
    """A bench run in the background and stopped with kill: its lab goes with it."""
    from steer.experiment.lab import lab_namespaces
    p = subprocess.Popen([sys.executable, "-m", "bench.bulk", "--pairs", "50", "--out", str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    mine = f"steerlab-{p.pid}-"
    deadline = time.monotonic() + 60
    while not [n for n in lab_namespaces() if n.startswith(mine)]:
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.2)
    time.sleep(3)   # into its windows
    p.terminate()
    try:
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        # it ran on: kill it and its lab here, or its tracer and flows skew every later test
        from steer.experiment.lab import remove_stale_labs
        p.kill()
        _, err = p.communicate()
        remove_stale_labs()
        pytest.fail(f"bulk ran on for 60 s after SIGTERM: {err[-2000:]}")
    assert p.returncode == 1 and err.strip().endswith("bulk: stopped before the measurement ended; "
                                                      "nothing was written"), err
    assert not [n for n in lab_namespaces() if n.startswith(mine)]
    assert not (tmp_path / "bulk.json").exists()


def test_a_lab_with_rfs_puts_the_hosts_flow_table_back_even_after_kill_9():
    """Lab(rfs=True) (the accuracy matrix's RPS scenario) sets the host's global RFS table
    (net.core.rps_sock_flow_entries) and its veth's queue: on leaving, the table is as it found
    it; a lab killed with SIGKILL leaves it set, and the next lab puts it back."""
    from steer.experiment.lab import (RFS_SAVED, RFS_SYSCTL, Lab, LabFlow, remove_stale_labs,
                                      usable_cpus)
    a, b = usable_cpus()[0], usable_cpus()[-1]

    def table() -> int:
        with open(RFS_SYSCTL) as f:
            return int(f.read())

    before = table()
    with Lab([LabFlow(a, b)], rfs=True) as lab:
        assert table() >= 4096 and os.path.exists(RFS_SAVED)
        r = subprocess.run(["ip", "netns", "exec", lab.rx, "cat",
                            "/sys/class/net/veth-rx/queues/rx-0/rps_flow_cnt",
                            "/sys/class/net/veth-rx/queues/rx-0/rps_cpus"],
                           capture_output=True, text=True)
        assert r.stdout.split()[0] == "4096", r.stdout
        assert int(r.stdout.split()[1].replace(",", ""), 16) == (1 << a) | (1 << b), r.stdout
    assert table() == before and not os.path.exists(RFS_SAVED)
    p = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                          "from steer.experiment.lab import Lab, LabFlow\n"
                          f"lab = Lab([LabFlow({a}, {b})], rfs=True).up()\n"
                          "print('up', flush=True)\ntime.sleep(60)"],
                         stdout=subprocess.PIPE, text=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        assert p.stdout.readline().strip() == "up"
        assert table() >= 4096
    finally:
        p.kill()
        p.wait()
    assert table() >= 4096 and os.path.exists(RFS_SAVED)   # left behind by the kill
    remove_stale_labs()   # what every lab does as it starts
    assert table() == before and not os.path.exists(RFS_SAVED)


def test_soak_kill_9_of_export_and_auto_leaves_nothing_after_reset(tmp_path):
    """bench.soak ends by SIGKILL of `steer export` and `steer auto` under churn, then `steer
    reset`: no program, link or pin of steer may be left (bpftool's listing, the pin root)."""
    r = subprocess.run([sys.executable, "-m", "bench.soak", "--smoke", "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    data = json.load(open(tmp_path / "soak.json"))
    assert data["benchmark"] == "soak" and data["smoke"] is True
    assert open(tmp_path / "soak.md").read().startswith("### ")
    s = data["summary"]
    assert s["alive_until_the_end"] == {n: True for n in ("redis", "export", "auto", "churn", "scan")}
    assert s["after_kill_9_and_reset"] == {"reset_exit": 0, "left_in_kernel": []}
    assert s["failed_scrapes"] == 0 and s["flow_entries_max"] > 1000   # the churn reached it


ACCURACY_HZ = 9973   # a prime near 10 kHz: the kernel's own limit is 100 kHz


def test_the_accuracy_matrix_holds_every_figure_to_its_bounds(tmp_path, held):
    """bench.accuracy's whole matrix (every scenario of issue 31, both timing modes, the sampled
    one with --windows off: what the windows change, the flows' split of the receive time and
    UDP bytes, test_windows_live holds, with scenarios 3, 5 and 9) against its truths; the
    bench exits 1 on any figure outside its bounds. Its 21 sampled times share
    odds of 1 in 10,000 that the matrix fails by chance (bench.odds: ~4.58 deviations each), and
    at 9,973 Hz 3 s windows give each enough samples that a bound so made still fails a figure
    1.4x its truth: the widest, same-core NET_RX, +-31% here (2026-11-27), would be +-37% on half
    its samples; at 997 Hz it was +-53%. Not a multiple of 1000: iperf3 paces its UDP sender
    with a 1 ms timer, and at 1000 Hz the sampling timer fired in step with it, just before each
    burst, and saw 0-2% of its NET_RX time in 3 of 6 runs (2026-11-26; bpftrace's profile:hz:1000
    the same).

    Checked by mutation once (`python -m bench.accuracy --seconds 3 --sample-hz 9973 --mutate
    0.85`, and 1.15 from the same run's figures, 2026-11-28): every byte figure and every exact
    time fails either way, and so do the sampled threaded-NAPI kthread and recv()-only reader.
    Again for the schedstat truths once their exact bounds were +-5% (scenarios 3, 4, 5 and the
    reader, --mutate 0.85 and 1.15, 2026-11-30): every exact kthread and reader time fails
    either way (-13.7% .. -15.9%, +13.7% .. +16.8% against +-5.0% .. +-6.4%, the bounds with
    their CPU's steal, a tick or none).
    Again the sampled kthread times once held as their kthread's whole run time, not a count
    (bench.odds.whole_task_spread; `--modes sampled --scenarios 3,4,5`, 2026-12-01): cpumap on
    the reader's CPU -1.6% within +-5.2%, on another +0.8% within +-6.3%, threaded NAPI -0.2%
    within +-5.7%; each 0.85x or 1.15x off fails. And the recv()-only reader's, its whole run
    time but for its user-mode samples: -1.0% within +-6.6% (+-12% as a count), failed either
    way.
    The sampled NET_RX times against brackets less their own cost (bench.peer.NetRxBrackets) do
    not: at 9,973 Hz the clock itself lands in NET_RX 31% short to 17% over its share of the
    time in this VM, by scenario and run (docs/testing.md), so bounds that hold those at
    these odds are wider than 15%; they still fail a figure 1.4x off (the check at the end).
    What steer makes of the samples it takes is held count for count instead: its NET_RX
    samples against the clock's expiries that began inside the brackets (the truth's
    hrtimer_expire_entry), each row's bounds moved by the share its brackets' own programs took
    of their time in that run (4.4% to 6.9% here): -4.5% to -8.2% within bounds of about
    -11%..-2% (`--modes sampled --scenarios 1,2,6,7,8,9`, 2026-12-01, after the UDP row read
    -8.6% to -9.0% against a fixed -8.6% three clean clones running), and with --mutate 0.85
    and 1.15 every such figure fails (-20.0% .. -21.9%, +6.3% .. +9.6%). So is each flow's
    share where RPS gives each CPU's in-taking softirqs to the lab's flows alone (scenario 9,
    flows_landing_rows): the flows' samples per CPU against the expiries in those softirqs,
    -3.6% .. -8.6% in 6 runs, and -17.8% .. -22.4%, +6.0% .. +11.5% with --mutate 0.85 and 1.15,
    which fail (2026-12-02); the flows' seconds there (-57%..+32%) would not. And the exact
    mode against the peer tool, libbpf-tools `softirqs`, over the tool's own window from its
    attach to its read, less the steal inside the brackets over it: -1.0% to -2.6% within
    -10%..+5% (32 figures, 7 runs), and with --mutate 0.85 and 1.15 every such figure fails
    (-16.0% .. -17.2%, +12.1% .. +13.7%; `--modes exact --scenarios 1,2,6,7,8`, 2026-12-02),
    where it had been held to -25%..+25% with the steal left in."""
    r = subprocess.run([sys.executable, "-m", "bench.accuracy", "--seconds", "3", "--sample-hz",
                        str(ACCURACY_HZ), "--windows", "off", "--out", str(tmp_path)],
                       capture_output=True, text=True,
                       cwd=ROOT, timeout=900, env=dict(os.environ, PYTHONPATH=ROOT))
    print(r.stdout[-6000:])
    try:
        rows = json.load(open(tmp_path / "accuracy.json"))["rows"]
    except OSError:
        rows = []
    # each figure in the run's record before any verdict: a failed run's figures are the ones
    # worth having in the history
    failed = hold_accuracy_rows(held, rows)
    # the figures out of bounds first, each with what else ran beside it (bench.bystanders)
    assert r.returncode == 0, "\n".join(failed) + "\n" + r.stdout[-4000:] + r.stderr[-2000:]
    data = json.load(open(tmp_path / "accuracy.json"))
    rows = data["rows"]
    from bench.accuracy import SCENARIOS
    # every lab scenario, and the recv()-only reader after them
    assert {r["n"] for r in rows} == set(range(1, len(SCENARIOS) + 2))
    assert any(r["scenario"] == "IPv6 (loopback)" for r in rows)
    assert {r["mode"] for r in rows} == {"sampled", "exact"}
    # each figure judged (recorded above: tests/support/record.py)
    # every row judged, but the peer's agreement where the tool's own start spoilt its reading
    # (bench.accuracy says so in the row's truth_error)
    judged = [r for r in rows if not r.get("truth_error")]
    assert all(r.get("ratio") is None for r in rows if r.get("truth_error"))
    assert not failed and all(r["ok"] for r in judged), failed or [r for r in judged if not r["ok"]]
    assert data["out_of_bounds"] == 0
    # and the bounds can catch what they are for: every sampled time's upper bound under +40%,
    # but for what the host took from its CPU over the scenario (steal_spread), which widens a
    # schedstat truth's bounds by as much and says that run could not tell (clean clone 163: the
    # host took 3-6.5 CPU-s of a 10 s scenario, and bounds of +-68% and +-134% held)
    def model_high(r: dict) -> float:
        return r["bounds"][1] - (r.get("extra_high", 0.0) if r.get("cpu_steal_seconds") else 0.0)
    sampled = [r for r in rows if r["mode"] == "sampled" and r.get("samples") is not None]
    stolen = [(r["scenario"], r["cpu_steal_seconds"], r["bounds"]) for r in sampled
              if r.get("cpu_steal_seconds") and r["bounds"][1] >= 0.40]
    if stolen:
        print("bounds the host's steal widened past +40% (CPU-s taken):", stolen)
    wide = [(r["scenario"], r["bounds"]) for r in sampled if model_high(r) >= 0.40]
    assert not wide, wide


def test_the_per_cpu_net_rx_truth_counts_every_softirq_and_knows_its_own_cost():
    """bench.peer.NetRxBrackets, the matrix's per-CPU NET_RX truth, on a UDP flow of small
    datagrams (a steady ~10^5 softirqs a second on the sender's CPU):
    - its brackets are the kernel's NET_RX softirqs: as many as /proc/softirqs counts on that CPU
      over the same window (but for those run between the two reads, ~0.1 ms apart: 1% + 50);
    - what it takes off each bracket for its own cost, the time from one program's clock read to
      the next one's (a return, a call and a clock read: a pair of programs shaped like the
      bracket's times it beside it, ~80-90 ns here), is what one program more that reads the
      clock adds inside a bracket: the bracket's mean with floor.bpf.o's floor_clock attached
      after it, in every other 0.2 s slice of 40, against without. That read 1.0-1.19x the gap
      (3 runs, 2026-11-29; an empty program adds 0.45x: the dispatch alone, without the clock);
      taking the slices' noise as 0.15 of the ratio (the 3 runs spread 0.1), 0.5x-2x lies over
      3.5 spreads from them either way (a false failure under 1 in 5,000), and fails a gap that
      timed the dispatch alone (2.4x: the truth would then read ~5% high here). Judged where the
      host left the CPUs calm (helpers.CALM) over both: a preemption inside a bracket or a gap
      is its time (clean clone 187, with the host taking up to 23% of the CPUs, read a gap of
      272 ns and 120 ns added), and otherwise shown and skipped, the counts still held."""
    from bench.peer import NetRxBrackets, steal_seconds
    from steer.experiment.lab import Lab, LabFlow
    from steer.kernel.objects import BpfObject, bpf_dir

    cpu = 0
    with Lab([LabFlow(cpu, cpu, udp_rate="100M", udp_size=64)], seconds=12) as lab:
        lab.start_servers()
        lab.start_clients()
        time.sleep(1.0)
        truth = NetRxBrackets()
        floor = BpfObject(str(bpf_dir() / "floor.bpf.o"), only={"floor_clock"}, no_pin=True)
        try:
            c0 = net_rx_softirqs()
            s0, t0 = steal_seconds(), time.monotonic()
            truth.measure()
            time.sleep(2.0)
            whole = truth.measure()[cpu]
            c1 = net_rx_softirqs()
            kernel = c1[cpu] - c0[cpu]
            assert abs(whole["count"] - kernel) <= 0.01 * kernel + 50, (whole, kernel)
            assert whole["ns"] == pytest.approx(whole["raw"] - whole["count"] * whole["overhead"])
            # mean ns a bracket, without and with one empty program more inside it
            sums = {False: [0, 0], True: [0, 0]}
            for i in range(40):
                extra = bool(i % 2)
                if extra:
                    floor.attach("floor_clock")
                time.sleep(0.2)
                part = truth.measure().get(cpu, {"raw": 0, "count": 0})
                if extra:
                    floor.detach("floor_clock")
                sums[extra][0] += part["raw"]
                sums[extra][1] += part["count"]
            stolen = (steal_seconds() - s0) / ((time.monotonic() - t0) * os.cpu_count())
        finally:
            floor.close()
            truth.close()
        lab.wait(timeout=30)
    gap = whole["overhead"]
    added = sums[True][0] / sums[True][1] - sums[False][0] / sums[False][1]
    print(f"gap {gap:.0f} ns a softirq; a program more that reads the clock adds {added:.0f} ns; "
          f"the host took {stolen:.1%} of the CPUs")
    if stolen > CALM:
        pytest.skip(f"the host took {stolen:.1%} of the CPUs (calm: {CALM:.1%}): the gap "
                    f"({gap:.0f} ns) and what a program adds ({added:.0f} ns) not judged")
    assert 10 < gap < 2000
    assert 0.5 * gap < added < 2 * gap


def test_the_unseen_bytes_instance_traces_pid_1s_threads_and_leaves_nothing():
    """bench.unseen's ftrace instance: net:netif_receive_skb on, filtered to PID 1's threads (where
    this VM kind runs no BPF program), stamped on CLOCK_MONOTONIC, and gone after close(), so the
    matrix's byte bounds widen by a measured amount, never by a silent zero."""
    from bench.unseen import INSTANCE, UnseenReceive, agent_threads
    u = UnseenReceive()
    try:
        assert u.error is None and u.dir.endswith(INSTANCE)
        event = os.path.join(u.dir, "events/net/netif_receive_skb")
        assert open(os.path.join(event, "enable")).read().strip() == "1"
        pids = set(int(p) for p in re.findall(r"common_pid == (\d+)",
                                                open(os.path.join(event, "filter")).read()))
        assert 1 in pids and pids & set(agent_threads())
        assert "[mono]" in open(os.path.join(u.dir, "trace_clock")).read()
        assert isinstance(u.events(), list)
    finally:
        u.close()
    assert not os.path.exists(u.dir or os.path.join("/sys/kernel/tracing/instances", INSTANCE))
