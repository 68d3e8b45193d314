"""Live tier: the two timing modes against ground truths that do not come from steer.

- A reader that only calls recv() (bench/recv_only.c), pinned: its bytes against steer's app_bytes,
  and its on-CPU time by the scheduler (/proc/thread-self/schedstat, ns) minus its user time
  against steer's app_seconds + app_nested_softirq_seconds.
- Sampled against exact, both attached to the same traffic at once: per-flow kernel and app
  seconds, within the error the sample count allows (the bound is stated in `sampling_bound`).
- Sampled timing leaves every unrelated system call alone: no syscall program is attached; and
  by default (socket counters) no program runs per read either: a TCP reader's bytes must then
  come out exact from the socket's own counts however its connection ends.
"""
import json
import os
import subprocess
import sys
import time

import pytest

from bench.odds import z_for
from helpers import CPUS, SAMPLE_DISPERSION, SAMPLE_HZ, alone, live, sampling_bound
from steer.model.flows import build_snapshot
from steer.experiment.lab import BASE_PORT, NETNS_DIR, RECEIVER_ADDR, Lab, LabFlow, listening
from steer.model.topology import read_topology
from steer.trace.programs import HOOKS as APP_HOOKS, SYSCALL_PROGRAMS
from steer.trace.tracer import Tracer

pytestmark = [live, alone]

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
def recv_only():
    from bench.common import build_c
    return build_c("recv_only")   # bench.accuracy's reader too


TCPI_BYTES_RETRANS = 208   # offset of tcpi_bytes_retrans (u64) in struct tcp_info, Linux 4.19+


def _send_for(ns: str, seconds: float) -> subprocess.Popen:
    """A sender in namespace NS: zeros to the reader as fast as it goes, for SECONDS; it prints
    the bytes its socket retransmitted (TCP_INFO), which may reach the reader's stack twice."""
    code = (f"import socket,struct,time\ns=socket.create_connection(('{RECEIVER_ADDR}',{PORT}))\n"
            f"b=bytes(1<<20)\nend=time.monotonic()+{seconds}\n"
            "while time.monotonic()<end: s.sendall(b)\n"
            "s.shutdown(socket.SHUT_WR)\ns.recv(1)\n"   # the reader's close: all is acked
            "i=s.getsockopt(socket.IPPROTO_TCP,socket.TCP_INFO,256)\n"
            f"print(struct.unpack_from('Q',i,{TCPI_BYTES_RETRANS})[0])\ns.close()")
    return subprocess.Popen(["nsenter", f"--net={NETNS_DIR}/{ns}", "taskset", "-c",
                             str(SENDER_CPU), "python3", "-c", code], stdout=subprocess.PIPE,
                            text=True)


def _reader_run(recv_only, tracer):
    """(what the reader printed, steer's snapshot of its flow)"""
    with Lab([], seconds=SECONDS) as lab:
        reader = subprocess.Popen(["nsenter", f"--net={NETNS_DIR}/{lab.rx}", "taskset", "-c",
                                   str(READER_CPU), recv_only, RECEIVER_ADDR, str(PORT)],
                                  stdout=subprocess.PIPE, text=True)
        assert reader.stdout.readline().strip() == "listening"
        a = tracer.sample()
        sender = _send_for(lab.tx, SECONDS)
        out = reader.communicate(timeout=SECONDS + 30)[0]
        retrans = int(sender.communicate(timeout=30)[0])
        assert sender.returncode == 0
        time.sleep(0.1)
        b = tracer.sample()
    truth = dict(kv.split("=") for kv in out.split())
    truth["retrans"] = retrans
    snap = build_snapshot(a, b, read_topology(), tracer.capabilities)
    flow = next(f for f in snap.flows if f.flow.dport == PORT and f.app_comm == "recv_only")
    return {k: int(v) for k, v in truth.items()}, flow


