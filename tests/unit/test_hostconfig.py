"""The host's configuration as a sweep records it, and NIC locality, on built sysfs trees:
ethtool's text, cpumasks, which sockets a NIC is attached to, and the report's table."""
from steer.experiment.hostconfig import device_config, mask_to_cpus, parse_ethtool_sections
from steer.experiment.report import config_md
from steer.experiment.sweep import device_sockets, summarize
from steer.model.topology import nic_local, nic_sockets, read_topology

from sysfs import add_nic, xeon_2s_smt

# `ethtool -l` of a veth and `-g`/`-c` of a NIC, as ethtool 6.1 prints them
CHANNELS = """Channel parameters for vt0:
Pre-set maximums:
RX:\t\t2
TX:\t\t2
Other:\t\tn/a
Combined:\tn/a
Current hardware settings:
RX:\t\t1
TX:\t\t1
Other:\t\tn/a
Combined:\tn/a
"""
RINGS = """Ring parameters for eth0:
Pre-set maximums:
RX:\t\t\t8192
RX Mini:\t\tn/a
RX Jumbo:\t\tn/a
TX:\t\t\t8192
Current hardware settings:
RX:\t\t\t512
RX Mini:\t\tn/a
RX Jumbo:\t\tn/a
TX:\t\t\t512
RX Buf Len:\t\tn/a
"""
COALESCE = """Coalesce parameters for eth0:
Adaptive RX: on  TX: off
stats-block-usecs: n/a
sample-interval: n/a
rx-usecs: 50
rx-frames: n/a
"""


def test_ethtool_text_parses_into_maximum_and_current():
    assert parse_ethtool_sections(CHANNELS) == {
        "max": {"rx": 2, "tx": 2, "other": "n/a", "combined": "n/a"},
        "current": {"rx": 1, "tx": 1, "other": "n/a", "combined": "n/a"}}
    rings = parse_ethtool_sections(RINGS)
    assert rings["max"]["rx"] == 8192 and rings["current"]["rx"] == 512
    assert rings["current"]["rx buf len"] == "n/a"
    c = parse_ethtool_sections(COALESCE)["current"]
    assert c["adaptive-rx"] == "on" and c["adaptive-tx"] == "off" and c["rx-usecs"] == 50


def test_cpumasks():
    assert mask_to_cpus("00000000,00000000") == []
    assert mask_to_cpus("0000000f") == [0, 1, 2, 3]
    assert mask_to_cpus("00000001,00000002") == [1, 32]


def test_nic_sockets_on_a_two_socket_host(tmp_path):
    xeon = read_topology(xeon_2s_smt(str(tmp_path)))
    socket1 = list(range(12, 24)) + list(range(36, 48))
    assert nic_sockets(xeon, 1, socket1) == (1,)            # the NUMA node says it
    assert nic_sockets(xeon, None, socket1) == (1,)         # no node, but local CPUs of one socket
    assert nic_sockets(xeon, None, list(range(48))) is None  # local to all: no information
    assert nic_sockets(xeon, None, None) is None            # a virtual device
    assert nic_local(xeon, (1,), 12) is True and nic_local(xeon, (1,), 0) is False
    assert nic_local(xeon, (1,), 36) is True                # an SMT sibling on socket 1
    assert nic_local(xeon, None, 12) is None and nic_local(xeon, (1,), None) is None


def test_nic_sockets_on_one_socket(tmp_path):
    from sysfs import FakeCpu, write_tree
    one = read_topology(write_tree(str(tmp_path), [FakeCpu(n, 0, n, [n], [n], [0, 1], 0, 0)
                                                   for n in (0, 1)]))
    assert nic_sockets(one, None, [0, 1]) == (0,)             # every CPU is local, and that is true


