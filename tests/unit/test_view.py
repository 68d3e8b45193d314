"""The views' rendering of snapshots built from synthetic samples, without colour: plain output
at a pipe's 200 columns, the live screen at the sizes people's terminals have, the keys."""
import os

import pytest
from rich.console import Console

from steer.model.flows import build_snapshot
from steer.model.flowspec import FlowSpec
from steer.model.capabilities import MISSING, WORKS, Capabilities, Figure
from steer.model.samples import CpuSample, FlowCpuSample, FlowId, TraceSample
from steer.steering.xdp import DeviceState, RuleView
from steer.model.topology import read_topology
from steer.present.live import handle_key
from steer.model.units import parse_rate, rate_text
from steer.present.view import (HISTORY, History, ViewState, render, rules_lines, screen, short_flow,
                                sparkline)

VM = os.path.join(os.path.dirname(__file__), "../support/fixtures/sysfs-vm-2cpu")
CAPS = Capabilities(*[Figure(WORKS, "")] * 3, Figure(MISSING, "no PMU"))
A = FlowId("tcp", "198.18.0.1", 40000, "198.18.0.2", 5201)
B = FlowId("udp", "198.18.0.1", 40001, "198.18.0.2", 9000)
ACKS = FlowId("tcp", "198.18.0.2", 5201, "198.18.0.1", 40000)   # what A's sender receives
S = 10**9


def _snapshot(entries):
    e = {(s.flow, s.cpu): s for s in entries}
    after = TraceSample(2 * S, e, (CpuSample(0, net_rx_events=2000, net_rx_ns=S), CpuSample(1)),
                        len(e), 1024)
    return build_snapshot(TraceSample(0, {}, (CpuSample(0), CpuSample(1)), 0, 1024), after,
                          read_topology(VM), CAPS)


def _text(snap, width=200, **kw) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(render(snap, read_topology(VM), width=width, **kw))
    return console.export_text()


def _screen(snap, width, height, state=None, history=None) -> list[str]:
    console = Console(width=width, height=height, record=True, color_system=None)
    console.print(screen(snap, read_topology(VM), state or ViewState(), width, height, history))
    return console.export_text().splitlines()