# How far from the scheduler's on-CPU time each mode may read on this 2-vCPU VM, for a reader
# that sleeps and wakes thousands of times a second on an otherwise idle vCPU. The exact mode
# brackets the thread's receive calls on the CPU and adds the head the scheduler charges each run
# woken inside one, before its switch in (syscall.bpf.h, charge_reader_wakeup); the kernel's
# entry and exit around the brackets stay out, so it reads a little low: 11 runs of this test and
# of the accuracy matrix, -3.4% to -0.5% (without the head: mean -10.5%, sd 5.6%, down to -24%).
# -10% is over 5 spreads below at twice the spread measured (a chance below 1 in 100,000) and
# fails a figure 0.85x this one, +5% one 1.15x. Sampled, whose samples take their weight from
# the scheduler's account of the task: mean -0.6%, sd 0.7% (counters) and 1.2% (tracepoint);
# +-10% is 5 spreads or more away and catches a figure 1.4x off.
SCHEDSTAT_BOUND = {"exact": (-0.10, 0.05), "sampled": (-0.10, 0.10)}


@own_reader_cpu
@pytest.mark.parametrize("timing,app_hook", [("exact", "auto"), ("sampled", "counters"),
                                             ("sampled", "tracepoint")])
def test_recv_only_reader_against_schedstat(recv_only, timing, app_hook, held):
    """Bytes exactly (socket counters: from the socket's own count, the reader's FIN included);
    app time + nested softirq against the thread's on-CPU time minus its user time, within
    SCHEDSTAT_BOUND."""
    tracer = Tracer(timing=timing, sample_hz=SAMPLE_HZ, app_hook=app_hook).start()
    try:
        truth, f = _reader_run(recv_only, tracer)
    finally:
        tracer.stop()
    kernel_side = (truth["oncpu_ns"] - truth["utime_ticks"] * 1e9 / HZ) / 1e9
    ours = f.app_seconds + f.app_nested_seconds
    print(f"{timing}/{tracer.app_hook_used}: read {truth['bytes']} B, steer app_bytes {f.app_bytes} B, "
          f"rx {f.rx_bytes} B (sender retransmitted {truth['retrans']} B); "
          f"steer app {f.app_seconds:.3f} + nested {f.app_nested_seconds:.3f} = {ours:.3f} s, "
          f"schedstat on-CPU - user = {kernel_side:.3f} s ({ours / kernel_side - 1:+.1%}); "
          f"app CPU {f.app_cpu} (pinned {READER_CPU})")
    assert f.app_bytes == truth["bytes"]
    if timing == "sampled":   # the socket's in-order count: what the reader got
        assert abs(f.rx_bytes - truth["bytes"]) <= 0.001 * truth["bytes"]
    else:                     # every payload byte up the stack, retransmitted ones included
        assert truth["bytes"] * 0.999 <= f.rx_bytes <= truth["bytes"] * 1.001 + truth["retrans"]
    assert f.app_cpu == READER_CPU
    held("app + nested vs schedstat", ours / kernel_side - 1, *SCHEDSTAT_BOUND[timing])


# A reader with a CPU of its own sleeps and wakes thousands of times a second, and there neither
# mode is a reference for the other: against the scheduler the exact mode reads low by up to 40%
# (test above), and with both tracers attached at once the sampled one spreads more than alone
# (sampled/exact measured -21% to +61% over CI runs, -16% to +8% here). So that flow's app side
# is held to the reader's own account instead: iperf3's kernel time by the scheduler (on-CPU
# minus user time, read once it has exited), of which its receive calls are the larger part. It
# also selects, accepts and writes its report, so each mode may read below it by up to what the
# exact mode may miss plus those; neither may read above it. Over 12 runs of this test
# (2026-11-27): exact mean -30.7%, sd 3.6%; sampled mean -20.3%, sd 2.9%. The lower bound is 4.3
# spreads below the exact mode's mean at the spread's 95% upper bound for 12 runs (a chance near
# 1 in 100,000; -45% before was 2.6 of them, 1 in 200); the upper one its brackets and weights
# cannot pass but by the clocks' granularity.
IDLING_READER_TRUTH = (-0.55, 0.05)