def test_device_config_reads_the_nic_from_sysfs(tmp_path):
    root = str(tmp_path)
    add_nic(root, "eth-fixture", 1, list(range(12, 24)), rx_queues=2,
            rps={1: "00000000,00000003"})
    cfg = device_config(root, "eth-fixture")
    assert cfg["mtu"] == 9000 and cfg["numa_node"] == 1 and cfg["local_cpus"] == list(range(12, 24))
    assert "locality" not in cfg
    assert cfg["rx_queues"] == 2
    assert cfg["rps"] == {"state": "on", "cpus": {"rx-0": [], "rx-1": [0, 1]}}
    assert cfg["rfs"] == {"flow_cnt": {"rx-0": 0, "rx-1": 0}}
    # ethtool knows no such device here: each setting says why it is missing, none is invented
    for key in ("offloads", "pause", "rings", "channels", "coalescing"):
        assert isinstance(cfg[key], str) and cfg[key].startswith(("unavailable", "unsupported")), cfg[key]
    add_nic(root, "veth-fixture", None, None, rx_queues=1, mtu=1500)
    v = device_config(root, "veth-fixture")
    assert v["locality"] == "none: a virtual device" and v["numa_node"] is None
    assert v["rps"]["state"] == "off"


def test_cells_carry_nic_locality_and_the_report_the_configuration(tmp_path):
    xeon = read_topology(xeon_2s_smt(str(tmp_path / "sys")))
    results = {"host": {"config": {"smt": {"control": "on", "active": True}, "governor": "performance",
                                   "irqbalance": "not running",
                                   "device": {"name": "eth0", "netns": None, "mtu": 9000, "numa_node": 1,
                                              "local_cpus": list(range(12, 24)),
                                              "rps": {"state": "off"}, "rfs": {"state": "off"},
                                              "pause": {"rx": True, "tx": True},
                                              "congestion_control": "cubic",
                                              "offloads": {"gro": "on", "lro": "off"}}}}}
    nic = device_sockets(results, xeon)
    assert nic == (1,)
    assert summarize(12, 0, [], xeon, nic)["nic_local"] == {"kernel": True, "app": False}
    assert summarize(0, 1, [], xeon, None)["nic_local"] == {"kernel": None, "app": None}
    md = "\n".join(config_md(results["host"]["config"]))
    assert "| MTU | 9000 | 9000 |" in md
    assert "| NIC locality | NUMA node 1 |" in md
    assert "| irqbalance | not running | not running |" in md
    assert "| flow control (pause) | rx True, tx True |" in md
    assert "not recorded" in config_md(None)[0]


def test_devices_by_index_finds_the_nic_under_a_vlan(tmp_path):
    """A VLAN's packets come in on its lower device: the NIC and its locality are that one's."""
    import os
    from steer.trace.netdevs import devices_by_index
    root = str(tmp_path)
    eth = add_nic(root, "eth0", 1, list(range(12, 24)))
    vlan = add_nic(root, "eth0.100", None, None)
    veth = add_nic(root, "veth0", None, None)
    for path, idx in ((eth, 2), (vlan, 5), (veth, 7)):
        with open(f"{path}/ifindex", "w") as f:
            f.write(f"{idx}\n")
    os.symlink("../eth0", f"{vlan}/lower_eth0")
    got = devices_by_index(root, [2, 5, 7, 9])
    assert got["2"] == {"dev": "eth0", "nic": "eth0", "numa_node": 1, "local_cpus": list(range(12, 24)),
                        "rx_irqs": []}
    assert got["5"] == {"dev": "eth0.100", "nic": "eth0", "numa_node": 1,
                        "local_cpus": list(range(12, 24)), "rx_irqs": []}
    assert got["7"]["nic"] is None and got["7"]["locality"] == "none: a virtual device"
    assert "9" not in got


