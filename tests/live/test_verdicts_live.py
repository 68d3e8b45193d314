"""steer auto judges each move on the lab's traffic: the figures of its verdicts are held to what
the reader's read() calls returned over the intervals each verdict names (the kernel's rchar), the
lab's premise to iperf3's own per-second rate, where the stack runs to tracefs's count: a move
that hurts is put back and the stack goes back where it was; a move that changes nothing stays.

The lab flow's sender runs on CPU A, its reader on CPU B. The veth delivers its packets on the
sender's CPU; with RPS to CPU B its stack runs on the reader's CPU, and a rule that moves the
stack back to CPU A, beside the sender, costs it a quarter to a third of its rate here. A move
that changes nothing is the null experiment: a rule on the veth for a flow on the loopback.

A move that helps is not among them: on this VM every generic-XDP move of the lab flow costs
CPU per GB (the arrival CPU linearises each 64 KB skb), and moving its stack off the sender's
CPU raised its rate by -4% to +15% in four runs (2026-11-27), which the verdicts judged as the
rules say: kept where the rate rose, reverted where it held and the CPU per GB rose 37%."""
import json
import os
import subprocess
import time
from datetime import datetime

import pytest

from helpers import CPU_A, CPU_B, ROOT, STEER, alone, steer, two_cpus
from witness import ReaderBytes, TraceEvents
from bench.verdicts import mean_rate, median_rate
from steer.defaults import TOLERANCE
from steer.experiment.lab import Lab, LabFlow

pytestmark = [alone, two_cpus]

# Single seconds of the lab flow spread by ~4-8% and dip by a third now and then with nothing moved.
# A harmful move (-19% to -39% here, -28% typically) is judged on 1.5 s intervals, five a side, and
# that first window finds the loss at 95% in only ~4 runs of 5 (bench.verdicts: 12 of 15, the
# others inconclusive: a dip in the before window widens its interval). So the test asks auto to
# undo an inconclusive move too (--on-inconclusive revert) and holds it to what a harmful move must
# never be: kept. By a model of these seconds (normal spread 4-6%, a dip of 15-40% in 8-12% of
# them; tests/support/verdict_odds.py, 100,000 runs each), a 25% loss is kept 9 times in 100,000
# runs, a 30% one in none. The null move is judged on 1 s intervals, three a side: what the test
# asks of it (not undone, under the default --on-inconclusive keep) fails by that model 2 times in
# 10,000 (four a side is no better: the first window is then more often a loss by chance).
HARM = {"interval": 1.5, "window": 5}
NULL = {"interval": 1, "window": 3}
# the policy asks from the flow's first interval on, and the move comes once the flow has a
# before window past its first interval: after TCP's ramp (iperf3 here: 8-10 Gbit/s in its first
# second, 12-17 in its second)
# Where the flow's stack runs after a revert, by tracefs (net:netif_receive_skb of the veth, per
# CPU: a witness that shares no code with steer). Its rate is no witness in one run: on this VM
# the median of the seconds after a revert against those before the move spread by ~13% over 12
# runs (0.67 to 1.17, drift and the host's slowdowns), so "within 10%" failed in 3 of them.
# bench.verdicts gives that ratio over its runs instead (bench/results/verdicts.md).
STACK_SHARE = 0.95
# steer's goodput is the bytes iperf3's reads returned, per second of each of its intervals,
# averaged over a window; the truth is the same bytes by the kernel's count of what iperf3's
# read() calls returned (rchar, witness.ReaderBytes, stamped every 50 ms), over the intervals
# the verdict names (its `intervals`, on the wall clock). What parts them is the time between
# steer's flush of the sockets' counters and its read's timestamp (ms, tens under steal), on
# each edge of each interval: 30 ms of 1.5 s is 2% of an interval, at most, where its edges move
# the opposite ways, and a window's mean of five moves by their difference over 7.5 s (0.4%).
# AGREE allows 2% a window and 4% a change: a figure off by 1.03x fails. (iperf3's own
# per-second counts were the truth until an edge of the window, which auto logs after its read
# and which iperf3's seconds start 0.05-0.3 s from, was off by more than their model's 0.3 s in
# clean clone 189: 5.5% apart against 4%, where the rate stepped by a third at both edges.)
AGREE = 0.02