DATA = [FlowCpuSample(A, 0, rx_bytes=10**9, rx_skbs=100, kernel_ns=9 * S // 10),
        FlowCpuSample(A, 1, kernel_ns=S // 10, app_ns=S // 2, app_calls=5, app_bytes=10**9,
                      app_pid=42, app_comm="iperf3"),
        FlowCpuSample(B, 1, rx_bytes=1000, rx_skbs=1, kernel_ns=1000, app_bytes=1000,
                      app_calls=1, app_ns=1000, app_pid=43, app_comm="nc"),
        FlowCpuSample(ACKS, 0, rx_packets=50, kernel_ns=5000)]


def test_a_flow_line_has_rate_cpus_class_and_reader():
    snap = _snapshot(DATA)
    text = _text(snap, state=ViewState(show_idle=True))
    (line,) = [l for l in text.splitlines() if "198.18.0.1:40000 ->" in l]
    for want in ("4.00 Gbit/s", "0 (90%)", "50%", "25%", "same-socket", "iperf3/42", "1.000",
                 "0.500"):
        assert want in line, (want, line)
    (b,) = [l for l in text.splitlines() if ":9000" in l]
    assert "4.00 kbit/s" in b and "same-core" in b
    assert " - " in b.split("nc/43")[1]              # a cost per GB of 1000 bytes says nothing
    assert "LLC unavailable: no PMU" in text and "LLC k" not in text
    assert "rx  50%" in text                          # CPU 0's NET_RX: 1 s of 2
    one = _text(snap, limit=1)
    assert "40000" in one and "40001" not in one      # by rate, the first LIMIT


def test_receive_work_no_flow_was_charged_with_is_named_below_the_flows():
    """The CPUs' unattributed NET_RX and cpumap kthread time, from 1% of a CPU on: with the
    flows' kernel time, the whole of the receive work."""
    e = {(s.flow, s.cpu): s for s in DATA}
    cpus = (CpuSample(0, net_rx_ns=S, net_rx_unattributed_ns=S // 50),
            CpuSample(1, kthread_ns=S // 2, kthread_unattributed_ns=S // 25))
    snap = build_snapshot(TraceSample(0, {}, (CpuSample(0), CpuSample(1)), 0, 1024),
                          TraceSample(2 * S, e, cpus, len(e), 1024), read_topology(VM), CAPS)
    assert "receive work no flow was charged with: 3.0% of a CPU" in _text(snap)
    assert "no flow was charged" not in _text(_snapshot(DATA))   # none: not named


def test_idle_flows_are_hidden_and_counted_unless_asked_for():
    snap = _snapshot(DATA)
    text = _text(snap)
    assert "40000" in text and ":9000" not in text and "5201 -> " not in text
    assert "+2 idle flows (below 10.00 kbit/s)" in text
    shown = _text(snap, state=ViewState(show_idle=True))
    assert ":9000" in shown and "198.18.0.2:5201 -> 198.18.0.1:40000" in shown
    assert "idle" not in shown
    low = _text(snap, state=ViewState(min_rate=1000))
    assert ":9000" in low and "+1 idle flow " in low   # the ACK stream has no payload


@pytest.mark.parametrize("width,height", [(80, 24), (100, 30), (160, 48)])
def test_the_numbers_that_matter_are_whole_at_any_usual_size(width, height):
    snap = _snapshot(DATA)
    lines = _screen(snap, width, height)
    assert len(lines) <= height and all(len(l) <= width for l in lines)
    (line,) = [l for l in lines if "40000" in l]
    for want in ("4.00 Gbit/s", "0 (90%)", "50%", "1", "25%", "same-socket"):
        assert want in line, (want, line)
    assert "…" not in line
    assert "iperf3/42" in line or width < 100         # the reader goes where room is short
    assert any("? help" in l for l in lines)


def test_a_short_terminal_shows_as_many_flows_as_fit_and_says_how_many_more():
    flows = [FlowCpuSample(FlowId("tcp", "198.18.0.1", 40000 + i, "198.18.0.2", 5201), 0,
                           rx_bytes=10**6 * (i + 1), kernel_ns=1000) for i in range(40)]
    lines = _screen(_snapshot(flows), 80, 24)
    assert len(lines) <= 24
    rows = [l for l in lines if "->" in l]
    assert rows and "40039" in rows[0]                # the fastest first
    assert any(f"+{40 - len(rows)} more below" in l for l in lines)


def test_sort_and_filter():
    snap = _snapshot(DATA)
    rows = lambda state: [l for l in _text(snap, state=state).splitlines() if "->" in l]  # noqa: E731
    assert ":40000" in rows(ViewState(show_idle=True))[0]
    assert ":40000" in rows(ViewState(show_idle=True, sort="class"))[1]   # same-core first
    assert [":9000" in r for r in rows(ViewState(show_idle=True, filter="NC"))] == [True]
    text = _text(snap, state=ViewState(filter="nothing-like-it"))
    assert "(no flow matches the filter)" in text and "filter 'nothing-like-it' hides 1" in text


def test_keys_change_the_state_like_htop():
    state = ViewState()
    for key in "k/52\x7f01\r":
        assert handle_key(state, key)
    assert state.sort == "kernel" and state.filter == "501" and not state.editing
    assert handle_key(state, "i") and state.show_idle
    assert handle_key(state, " ") and state.paused
    assert handle_key(state, "?") and state.help
    assert handle_key(state, "x") and not state.help   # any key leaves the help
    assert handle_key(state, "\x1b") and state.filter == ""
    assert handle_key(state, "/") and handle_key(state, "q") and state.filter == "q"   # typed
    assert handle_key(state, "\x1b") and not state.editing
    assert not handle_key(state, "q")


@pytest.mark.parametrize("width,want", [
    (60, "tcp 198.18.0.1:40000 -> 198.18.0.2:5201"),
    (30, "198.18.0.1:40000->.2:5201"),
    (12, "…00->.2:5201"),
])
def test_short_flow_keeps_the_local_port_to_the_last(width, want):
    assert short_flow(A, width) == want


def test_short_flow_compresses_ipv6_and_names_udp():
    f = FlowId("udp", "2001:0db8:0000:0000:0000:0000:0000:0001", 53, "2001:db8::2", 40000)
    assert short_flow(f, 80) == "udp [2001:db8::1]:53 -> [2001:db8::2]:40000"
    assert short_flow(f, 20).endswith("]:40000") and len(short_flow(f, 20)) == 20


def test_rates_parse_and_print():
    assert parse_rate("10k") == 10_000 and parse_rate("1.5M") == 1.5e6 and parse_rate("2G") == 2e9
    assert parse_rate("500") == 500 and parse_rate("10kbit/s") == 10_000
    for bad in ("fast", "-1k", ""):
        with pytest.raises(ValueError):
            parse_rate(bad)
    assert rate_text(12e9) == "12.00 Gbit/s" and rate_text(999) == "999 bit/s"


def test_sparkline_follows_the_rate_history():
    h = History()
    for rx in (1, 2, 4, 8):
        h.add(_snapshot([FlowCpuSample(A, 0, rx_bytes=10**6 * rx)]))
    assert sparkline(h.rates[A]) == " " * (HISTORY - 4) + "▂▃▅█"
    h.add(_snapshot([]))
    assert h.rates[A][-1] == 0.0                       # gone for an interval: kept, at zero


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


def test_an_smt_sibling_placement_is_shown_apart_from_same_core(tmp_path):
    from sysfs import xeon_2s_smt
    from steer.present.view import class_label
    xeon = read_topology(xeon_2s_smt(str(tmp_path)))
    e = [FlowCpuSample(A, 0, rx_bytes=10**9, rx_skbs=100, kernel_ns=S),
         FlowCpuSample(A, 24, app_ns=S, app_calls=5, app_bytes=10**9, app_pid=42, app_comm="r"),
         FlowCpuSample(B, 3, rx_bytes=10**6, rx_skbs=10, kernel_ns=S, app_ns=S, app_calls=5,
                       app_bytes=10**6, app_pid=43, app_comm="r")]
    after = TraceSample(2 * S, {(s.flow, s.cpu): s for s in e}, (), len(e), 1024)
    snap = build_snapshot(TraceSample(0, {}, (), 0, 1024), after, xeon, CAPS)
    labels = {f.flow: class_label(f)[0] for f in snap.flows}
    assert labels == {A: "same-core/smt", B: "same-core"}
    assert {f.flow: f.as_json()["smt_sibling"] for f in snap.flows} == {A: True, B: False}


def test_a_kernel_that_refused_programs_gets_one_line_naming_the_figures_and_why():
    from test_flows import refusing_caps
    from dataclasses import replace
    snap = replace(_snapshot(DATA), capabilities=refusing_caps("ft_flush_socks", "ft_tcp_sockets",
                                                               "ft_udp_recvmsg_exit"))
    lines = _screen(snap, 80, 24)
    (line,) = [l for l in lines if l.startswith("degraded:")]
    assert line.index("degraded:") == 0 and len(line) <= 80
    assert "partial TCP app bytes" in line and lines.index(line) == 1
    assert "degraded:" in _text(snap) and "iter/bpf_sk_storage_map" in _text(snap)
    assert not [l for l in _screen(_snapshot(DATA), 80, 24) if "degraded" in l]


def test_a_share_resting_on_few_samples_is_marked_rough():
    from dataclasses import replace
    snap = _snapshot(DATA)
    few = replace(snap, capabilities=replace(CAPS, mode="sampled"), flows=[
        replace(snap.flows[0], kernel_samples=4, app_samples=400)])
    line = next(l for l in _text(few).splitlines() if "5201" in l)
    assert "~50%" in line and "~25%" not in line and " 25%" in line
    assert "~" not in next(l for l in _text(snap).splitlines() if "5201" in l)


HOSTILE = ["[/x]", "[bold red]x", "\x1b[2J\x1b]0;pwned\x07", "a\u202eb", "[/]"]


@pytest.mark.parametrize("comm", HOSTILE)
def test_a_readers_name_is_shown_as_text_never_as_markup_or_terminal_codes(comm):
    """Anyone picks their process's name: it must neither break the view (rich parses "[/x]"
    as a closing tag) nor reach the terminal as an escape sequence."""
    data = [FlowCpuSample(A, 1, rx_bytes=10**9, rx_skbs=100, kernel_ns=S // 10, app_ns=S // 2,
                          app_calls=5, app_bytes=10**9, app_pid=42, app_comm=comm)]
    snap = _snapshot(data)
    for width, height in ((200, 40), (80, 24)):
        console = Console(width=width, height=height, record=True, force_terminal=True,
                          color_system="truecolor")
        console.print(screen(snap, read_topology(VM), ViewState(), width, height))
        console.print(render(snap, read_topology(VM), width=width))
        raw = console.export_text(styles=True, clear=False)
        # what rich itself writes is SGR colour (ESC [ ... m); nothing else may get through
        assert "\x1b[2J" not in raw and "\x1b]" not in raw and "\x07" not in raw
        assert "\u202e" not in raw
        plain = console.export_text()
        shown = comm.replace("\x1b", "\\x1b").replace("\x07", "\\x07").replace("\u202e", "\\u202e")
        if width == 200:   # at 80 columns the reader column gives way to the flow's
            assert f"{shown}/42" in plain, plain


def test_device_and_namespace_names_in_rules_are_escaped():
    (line,) = rules_lines([DeviceState("ev\x1bil", "n\x9bs", error="gone")], {0, 1})
    assert "\x1b" not in line and "\x9b" not in line and "ev\\x1bil in n\\x9bs" in line


@pytest.mark.parametrize("cores,size", [(None, (80, 24)), (16, (80, 24)), (48, (80, 24)),
                                        (64, (80, 24)), (64, (120, 40)), (64, (200, 60))])
def test_a_big_host_folds_its_cpus_and_the_flows_stay_in_view(tmp_path, cores, size):
    """On 2, 64, 192 and 256 CPUs: a line a socket with a character a CPU, the busiest CPUs in
    the lines left, and the flows below in an 80x24 terminal and bigger ones."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../support"))
    from sysfs import epyc_2s
    topo = read_topology(VM if cores is None else epyc_2s(str(tmp_path), cores=cores))
    n = len(topo.online)
    busy = {3: S, n - 1: S // 2}   # a CPU in NET_RX all the time, one half the time
    cpus = tuple(CpuSample(c, net_rx_ns=2 * busy.get(c, S // 100), app_ns=S // 50)
                 for c in topo.online)
    flows = [FlowCpuSample(FlowId("tcp", "198.18.0.1", 40000 + i, "198.18.0.2", 5201), 3,
                           rx_bytes=10**8 * (i + 1), rx_skbs=10, kernel_ns=S // 10) for i in range(5)]
    after = TraceSample(2 * S, {(f.flow, f.cpu): f for f in flows}, cpus, 5, 1024)
    before = TraceSample(0, {}, tuple(CpuSample(c) for c in topo.online), 0, 1024)
    snap = build_snapshot(before, after, topo, CAPS)
    width, height = size
    console = Console(width=width, height=height, record=True, color_system=None)
    console.print(screen(snap, topo, ViewState(), width, height))
    lines = console.export_text().splitlines()
    assert len(lines) <= height and all(len(l) <= width for l in lines)
    assert sum("->" in l for l in lines) == 5, lines     # every flow is on the screen
    sockets = [l for l in lines if l.startswith("socket ")]
    if n <= 8:
        assert not sockets
        return
    assert len(sockets) == 2 and all(f"{n // 2} CPUs" in l for l in sockets)
    # CPU 3 (socket 0) all the time in NET_RX, the last CPU (socket 1) half of it
    assert "█" in sockets[0] and "▄" in sockets[1] and "█" not in sockets[1], sockets
    # the busiest CPUs below the socket lines, the others counted
    assert any("3 ██████████ rx 100%" in l for l in lines), lines
    assert any(f"{n - 1} █████      rx  50%" in l for l in lines), lines
    assert any("quieter CPUs" in l for l in lines)


POD = "/kubepods.slice/kubepods-pod7d1c2a3b_4e5f_4a6b_8c7d_9e0f1a2b3c4d.slice/cri-containerd-" + "a" * 64 + ".scope"


def _with_workloads(snap, names):
    """SNAP with its flows' readers resolved as steer.trace.workloads would: NAMES maps a flow's
    reader pid to its cgroup path; the pod's names as the kubelet's logs give them."""
    from steer.model.reports import attach_workloads
    from steer.model.workloads import parse_cgroup_path
    from dataclasses import replace
    snap = replace(snap, flows=[replace(f, app_cgroup_id=f.app_pid) if f.app_pid else f
                                for f in snap.flows])

    def lookup(pid):
        w = parse_cgroup_path(names.get(pid))
        if w and w.pod_uid:
            w = w.with_pod("web", "nginx-7d9f", "nginx")
        return names.get(pid), w
    return attach_workloads(snap, lookup)


def test_the_reader_column_names_the_workload_and_the_filter_and_sort_know_it():
    snap = _with_workloads(_snapshot(DATA), {42: POD, 43: "/system.slice/nc.service"})
    text = _text(snap, state=ViewState(show_idle=True))
    (a,) = [l for l in text.splitlines() if ":40000 ->" in l]
    (b,) = [l for l in text.splitlines() if ":9000" in l]
    assert "web/nginx-7d9f:nginx" in a and "iperf3/42" not in a
    assert "nc.service" in b and "nc/43" not in b
    rows = lambda state: [l for l in _text(snap, state=state).splitlines() if "->" in l]  # noqa: E731
    assert [":9000" in r for r in rows(ViewState(show_idle=True, filter="nc.serv"))] == [True]
    assert [":40000" in r for r in rows(ViewState(show_idle=True, filter="kubepods"))] == [True]
    # by workload: nc.service before web/..., the ACK flow (no reader) last
    order = rows(ViewState(show_idle=True, sort="workload"))
    assert ":9000" in order[0] and ":40000 ->" in order[1] and "5201 ->" in order[2]
    state = ViewState()
    assert handle_key(state, "w") and state.sort == "workload"


@pytest.mark.parametrize("name", HOSTILE)
def test_a_workload_name_is_shown_as_text(name):
    """A cgroup's name is its maker's choice, as a process's is."""
    snap = _with_workloads(_snapshot(DATA), {42: f"/system.slice/{name}.service"})
    console = Console(width=200, record=True, force_terminal=True, color_system="truecolor")
    console.print(render(snap, read_topology(VM), width=200))
    raw = console.export_text(styles=True, clear=False)
    assert "\x1b[2J" not in raw and "\x1b]" not in raw and "\u202e" not in raw


def test_rules_list_the_settings_steer_changed_with_what_reset_puts_back():
    from steer.present.view import changed_lines
    assert changed_lines([]) == []
    lines = changed_lines([
        {"kind": "irq", "irq": "35", "found": "3"},
        {"kind": "rps", "netns": "lab\x1b[2J", "dev": "veth-rx", "queue": "rx-0", "found": "0"},
        {"kind": "napi", "netns": None, "dev": "eth0", "napi_id": None,
         "found": "threaded, on CPUs 0-3"}])
    assert lines == ["settings steer changed, which steer reset puts back (as found):",
                     "  IRQ 35: CPUs 3", "  RPS of veth-rx in lab\\x1b[2J rx-0: mask 0",
                     "  every NAPI of eth0: threaded, on CPUs 0-3"]