def _kernel_seconds_at_exit(pid: int, timeout: float = 10) -> float:
    """on-CPU minus user time of process PID by the scheduler, read once it has exited and before
    it is reaped (a zombie keeps its counts)"""
    deadline = time.monotonic() + timeout
    while True:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        if state == "Z" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert state == "Z", f"iperf3 server {pid} did not exit"
    return _kernel_seconds(pid)


def _kernel_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/schedstat") as f:
        oncpu_ns = int(f.read().split()[0])
    with open(f"/proc/{pid}/stat") as f:
        utime_ticks = int(f.read().rsplit(")", 1)[1].split()[11])
    return oncpu_ns / 1e9 - utime_ticks / HZ


AGREEMENT_SECONDS = 8   # the flow sharing its CPU with its sender gets ~0.5 s of kernel time
# the sampled times the agreement test holds to exact at once (two flows, kernel and app side):
# the odds (bench.odds) are shared among them
AGREEMENT_FIGURES = 4


@own_reader_cpu
def test_sampled_agrees_with_exact_on_the_same_traffic(held):
    """Both tracers at once on two lab flows (softirq on one CPU, reader on another, and both on
    one CPU): each flow above 1% of a CPU agrees within sampling_bound, kernel and app side, but
    for the reader alone on an idling CPU, whose app side each mode gets against the reader's
    own kernel time (IDLING_READER_TRUTH). The exact tracer's own per-event work lands inside
    the times both measure."""
    flows = [LabFlow(SENDER_CPU, READER_CPU), LabFlow(SENDER_CPU, SENDER_CPU)]
    topo = read_topology()
    exact = Tracer(timing="exact").start()
    sampled = Tracer(timing="sampled", sample_hz=SAMPLE_HZ).start()
    try:
        with Lab(flows, seconds=AGREEMENT_SECONDS) as lab:
            lab.start_servers()
            idler = lab.receiver_pid(lab.flows[0].port)
            before = _kernel_seconds(idler)
            e0, s0 = exact.sample(), sampled.sample()
            lab.start_clients()
            results = lab.wait(timeout=AGREEMENT_SECONDS + 30)
            idler_kernel = _kernel_seconds_at_exit(idler) - before
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
        # (the exact mode counts those on the stack). The exact count comes from
        # net:netif_receive_skb, which in this two-flow lab now and then passes fewer bytes than
        # the socket got (bpftrace alone on it showed the same, test_live.py's demo test says how
        # much): 0.012% of the same-core flow in one CI run, 0.003% in 1 of 7 runs here.
        print(f"{f.flow}: rx exact {f.rx_bytes} B, sampled {g.rx_bytes} B, read {g.app_bytes} B")
        assert g.app_bytes <= g.rx_bytes <= f.rx_bytes * 1.0005
        for side in ("kernel_seconds", "app_seconds"):
            want, got = getattr(f, side), getattr(g, side)
            if want < 0.01 * f.duration:
                continue   # below 1% of a CPU: not held to a bound
            n, err = getattr(g, side.replace("seconds", "samples")), getattr(g, side + "_stderr")
            # its error bar: about a sample per period of the time
            assert 0.3 < n / (got * SAMPLE_HZ) < 3
            if side == "app_seconds" and r.flow.app_cpu != r.flow.kernel_cpu:
                assert r.receiver_pid == idler
                low, high = IDLING_READER_TRUTH
                for mode, h in (("exact", f), ("sampled", g)):
                    ours = h.app_seconds + h.app_nested_seconds
                    print(f"{f.flow} {mode}: app {h.app_seconds:.3f} + nested "
                          f"{h.app_nested_seconds:.3f} = {ours:.3f} s; the reader's kernel time "
                          f"{idler_kernel:.3f} s ({ours / idler_kernel - 1:+.1%}, bounds "
                          f"{low:+.0%} {high:+.0%})")
                    held(f"{mode} app vs the idling reader's kernel time",
                         ours / idler_kernel - 1, low, high)
                checked += 1
                continue
            bound = sampling_bound(want, figures=AGREEMENT_FIGURES)
            print(f"{f.flow} {side}: exact {want:.3f} s, sampled {got:.3f} s "
                  f"({got / want - 1:+.1%}, bound {bound:.1%}); {n} samples, stderr {err:.4f} s")
            where = "apart" if r.flow.app_cpu != r.flow.kernel_cpu else "same core"
            held(f"{where} {side} sampled vs exact", got / want - 1, -bound, bound)
            # and exact within the 10% the two modes charge differently plus its error bar
            # times what the odds ask, as dispersed as samples are here
            assert abs(got - want) < 0.10 * want + z_for(AGREEMENT_FIGURES) * SAMPLE_DISPERSION * err
            checked += 1
        assert g.kernel_cpu == f.kernel_cpu and g.app_cpu == f.app_cpu
        assert g.placement.cls == f.placement.cls
    assert checked >= 3


