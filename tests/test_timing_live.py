"""Live tier: the two timing modes against ground truths that do not come from steer.

- A reader that only calls recv() (tests/recv_only.c), pinned: its bytes against steer's app_bytes,
  and its on-CPU time by the scheduler (/proc/thread-self/schedstat, ns) minus its user time
  against steer's app_seconds + app_nested_softirq_seconds.
- Sampled against exact, both attached to the same traffic at once: per-flow kernel and app
  seconds, within the error the sample count allows (the bound is stated in `sampling_bound`).
- Sampled timing leaves every unrelated system call alone: no syscall program is attached.
"""
import os
import subprocess
import time

import pytest

from helpers import CPUS, ROOT, SAMPLE_HZ, live, sampling_bound
from steer.flows import build_snapshot
from steer.lab import NETNS_DIR, RECEIVER_ADDR, Lab, LabFlow
from steer.topology import read_topology
from steer.tracer import SYSCALL_PROGRAMS, Tracer

pytestmark = live

HZ = os.sysconf("SC_CLK_TCK")
PORT = 5301
SECONDS = 4
READER_CPU, SENDER_CPU = CPUS[-1], CPUS[0]
# The bounds below are for a reader with a CPU of its own, the sender's softirq work on another.
# Where this process may use one CPU only (a CI runner's cpuset), both share it, which is another
# regime: measured there, exact read +5.1% against schedstat, and TCP's in-order byte count
# exceeded the payload that passed netif_receive_skb by 0.002% to 0.12% (steer's exact count and
# a bpftrace sum of the tracepoint's skb lengths agreed to 566 bytes, so the gap is not the
# tracer's; not explained yet). Those tests need the two CPUs.
own_reader_cpu = pytest.mark.skipif(
    len(CPUS) < 2, reason="needs two usable CPUs: the reader on one, the sender's softirq on another")


@pytest.fixture(scope="module")
def recv_only(tmp_path_factory):
    exe = tmp_path_factory.mktemp("bin") / "recv_only"
    subprocess.run(["cc", "-O2", "-o", str(exe), os.path.join(ROOT, "tests", "recv_only.c")],
                   check=True)
    return str(exe)


def _send_for(ns: str, seconds: float) -> subprocess.Popen:
    """A sender in namespace NS: zeros to the reader as fast as it goes, for SECONDS."""
    code = (f"import socket,time\ns=socket.create_connection(('{RECEIVER_ADDR}',{PORT}))\n"
            f"b=bytes(1<<20)\nend=time.monotonic()+{seconds}\n"
            "while time.monotonic()<end: s.sendall(b)\ns.close()")
    return subprocess.Popen(["nsenter", f"--net={NETNS_DIR}/{ns}", "taskset", "-c",
                             str(SENDER_CPU), "python3", "-c", code])


def _reader_run(recv_only, tracer):
    """(what the reader printed, steer's snapshot of its flow)"""
    with Lab([], seconds=SECONDS) as lab:
        reader = subprocess.Popen(["nsenter", f"--net={NETNS_DIR}/{lab.rx}", "taskset", "-c",
                                   str(READER_CPU), recv_only, RECEIVER_ADDR, str(PORT)],
                                  stdout=subprocess.PIPE, text=True)
        assert reader.stdout.readline().strip() == "listening"
        a = tracer.sample()
        sender = _send_for(lab.tx, SECONDS)
        assert sender.wait(timeout=SECONDS + 30) == 0
        out = reader.communicate(timeout=30)[0]
        time.sleep(0.1)
        b = tracer.sample()
    truth = dict(kv.split("=") for kv in out.split())
    snap = build_snapshot(a, b, read_topology(), tracer.capabilities)
    flow = next(f for f in snap.flows if f.flow.dport == PORT and f.app_comm == "recv_only")
    return {k: int(v) for k, v in truth.items()}, flow


# How far from the scheduler's on-CPU time each mode may read on this 2-vCPU Firecracker VM, for a
# reader that sleeps and wakes thousands of times a second on an otherwise idle vCPU. Measured
# 2026-11-22: exact -11% to -33% (part of that time is outside every bracket); sampled, whose
# samples take their weight from the scheduler's account of the task, -0.2% to -1.1%. Issue #12
# asks for 10%; the bounds keep either from getting worse unnoticed.
SCHEDSTAT_BOUND = {"exact": (-0.40, 0.05), "sampled": (-0.10, 0.10)}


