"""The live view's rendering of a snapshot built from synthetic samples, as a wide terminal (or a
pipe: make_console's 200 columns) shows it, without colour."""
import os

from rich.console import Console

from steer.flows import build_snapshot
from steer.flowspec import FlowSpec
from steer.samples import Capabilities, CpuSample, FlowCpuSample, FlowId, TraceSample
from steer.steering import DeviceState, RuleView
from steer.topology import read_topology
from steer.view import render, rules_lines

VM = os.path.join(os.path.dirname(__file__), "fixtures/sysfs-vm-2cpu")
CAPS = Capabilities("available", "available", "available", "unavailable: no PMU")
A = FlowId("tcp", "198.18.0.1", 40000, "198.18.0.2", 5201)
B = FlowId("udp", "198.18.0.1", 40001, "198.18.0.2", 9000)
S = 10**9


def _snapshot(entries):
    e = {(s.flow, s.cpu): s for s in entries}
    after = TraceSample(2 * S, e, (CpuSample(0, net_rx_events=2000, net_rx_ns=S), CpuSample(1)),
                        len(e), 1024)
    return build_snapshot(TraceSample(0, {}, (CpuSample(0), CpuSample(1)), 0, 1024), after,
                          read_topology(VM), CAPS)


def _text(snap, **kw) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(render(snap, read_topology(VM), **kw))
    return console.export_text()


def test_a_flow_line_has_rate_cpus_class_and_reader():
    snap = _snapshot([
        FlowCpuSample(A, 0, rx_bytes=10**9, rx_skbs=100, kernel_ns=9 * S // 10),
        FlowCpuSample(A, 1, kernel_ns=S // 10, app_ns=S // 2, app_calls=5, app_bytes=10**9,
                      app_pid=42, app_comm="iperf3"),
        FlowCpuSample(B, 1, rx_bytes=1000, rx_skbs=1, kernel_ns=1000, app_bytes=1000,
                      app_calls=1, app_ns=1000, app_pid=43, app_comm="nc")])
    text = _text(snap)
    (line,) = [l for l in text.splitlines() if "198.18.0.1:40000" in l]
    for want in ("4.00 Gbit/s", "0 (90%)", "same-socket", "iperf3/42", "1.000", "0.500"):
        assert want in line, (want, line)
    assert "4.00 kbit/s" in text and "same-core" in text    # B: 1000 B in 2 s, all on CPU 1
    assert "LLC unavailable: no PMU" in text
    assert "50.0%" in text                                   # CPU 0's NET_RX: 1 s of 2
    one = _text(snap, limit=1)
    assert "40000" in one and "40001" not in one             # by rate, the first LIMIT


def test_an_empty_interval_says_so():
    assert "(no TCP/UDP receive traffic in this interval)" in _text(_snapshot([]))


def test_rules_lines_say_detached_offline_and_unreadable():
    rule = RuleView(FlowSpec.parse("proto=tcp,dport=5201"), cpu=3, id=0, packets=10, bytes=15000)
    counters = {"passed": 3, "unparsed": 1, "redirected": 10, "redirect_failed": 0}
    lines = rules_lines([DeviceState("veth-rx", "lab", "generic", "veth-rx was removed", [rule],
                                     counters),
                         DeviceState("eth9", None, error="no device eth9")], online={0, 1})
    assert lines[0] == ("veth-rx in lab (generic XDP): redirected 10, passed 3, unparsed 1, "
                        "failed redirects 0")
    assert lines[1].startswith("  DETACHED: veth-rx was removed;")
    assert "proto=tcp,dport=5201" in lines[2] and "-> CPU 3" in lines[2] and "CPU offline" in lines[2]
    assert lines[3] == "eth9: no device eth9"
    assert rules_lines([], online={0}) == ["no pinned steering rules"]