def test_sampled_timing_hooks_no_syscall_and_no_read():
    """The always-on default: nothing on unrelated syscalls, nothing per read (the per-read
    hooks are all left out; UDP's fexit where the kernel allows it, else a tracepoint only while
    UDP datagrams arrive: tests/live/test_refusals_live.py)."""
    tracer = Tracer(timing="sampled").start()
    try:
        attached = set(tracer.attached_programs)
        assert attached.isdisjoint(SYSCALL_PROGRAMS), attached
        assert attached.isdisjoint(APP_HOOKS["tracepoint"] + APP_HOOKS["kprobe"]), attached
        assert attached.isdisjoint({"ft_tcp_recvmsg_exit"}), attached
        assert {"ft_sample", "ft_skb_hint", "ft_tcp_state", "ft_tcp_sockets"} <= attached
        assert tracer.app_hook_used == "counters"
        assert tracer.capabilities.timing.line().startswith("available (sampled")
        assert not tracer.capabilities.app_calls.available
    finally:
        tracer.stop()


def _flow_on(sample, port: int) -> dict[int, object]:
    """CPU -> the entry of the loopback flow to PORT (the reader's side) in SAMPLE."""
    return {e.cpu: e for e in sample.entries.values() if e.flow.dport == port}


def test_sampled_reads_reach_the_flow_map_however_the_socket_ends():
    """Sampled timing with a receive hook keeps a TCP socket's reads in the socket until a flush: every sample() must
    show them all, each on the CPU it ran on, and a socket destroyed before the next sample()
    must have handed its last reads over. This process reads on loopback, so every read is known."""
    import socket
    import struct

    tracer = Tracer(timing="sampled", app_hook="tracepoint").start()
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


def _read_exactly(sock, n: int) -> int:
    got = 0
    while got < n:
        got += len(sock.recv(n - got))
    return got


def _read_to_eof(sock) -> int:
    got = 0
    while chunk := sock.recv(65536):
        got += len(chunk)
    return got


def _pair():
    import socket
    listener = socket.create_server(("127.0.0.1", 0))
    sender = socket.create_connection(listener.getsockname())
    reader, _ = listener.accept()
    listener.close()
    return sender, reader, sender.getsockname()[1], reader.getsockname()[1]


def _counted(tracer, sport: int, dport: int) -> tuple[int, int]:
    """(app_bytes, rx_bytes) of the loopback flow SPORT -> DPORT, summed over its CPUs."""
    entries = [e for e in tracer.sample().entries.values()
               if e.flow.sport == sport and e.flow.dport == dport]
    return sum(e.app_bytes for e in entries), sum(e.rx_bytes for e in entries)