@own_reader_cpu
@pytest.mark.parametrize("timing", ["exact", "sampled"])
def test_recv_only_reader_against_schedstat(recv_only, timing):
    """Bytes exactly; app time + nested softirq against the thread's on-CPU time minus its user
    time, within SCHEDSTAT_BOUND."""
    tracer = Tracer(timing=timing, sample_hz=SAMPLE_HZ).start()
    try:
        truth, f = _reader_run(recv_only, tracer)
    finally:
        tracer.stop()
    kernel_side = (truth["oncpu_ns"] - truth["utime_ticks"] * 1e9 / HZ) / 1e9
    ours = f.app_seconds + f.app_nested_seconds
    print(f"{timing}: read {truth['bytes']} B, steer app_bytes {f.app_bytes} B, rx {f.rx_bytes} B; "
          f"steer app {f.app_seconds:.3f} + nested {f.app_nested_seconds:.3f} = {ours:.3f} s, "
          f"schedstat on-CPU - user = {kernel_side:.3f} s ({ours / kernel_side - 1:+.1%}); "
          f"app CPU {f.app_cpu} (pinned {READER_CPU})")
    assert f.app_bytes == truth["bytes"]
    if timing == "sampled":   # the socket's in-order count: what the reader got
        assert abs(f.rx_bytes - truth["bytes"]) <= 0.001 * truth["bytes"]
    else:                     # every payload byte up the stack, retransmitted ones included
        assert truth["bytes"] * 0.999 <= f.rx_bytes <= truth["bytes"] * 1.01
    assert f.app_cpu == READER_CPU
    low, high = SCHEDSTAT_BOUND[timing]
    assert low < ours / kernel_side - 1 < high


# A reader with a CPU of its own sleeps and wakes thousands of times a second, and there the exact
# mode is no reference: against the scheduler it reads low by up to 40% (test above), the sampled
# mode within 10%. So for that flow's app side the two are held only to what those bounds allow
# together: sampled/exact between (1 - 10%)/(1 + 5%) and (1 + 10%)/(1 - 40%). Measured: +10% to
# +32% here, +61% on the CI machine; the schedstat test above is the accuracy check for this side.
_S, _E = SCHEDSTAT_BOUND["sampled"], SCHEDSTAT_BOUND["exact"]
IDLING_READER_RATIO = ((1 + _S[0]) / (1 + _E[1]), (1 + _S[1]) / (1 + _E[0]))


AGREEMENT_SECONDS = 8   # the flow sharing its CPU with its sender gets ~0.5 s of kernel time


@own_reader_cpu
def test_sampled_agrees_with_exact_on_the_same_traffic():
    """Both tracers at once on two lab flows (softirq on one CPU, reader on another, and both on
    one CPU): each flow above 1% of a CPU agrees within sampling_bound, kernel and app side, but
    for the reader alone on an idling CPU (IDLING_READER_RATIO). The exact tracer's own
    per-event work lands inside the times both measure."""
    flows = [LabFlow(SENDER_CPU, READER_CPU), LabFlow(SENDER_CPU, SENDER_CPU)]
    topo = read_topology()
    exact = Tracer(timing="exact").start()
    sampled = Tracer(timing="sampled", sample_hz=SAMPLE_HZ).start()
    try:
        with Lab(flows, seconds=AGREEMENT_SECONDS) as lab:
            lab.start_servers()
            e0, s0 = exact.sample(), sampled.sample()
            lab.start_clients()
            results = lab.wait(timeout=AGREEMENT_SECONDS + 30)
            time.sleep(0.2)
            e1, s1 = exact.sample(), sampled.sample()
    finally:
        sampled.stop()
        exact.stop()
    ex = build_snapshot(e0, e1, topo, exact.capabilities)
    sa = {f.flow: f for f in build_snapshot(s0, s1, topo, sampled.capabilities).flows}
    checked = 0
    for r in results:
        assert r.error is None, r.error
        f = next(f for f in ex.flows if f.flow.dport == r.flow.port and f.flow.sport == r.sender_port)
        g = sa[f.flow]
        assert g.app_bytes == f.app_bytes
        # the socket's in-order count: all the reader got, and what reached the socket but was
        # never read (iperf3's server stops reading at the end), but no retransmitted duplicate
        # (the exact mode counts those on the stack)
        print(f"{f.flow}: rx exact {f.rx_bytes} B, sampled {g.rx_bytes} B, read {g.app_bytes} B")
        assert g.app_bytes <= g.rx_bytes <= f.rx_bytes * 1.0001
        for side in ("kernel_seconds", "app_seconds"):
            want, got = getattr(f, side), getattr(g, side)
            if want < 0.01 * f.duration:
                continue   # below 1% of a CPU: not held to a bound
            if side == "app_seconds" and r.flow.app_cpu != r.flow.kernel_cpu:
                low, high = IDLING_READER_RATIO
            else:
                low, high = 1 - sampling_bound(want), 1 + sampling_bound(want)
            print(f"{f.flow} {side}: exact {want:.3f} s, sampled {got:.3f} s "
                  f"({got / want - 1:+.1%}, bounds {low - 1:+.1%} {high - 1:+.1%})")
            assert low < got / want < high
            checked += 1
        assert g.kernel_cpu == f.kernel_cpu and g.app_cpu == f.app_cpu
        assert g.placement.cls == f.placement.cls
    assert checked >= 3