def test_flows_carry_their_device_and_nic_locality(tmp_path):
    from steer.model.flows import build_snapshot
    from steer.model.reports import attach_devices
    from steer.model.capabilities import MISSING, Capabilities, Figure
    from steer.model.samples import FlowCpuSample, FlowId, TraceSample
    xeon = read_topology(xeon_2s_smt(str(tmp_path)))
    a = FlowId("tcp", "198.18.0.1", 40000, "198.18.0.2", 5201)
    b = FlowId("tcp", "198.18.0.1", 40001, "198.18.0.2", 5201)
    s = 10**9
    e = [FlowCpuSample(a, 12, rx_bytes=10**9, rx_skbs=10, kernel_ns=s, rx_ifindex=2, rx_netns=99,
                       rx_queue=4, rx_napi_id=8195),
         FlowCpuSample(a, 0, app_ns=s, app_calls=3, app_bytes=10**9, app_pid=1, app_comm="r"),
         FlowCpuSample(b, 1, rx_bytes=10**6, rx_skbs=1, kernel_ns=s, app_ns=s, app_calls=1,
                       app_bytes=10**6)]
    after = TraceSample(2 * s, {(x.flow, x.cpu): x for x in e}, (), len(e), 1024)
    snap = build_snapshot(TraceSample(0, {}, (), 0, 1024), after, xeon,
                          Capabilities(*[Figure(MISSING, "")] * 4))
    asked = []

    def lookup(netns, ifindex):
        asked.append((netns, ifindex))
        return {"dev": "eth0", "netns": None, "nic": "eth0", "numa_node": 1, "local_cpus": None}
    flows = {f.flow: f for f in attach_devices(snap, xeon, lookup).flows}
    assert asked == [(99, 2)]                               # b came in nowhere the tracer saw
    j = flows[a].as_json()
    assert j["rx"] == {"ifindex": 2, "netns_inode": 99, "queue": 3, "napi_id": 8195, "poll_cpus": {}, "dev": "eth0",
                       "netns": None, "nic": "eth0", "numa_node": 1, "local_cpus": None}
    assert j["nic_local"] == {"kernel": True, "app": False}   # softirq on socket 1, reader on 0
    assert flows[b].as_json()["rx"] is None and flows[b].as_json()["nic_local"] is None


def test_receiver_tcp_counters_from_netstat():
    """TcpExt's header and value lines pair up by position; a name the kernel lacks counts 0"""
    from steer.experiment.hostconfig import RECEIVER_TCP, counter_delta, parse_netstat
    text = ("TcpExt: PruneCalled RcvPruned TCPOFOQueue TCPDSACKOldSent TCPDSACKOfoSent\n"
            "TcpExt: 1 2 30 4 5\n"
            "IpExt: InNoRoutes\nIpExt: 7\n")
    ext = parse_netstat(text)
    assert ext == {"PruneCalled": 1, "RcvPruned": 2, "TCPOFOQueue": 30, "TCPDSACKOldSent": 4,
                   "TCPDSACKOfoSent": 5}
    counts = {k: sum(ext.get(n, 0) for n in names) for k, names in RECEIVER_TCP.items()}
    assert counts["out_of_order"] == 30 and counts["duplicates"] == 9 and counts["pruned"] == 2
    assert counts["rcvq_drops"] == 0
    assert counter_delta({"a": 1}, {"a": 4}) == {"a": 3}
    assert counter_delta(None, {"a": 4}) is None


def test_receiver_tcp_reads_this_namespace():
    from steer.experiment.hostconfig import RECEIVER_TCP, receiver_tcp
    counts = receiver_tcp(None)
    assert counts is not None and set(counts) == set(RECEIVER_TCP)
    assert all(isinstance(v, int) and v >= 0 for v in counts.values())
    assert receiver_tcp("no-such-namespace-xyz") is None


def test_tcp_retransmits_from_snmp():
    """The Tcp table of /proc/net/snmp, not its TcpExt-like neighbours; this namespace's reads"""
    from steer.experiment.hostconfig import parse_netstat, tcp_retransmits
    text = ("Udp: InDatagrams RetransSegs\nUdp: 5 6\n"
            "Tcp: RtoAlgorithm OutSegs RetransSegs\nTcp: 1 100 7\n")
    assert parse_netstat(text, "Tcp") == {"RtoAlgorithm": 1, "OutSegs": 100, "RetransSegs": 7}
    assert parse_netstat(text) == {}
    n = tcp_retransmits(None)
    assert isinstance(n, int) and n >= 0
    assert tcp_retransmits("no-such-namespace-xyz") is None