def _moves_and_verdicts(policy_text: str, private_tmp, rps: bool, interval: float,
                        window: int, after_revert: float, ipv6: bool = False,
                        on_inconclusive: str = "keep"):
    """Run the lab flow under steer auto with POLICY_TEXT; its JSON log's events, iperf3's
    per-second rates [(start, end, bit/s)] on the wall clock, auto's log, and the veth's
    netif_receive_skb per CPU by tracefs over the 2 s after an undo (None without one)."""
    policy = private_tmp / "rules.toml"
    policy.write_text(policy_text)
    # the move after WINDOW + 1 intervals, one to settle, WINDOW after and, for a loss, WINDOW
    # more to confirm it, and AFTER_REVERT seconds (the rate that came back)
    seconds = round((3 * window + 2) * interval + after_revert)
    with Lab([LabFlow(CPU_A, CPU_B, ipv6=ipv6)], seconds=seconds) as lab:
        if rps:
            r = steer("rps", "--dev", "veth-rx", "--netns", lab.rx, "--cpu", str(CPU_B))
            assert r.returncode == 0, r.stderr
        try:
            lab.start_servers()
            reader = ReaderBytes(lab.receiver_pid(lab.flows[0].port))
            auto = subprocess.Popen(
                [*STEER, "auto", "--policy", str(policy), "--dev", "veth-rx", "--netns", lab.rx,
                 "--interval", str(interval), "--window", str(window), "--confirm", "1",
                 "--hold", "0", "--on-inconclusive", on_inconclusive,
                 "--duration", str(seconds + 1), "--log-format", "json"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                env=dict(os.environ, PYTHONPATH=ROOT))
            # the traffic starts once auto traces (its first line), not while it loads: that
            # takes a CPU for a second or so
            first = auto.stderr.readline()
            started = time.time()
            reader.start()
            lab.start_clients()
            lines, after_undo = [first], None
            for line in auto.stderr:   # as auto logs it, to count where the stack went
                lines.append(line)
                if after_undo is None and '"event": "undo"' in line:
                    witness = TraceEvents("veth-rx")
                    try:
                        after_undo = witness.count(2)
                    finally:
                        witness.close()
            auto.wait(timeout=60)
            err = "".join(lines)
            (res,) = lab.wait(timeout=seconds + 30)
        finally:
            reader.stop()
            steer("reset")
    assert res.error is None, res.error
    assert auto.returncode == 0, err
    events = [json.loads(line) for line in err.splitlines()]
    for e in events:
        e["at"] = datetime.fromisoformat(e["time"].replace("Z", "+00:00")).timestamp()
    # iperf3's intervals count from its start, a few ms after `started`
    rates = [(started + i["sum"]["start"], started + i["sum"]["end"], i["sum"]["bits_per_second"])
             for i in res.raw["intervals"]]
    print("iperf3 per second:", " ".join(f"{s - started:.1f}:{bps / 1e9:.1f}" for s, _, bps in rates))
    print("events:", " ".join(f"{e['at'] - started:.1f}:{e.get('event')}" for e in events
                              if e.get("event")))
    for e in events:
        if e.get("event") == "verdict":
            for k in ("goodput_bytes_per_second", "cpu_seconds_per_gb"):
                print(k, e[k] and e[k]["per_interval"])
    return events, rates, err, after_undo, reader


def _agrees_with_the_reader(verdict: dict, reader: ReaderBytes) -> float:
    """The verdict's goodput before and after, and its change, against what the reader read over
    the same intervals (AGREE); the reader's change."""
    g, spans = verdict["goodput_bytes_per_second"], verdict["intervals"]
    truth = {side: sum(reader.rate(a, b) for a, b in spans[side]) / len(spans[side])
             for side in ("before", "after")}
    change = truth["after"] / truth["before"] - 1
    print(f"the reader's read() (rchar): {truth['before'] * 8e-9:.3f} -> "
          f"{truth['after'] * 8e-9:.3f} Gbit/s ({change:+.2%}); steer: "
          f"{g['before'] * 8e-9:.3f} -> {g['after'] * 8e-9:.3f} ({g['change']:+.2%})")
    assert abs(g["before"] / truth["before"] - 1) <= AGREE, (g["before"], truth)
    assert abs(g["after"] / truth["after"] - 1) <= AGREE, (g["after"], truth)
    assert abs(g["change"] - change) <= 2 * AGREE, (g["change"], change)
    return change


def _rate(rates, start: float, end: float) -> float:
    """iperf3's median rate over its seconds wholly inside START..END (bench.verdicts')."""
    rate = median_rate(rates, start, end)
    assert rate is not None, (start, end, rates)
    return rate


def test_a_move_that_hurts_is_undone_and_the_stack_goes_back(private_tmp):
    events, rates, log, after_undo, reader = _moves_and_verdicts(
        f'[[rule]]\nflow = "proto=tcp,dport=5201"\ncpu = {CPU_A}\n', private_tmp, rps=True,
        after_revert=7, on_inconclusive="revert", **HARM)
    print(log)
    (move,) = [e for e in events if e.get("event") == "move"]
    (verdict,) = [e for e in events if e.get("event") == "verdict"]
    undos = [e for e in events if e.get("event") == "undo"]
    # from its stack's CPU (or none known: an interval in which the 99 Hz sampler caught none
    # of its kernel work, once in six runs here)
    assert move["old_cpu"] in (CPU_B, None) and move["new_cpu"] == CPU_A
    g = verdict["goodput_bytes_per_second"]
    assert verdict["cpu_seconds_per_gb"] is not None
    # within two windows of the move (and the interval it straddles): the loss in the first
    # window after it, confirmed in the second
    interval, window = HARM["interval"], HARM["window"]
    span = window * interval
    assert verdict["at"] - move["at"] <= (2 * window + 1) * interval + 0.5
    # iperf3 over the windows the verdict compared: the one before the move and the one that
    # ends with the verdict (the first after the move, or the second that confirmed it)
    before = mean_rate(rates, move["at"] - span, move["at"])
    after = mean_rate(rates, verdict["at"] - span, verdict["at"])
    back = _rate(rates, undos[0]["at"] + 1, rates[-1][1]) if undos else None
    print(f"iperf3: {before * 1e-9:.2f} Gbit/s before the move, {after * 1e-9:.2f} in the "
          f"verdict's window ({after / before - 1:+.1%}), "
          f"{f'{back * 1e-9:.2f} after the revert' if back else 'no revert'}; "
          f"steer: {g['before'] * 8e-9:.2f} -> {g['after'] * 8e-9:.2f} Gbit/s "
          f"({g['change']:+.1%}, {g['interval']}); the veth's skbs up the stack after the "
          f"revert, by CPU (tracefs): {after_undo}")
    # the figures the verdict weighed are the reader's: each window's level, and the change
    judged = _agrees_with_the_reader(verdict, reader)
    # the lab's premise, by iperf3 alone: the move hurt in the first window after it (past the
    # interval it straddles), where the verdict found the loss. Not in the verdict's own window:
    # when a second window confirms, the loss there can be smaller (one clean clone read -36% by
    # iperf3 in the first and -8.7% in the second, steer agreeing with both), and a confirmed
    # loss only needs to be beyond the 5% tolerance there. The unmoved rate is read on both sides
    # of the move, the window before it and the seconds after the revert: a slow spell of the VM
    # in the window before makes the loss look small against it (one clean clone: 15.3 Gbit/s
    # before, 14.4 after the move, -6%, and 19.4 after the revert), and the premise is that the
    # moved flow was slower than the unmoved one, not than one window of it.
    first = mean_rate(rates, move["at"] + interval, move["at"] + interval + span)
    assert first is not None, (move, rates)
    unmoved = max(before, back or 0.0)
    print(f"iperf3 in the first window after the move: {first * 1e-9:.2f} Gbit/s "
          f"({first / before - 1:+.1%} against the window before, {first / unmoved - 1:+.1%} "
          f"against the unmoved rate)")
    if first >= 0.9 * unmoved:
        # The move did not hurt this time (clean clone 150: iperf3 ~14 Gbit/s on either side of
        # it, the whole run slow). Then the verdict must not be a loss iperf3 did not see (a
        # revert needs a fall beyond the 5% tolerance), and the revert is not tested this run
        assert verdict["verdict"] != "reverted" or after / before - 1 < -0.05, verdict
        pytest.skip(f"the lab's move did not hurt this time (iperf3 {before * 1e-9:.1f} -> "
                    f"{first * 1e-9:.1f} Gbit/s), and steer's verdict ({verdict['verdict']}, "
                    f"{g['change']:+.1%}) agreed with iperf3: no revert to check")
    if judged > -(TOLERANCE + 2 * AGREE):
        # The loss of the first window did not last into the one that confirms it, by the
        # reader's own count (clean clone 196: -30% by iperf3 in the first, -3.1% by rchar in the
        # second, the host taking 175 CPU-s over the suite): steer keeps a move whose loss only
        # coincided with a window, by design (steer.steering.verdict). Only a loss beyond the
        # tolerance by more than steer's figure may stray from the reader's (2 x AGREE) makes a
        # kept verdict wrong; short of that the revert is not tested this run
        assert verdict["verdict"] != "reverted" or judged < -(TOLERANCE - 2 * AGREE), verdict
        pytest.skip(f"the move's loss did not last: {first / unmoved - 1:+.1%} in the first "
                    f"window, {judged:+.1%} by the reader in the window steer judged; its "
                    f"verdict: {verdict['verdict']}")
    # a loss that lasted: confirmed (reverted), or one the windows were too noisy to confirm
    # (inconclusive, undone as asked); never kept
    assert verdict["verdict"] in ("reverted", "inconclusive") and verdict["undone"] is True
    assert ("goodput fell" if verdict["verdict"] == "reverted" else "too noisy") in verdict["why"]
    (undo,) = undos
    assert undo["new_cpu"] is None and undo["at"] >= verdict["at"]
    # and the revert put the stack back where RPS had it: the reader's CPU, not the cpumap
    # kthread beside the sender (which takes each skb up a second time while a rule holds)
    assert after_undo is not None and sum(after_undo.values()) > 1000
    assert after_undo.get(CPU_B, 0) >= STACK_SHARE * sum(after_undo.values()), after_undo
    # the CPU is not tried again, and the summary at the end says what happened
    assert sum(1 for e in events if e.get("event") == "move") == 1
    assert any(f"1 move(s): 1 {verdict['verdict']}" in e["msg"] for e in events)


def test_a_move_that_changes_nothing_is_not_undone(private_tmp):
    """The null experiment: the lab flow over IPv6 on the receiving namespace's loopback, and a
    rule that moves it to CPU B on the veth, which none of its packets cross. Nothing changes
    but chance, so a revert would be a false one: kept, or inconclusive and kept, as the
    default --on-inconclusive says. With three 1 s intervals a side, a single second's dip
    (a third of the rate, now and then here) makes about a third of them inconclusive;
    bench.verdicts measures the false revert rate (bench/results/verdicts.md)."""
    events, rates, log, _, reader = _moves_and_verdicts(
        f'[[rule]]\nflow = "proto=tcp,dport=5201"\ncpu = {CPU_B}\n', private_tmp, rps=False,
        ipv6=True, after_revert=1, **NULL)
    print(log)
    (move,) = [e for e in events if e.get("event") == "move"]
    (verdict,) = [e for e in events if e.get("event") == "verdict"]
    assert (move["old_cpu"], move["new_cpu"]) == (CPU_A, CPU_B)
    assert verdict["verdict"] in ("kept", "inconclusive") and verdict["undone"] is False
    assert not [e for e in events if e.get("event") == "undo"]
    g = verdict["goodput_bytes_per_second"]
    before = _rate(rates, move["at"] - NULL["window"] * NULL["interval"], move["at"])
    after = _rate(rates, move["at"] + NULL["interval"], verdict["at"])
    print(f"iperf3: {before / 1e9:.2f} Gbit/s before the move, {after / 1e9:.2f} after; steer: "
          f"{g['before'] * 8e-9:.2f} -> {g['after'] * 8e-9:.2f} Gbit/s ({g['change']:+.1%})")
    _agrees_with_the_reader(verdict, reader)
    assert any(f"1 move(s): 1 {verdict['verdict']}" in e["msg"] for e in events)