def test_sampled_timing_hooks_no_syscall():
    tracer = Tracer(timing="sampled").start()
    try:
        attached = set(tracer.attached_programs)
        assert attached.isdisjoint(SYSCALL_PROGRAMS), attached
        assert {"ft_sample", "ft_skb_hint"} <= attached
        assert tracer.capabilities.timing.startswith("available (sampled")
    finally:
        tracer.stop()


def _flow_on(sample, port: int) -> dict[int, object]:
    """CPU -> the entry of the loopback flow to PORT (the reader's side) in SAMPLE."""
    return {e.cpu: e for e in sample.entries.values() if e.flow.dport == port}


def test_sampled_reads_reach_the_flow_map_however_the_socket_ends():
    """Sampled timing keeps a TCP socket's reads in the socket until a flush: every sample() must
    show them all, each on the CPU it ran on, and a socket destroyed before the next sample()
    must have handed its last reads over. This process reads on loopback, so every read is known."""
    import socket
    import struct

    tracer = Tracer(timing="sampled").start()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    sender = socket.create_connection(("127.0.0.1", port))
    reader, _ = listener.accept()
    before = os.sched_getaffinity(0)
    chunk = b"x" * 1000
    try:
        def read(cpu: int, calls: int) -> None:
            os.sched_setaffinity(0, {cpu})   # this thread, so the reads run on CPU
            for _ in range(calls):
                sender.sendall(chunk)
                got = 0
                while got < len(chunk):
                    got += len(reader.recv(len(chunk) - got))

        read(READER_CPU, 10)
        first = _flow_on(tracer.sample(), port)
        # no read returned end of file, the socket lives on: only the iterator could flush
        assert first[READER_CPU].app_bytes == 10 * len(chunk)
        assert first[READER_CPU].rx_bytes == 10 * len(chunk)
        assert first[READER_CPU].app_calls >= 10
        assert first[READER_CPU].app_comm

        read(SENDER_CPU, 5)   # the reader moves: the first CPU's reads stay where they ran
        second = _flow_on(tracer.sample(), port)
        if SENDER_CPU != READER_CPU:
            assert second[READER_CPU].app_bytes == 10 * len(chunk)
            assert second[SENDER_CPU].app_bytes == 5 * len(chunk)
        assert sum(e.app_bytes for e in second.values()) == 15 * len(chunk)

        read(SENDER_CPU, 3)
        # a reset on close destroys the socket at once: only the destroy hook can flush it
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        reader.close()
        third = _flow_on(tracer.sample(), port)
        assert sum(e.app_bytes for e in third.values()) == 18 * len(chunk)
        assert sum(e.rx_bytes for e in third.values()) == 18 * len(chunk)
    finally:
        os.sched_setaffinity(0, before)
        for s in (sender, reader, listener):
            s.close()
        tracer.stop()