@pytest.mark.parametrize("refuse", ["", "ft_flush_socks"])
def test_socket_counters_are_exact_however_a_connection_ends(refuse, monkeypatch):
    """--app-hook counters runs nothing per read: a TCP reader's bytes are the socket's own account
    (copied_seq against bytes_received, with the peer's FIN taken out) at each flush. Each way a
    connection can end, checked against what the reader really got, to the byte:
    end of file read; the reader closing with data unread (a reset goes out); the reader's own
    half-close (FIN_WAIT2) and the peer's FIN after more data; a reset from the peer; MSG_PEEK
    reads, which take nothing; and a connection open (and partly read) before the tracer started,
    counted from the start on. Also with the flush iterator refused, as some kernels do (a walk
    of iter/tcp in its place), on every kernel."""
    import socket
    import struct

    early = _pair()   # before the tracer: 3000 B sent, 1000 read before it starts
    early[0].sendall(b"e" * 3000)
    _read_exactly(early[1], 1000)
    monkeypatch.setenv("STEER_TEST_REFUSE", refuse)
    tracer = Tracer(timing="sampled", app_hook="counters").start()
    cases = {}
    try:
        # the early connection: 2000 B read under tracing (already received before), then 500 more
        s, r, sport, dport = early
        got = _read_exactly(r, 2000)
        s.sendall(b"e" * 500)
        got += _read_exactly(r, 500)
        cases["open before the tracer"] = (got, sport, dport, 500)

        # end of file: every byte, then the FIN read (recv returns b"")
        s, r, sport, dport = _pair()
        s.sendall(b"a" * 70000)
        s.close()
        got = _read_to_eof(r)
        r.close()
        cases["end of file"] = (got, sport, dport, got)

        # the reader closes with 5000 B unread: a reset goes out, what it read stays counted
        s, r, sport, dport = _pair()
        s.sendall(b"b" * 9000)
        got = _read_exactly(r, 4000)
        time.sleep(0.05)   # the rest has arrived, unread
        r.close()
        s.close()
        cases["reader closes with data unread"] = (got, sport, dport, 9000)

        # the reader half-closes first (FIN_WAIT2), the peer sends more and its FIN: the reader
        # reads everything and the end of file in a socket that the FIN moved to TCP_CLOSE
        s, r, sport, dport = _pair()
        s.sendall(b"c" * 1000)
        got = _read_exactly(r, 1000)
        r.shutdown(socket.SHUT_WR)
        assert s.recv(10) == b""
        s.sendall(b"c" * 3000)
        s.close()
        time.sleep(0.05)
        got += _read_to_eof(r)
        still_open = _counted(tracer, sport, dport)
        r.close()
        if tracer.plan.tcp_walk:
            # the walk of iter/tcp that stands in for a refused flush iterator finds the sockets
            # in the TCP hash tables, which this one left at TCP_CLOSE: what was read until then
            # is counted, the rest at its close (below), as the figure's how says
            assert still_open == (1000, got), "closed by TCP, still open here, walked"
            assert "when its socket is closed" in tracer.capabilities.figures["tcp_app_bytes"].how
        else:
            assert still_open == (got, got), "closed by TCP, still open here"
        cases["reader half-closes first"] = (got, sport, dport, got)

        # a reset from the peer after the reader took part of what it sent
        s, r, sport, dport = _pair()
        s.sendall(b"d" * 6000)
        got = _read_exactly(r, 2500)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        time.sleep(0.05)
        try:
            while chunk := r.recv(65536):
                got += len(chunk)
        except ConnectionResetError:
            pass
        r.close()
        cases["peer resets"] = (got, sport, dport, None)

        # MSG_PEEK takes nothing: only the reads that consume count
        s, r, sport, dport = _pair()
        s.sendall(b"p" * 2000)
        time.sleep(0.05)
        assert len(r.recv(2000, socket.MSG_PEEK)) == 2000
        got = _read_exactly(r, 1200)
        cases["MSG_PEEK"] = (got, sport, dport, 2000)
        peek = (s, r)

        time.sleep(0.1)
        for name, (got, sport, dport, rx) in cases.items():
            app, rx_bytes = _counted(tracer, sport, dport)
            print(f"{name}: read {got} B, steer app_bytes {app} B, rx_bytes {rx_bytes} B")
            assert app == got, name
            if rx is not None:
                assert rx_bytes == rx, name
            else:
                assert got <= rx_bytes <= 6000, name
        for x in peek + early[:2]:
            x.close()
    finally:
        tracer.stop()


_READER = """
import socket, sys
l = socket.create_server(({addr!r}, {port}))
print("listening", flush=True)
c, _ = l.accept()
got = 0
while got < {first}:
    got += len(c.recv({first} - got))
print("read", got, flush=True)
sys.stdin.readline()            # the tracer starts meanwhile
got = 0
while chunk := c.recv(65536):
    got += len(chunk)
print("read", got, flush=True)
"""

_SENDER = """
import socket, sys
s = socket.create_connection(({addr!r}, {port}))
s.sendall(bytes({first}))
sys.stdin.readline()
s.sendall(bytes({rest}))
s.close()
"""


def test_socket_counters_count_a_connection_open_in_another_namespace():
    """A connection already open when the tracer starts, in a namespace of its own (a container):
    the tracer visits every network namespace once at start to count it from then on, so what
    its reader gets afterwards is counted to the byte, and nothing from before."""
    first, rest, port = 300_000, 5_000_000, PORT + 7
    with Lab([], seconds=30) as lab:
        ns = lambda name: ["nsenter", f"--net={NETNS_DIR}/{name}", "python3", "-c"]  # noqa: E731
        reader = subprocess.Popen(ns(lab.rx) + [_READER.format(addr=RECEIVER_ADDR, port=port,
                                                               first=first)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert reader.stdout.readline().strip() == "listening"
        sender = subprocess.Popen(ns(lab.tx) + [_SENDER.format(addr=RECEIVER_ADDR, port=port,
                                                               first=first, rest=rest)],
                                  stdin=subprocess.PIPE, text=True)
        assert reader.stdout.readline().split() == ["read", str(first)]
        tracer = Tracer(timing="sampled", app_hook="counters").start()
        try:
            assert tracer.unreached_namespaces == 0
            for p in (reader, sender):
                p.stdin.write("go\n")
                p.stdin.flush()
            assert sender.wait(timeout=30) == 0
            after = int(reader.stdout.readline().split()[1])
            reader.wait(timeout=30)
            entries = [e for e in tracer.sample().entries.values() if e.flow.dport == port]
        finally:
            tracer.stop()
    print(f"read after the tracer started: {after} B; steer app_bytes "
          f"{sum(e.app_bytes for e in entries)} B, rx {sum(e.rx_bytes for e in entries)} B")
    assert after == rest
    assert sum(e.app_bytes for e in entries) == rest
    assert sum(e.rx_bytes for e in entries) == rest


def _udp_reads_on(tracer, lab) -> None:
    """Where fexit is refused, the sampled mode puts the UDP reads' tracepoint on its hook when
    datagrams arrive, and the reads of the first moment, before it is there, are not counted:
    by design (test_refusals_live holds it), and the longer the more loaded the machine (43
    datagrams of a 500 Mbit/s flow in one clean-clone run, 2026-11-27). A datagram first, and
    the hook on, before the flows start: their reads are then all counted. (The plan names the
    fallback; the refusals name only the first program of a group the kernel refused.)"""
    from steer.trace.programs import UDP_READS_FALLBACK
    if UDP_READS_FALLBACK not in tracer.plan.programs:
        return
    subprocess.run(["ip", "netns", "exec", lab.rx, sys.executable, "-c",
                    "import socket; socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)"
                    ".sendto(b'x', ('::1', 9))"], check=True)
    deadline = time.monotonic() + 10
    while UDP_READS_FALLBACK not in tracer.attached_programs and time.monotonic() < deadline:
        time.sleep(0.01)
    assert UDP_READS_FALLBACK in tracer.attached_programs, \
        f"the UDP reads' program not on its hook 10 s after a datagram ({tracer.udp_reads_error})"


@own_reader_cpu
@pytest.mark.parametrize("timing", ["sampled", "exact"])
def test_ipv6_flows_in_each_mode(timing):
    """IPv6, TCP and UDP, in each timing mode (on the lab namespace's own loopback, the skbs
    taken in on the sender's CPU): the bytes against iperf3's (the readers' to the byte, the
    connection's extras aside), the reader and its CPU, the kernel side on the sender's CPU, the
    class from the topology. Exact timing's TCP bytes are those net:netif_receive_skb handed
    up, held to bpftrace's count of the same hook: on this kernel the reader gets whole 64 KB
    skbs that no netif_receive_skb (nor netif_rx) event carried, in 1 to 2 runs of 100 (2 to 9
    skbs, 2026-11-28, bpftrace and steer agreeing to the byte in all 200), so iperf3's count is
    no lower bound there."""
    from helpers import COOKIE, LOOPBACK_MSS_V6, tcp_rx_bound
    from steer.model.classify import classify
    from witness import ReceivedTcpBytes
    udp_connect = 4   # iperf3's UDP "connect" datagram: read, not in its count
    tracer = Tracer(timing=timing, sample_hz=SAMPLE_HZ).start()
    witness = ReceivedTcpBytes(BASE_PORT)   # the TCP flow, the lab's first
    try:
        flows = [LabFlow(SENDER_CPU, READER_CPU, ipv6=True),
                 LabFlow(SENDER_CPU, READER_CPU, ipv6=True, udp_rate="500M")]
        with Lab(flows, seconds=3) as lab:
            lab.start_servers()
            _udp_reads_on(tracer, lab)
            before = tracer.sample()
            lab.start_clients()
            results = lab.wait(timeout=40)
            time.sleep(0.2)
            after = tracer.sample()
            passed = witness.read()
        snap = build_snapshot(before, after, read_topology(), tracer.capabilities)
    finally:
        witness.close()
        tracer.stop()
    topo = read_topology()
    for r in results:
        assert r.error is None, r.error
        (f,) = [f for f in snap.flows if (f.flow.proto, f.flow.sport, f.flow.dport) ==
                (r.flow.proto, r.sender_port, r.flow.port)]
        j = f.as_json(snap.capabilities)
        print(f"{timing} IPv6 {r.flow.proto}: iperf3 {r.received_bytes} B, steer rx "
              f"{j['rx_bytes']} app {j['app_bytes']}, netif_receive_skb (bpftrace) "
              f"{passed.get(r.sender_port)}; CPUs {j['kernel_cpu']}/{j['app_cpu']} "
              f"{j['class']}; kernel {j['kernel_seconds']:.3f} s app {j['app_seconds']:.3f} s")
        assert (j["src"], j["dst"]) == ("::1", "::1")
        got = r.received_bytes
        if r.flow.proto == "tcp":
            # the socket's in-order count (sampled), at most the unread tail beyond iperf3's
            # count (it closes with data queued); what the hook handed up (exact), with the
            # segments the sender retransmitted (on some VMs of this kind ~1% of them)
            if timing == "exact":
                assert j["rx_bytes"] == passed.get(r.sender_port), passed
                assert j["rx_bytes"] <= tcp_rx_bound(r, LOOPBACK_MSS_V6)
            else:
                assert got <= j["rx_bytes"] <= got * 1.001 + COOKIE
            assert j["app_bytes"] == got + COOKIE
        else:
            sent = r.raw["end"]["sum_sent"]["bytes"]
            assert got <= j["rx_bytes"] <= sent + udp_connect
            # every read, the connect datagram's too (the reads' hook is on before it)
            assert got <= j["app_bytes"] <= got + udp_connect
        assert j["app_pid"] == r.receiver_pid and j["app_cpu"] == READER_CPU
        assert j["kernel_cpu"] == SENDER_CPU and j["kernel_seconds"] > 0
        assert j["class"] == classify(SENDER_CPU, READER_CPU, topo).cls


@own_reader_cpu
@pytest.mark.parametrize("timing", ["sampled", "exact"])
def test_udp_streams_that_connect_after_a_first_read_each_get_their_reads(timing):
    """iperf3 -u -P 2: each stream's server socket reads the client's first datagram unconnected,
    then connects to it, so two sockets of one port each read one peer. Each stream's reads are
    its own flow's, to the byte of the server's count of it (its -J output), not the port's
    unconnected line: the sampled mode, which keeps a socket's flow in its storage, takes it
    again when connect() names the peer (it kept the first, and read 0 B for both streams)."""
    from steer.experiment.lab import UDP_DATAGRAM
    port, streams = PORT + 9, 2
    tracer = Tracer(timing=timing, sample_hz=SAMPLE_HZ).start()
    try:
        with Lab([], seconds=SECONDS) as lab:
            ns = lambda name: ["nsenter", f"--net={NETNS_DIR}/{name}"]  # noqa: E731
            server = subprocess.Popen(ns(lab.rx) + ["taskset", "-c", str(READER_CPU), "iperf3",
                                      "-s", "-1", "-J", "-B", RECEIVER_ADDR, "-p", str(port)],
                                      stdout=subprocess.PIPE, text=True)
            try:
                deadline = time.monotonic() + 10
                while not listening(server.pid, port) and time.monotonic() < deadline:
                    time.sleep(0.02)
                _udp_reads_on(tracer, lab)
                before = tracer.sample()
                client = subprocess.run(ns(lab.tx) + [
                    "taskset", "-c", str(SENDER_CPU), "iperf3", "-c", RECEIVER_ADDR, "-p",
                    str(port), "-u", "-b", "300M", "-l", str(UDP_DATAGRAM), "-P", str(streams),
                    "-t", "2", "-J"], capture_output=True, text=True, timeout=40)
                received = json.loads(server.communicate(timeout=30)[0])
            finally:
                server.kill()
                server.wait()
            time.sleep(0.2)
            after = tracer.sample()
        snap = build_snapshot(before, after, read_topology(), tracer.capabilities)
    finally:
        tracer.stop()
    assert client.returncode == 0, client.stdout[-500:]
    sending = json.loads(client.stdout)
    sent = {s["udp"]["socket"]: s["udp"]["bytes"] for s in sending["end"]["streams"]}
    sent = {c["local_port"]: sent[c["socket"]] for c in sending["start"]["connected"]}
    # the server's count of each stream: the datagrams it numbered less those it found missing
    # (iperf3 3.12 writes 0 for a receiving stream's bytes), all of one size; their sum is its
    # byte count
    peer = {c["socket"]: c["remote_port"] for c in received["start"]["connected"]}
    got = {peer[s["udp"]["socket"]]: (s["udp"]["packets"] - s["udp"]["lost_packets"]) * UDP_DATAGRAM
           for s in received["end"]["streams"]}
    assert sum(got.values()) == received["end"]["sum_received"]["bytes"]
    flows = {f.flow.sport: f.as_json(snap.capabilities) for f in snap.flows
             if f.flow.proto == "udp" and f.flow.dport == port}
    print(f"{timing}: iperf3 received {got}, sent {sent}; steer app "
          f"{ {p: j['app_bytes'] for p, j in flows.items()} }")
    assert len(got) == streams and set(got) == set(sent)
    for p, b in got.items():
        # the server counts what it read while the test ran; a datagram late for its count is
        # still read (at most what the stream sent); the first datagram went to the port's line
        assert b > 0 and b <= flows[p]["app_bytes"] <= sent[p], p
        assert flows[p]["app_pid"] == server.pid and flows[p]["app_cpu"] == READER_CPU
    wild = [j["app_bytes"] for p, j in flows.items() if p not in got]
    assert sum(wild) <= 4 * streams, "reads on the port's unconnected line beyond the first datagrams"
