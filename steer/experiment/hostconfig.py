"""The host's receive-side configuration, as the papers recorded theirs before measuring (NDM'13
and its follow-up: irqbalance off, RPS and RFS off, MTU 9000, Ethernet flow control on,
hyper-threading off, Cubic): read, never changed, into results.json `host.config`, so that two
sweeps can be compared knowing what differed (the settings a sweep varies: devsettings).

Values that cannot be read say why instead ("unsupported: ..." where the driver has no such
setting, as veth has no pause frames). The device's part is read inside its network namespace
(sysfs, /proc/sys/net and ethtool all show the namespace of whoever reads them).
"""
from __future__ import annotations

import json
import os
import re

from steer.experiment.devsettings import OFFLOADS
from steer.experiment.ethtool import ethtool, parse_ethtool_sections
from steer.model.irqs import device_irqs
from steer.model.topology import nic_place, read_int, read_text

# what the papers set up before measuring, for the report to put beside what this host has
PAPERS_PRECONDITIONS = {
    "irqbalance": "not running", "rps": "off", "rfs": "off", "mtu": 9000,
    "pause": "rx and tx on", "smt": "off", "congestion_control": "cubic",
}


def mask_to_cpus(mask: str) -> list[int]:
    """A sysfs cpumask ('00000000,0000000f') -> [0, 1, 2, 3]."""
    bits = int(mask.replace(",", "") or "0", 16)
    return [i for i in range(bits.bit_length()) if bits >> i & 1]


def device_config(sysfs: str, dev: str) -> dict:
    """DEV's settings, read in its network namespace with its sysfs at SYSFS; JSON-serialisable
    (it crosses a process boundary when the device is in another namespace)."""
    base = os.path.join(sysfs, "class/net", dev)
    if not os.path.isdir(base):
        raise ValueError(f"no interface {dev!r}")
    cfg: dict = {"name": dev}
    cfg["mtu"] = read_int(os.path.join(base, "mtu"))

    # the NIC's place: a PCI device has a NUMA node and the CPUs local to it; a virtual device
    # (veth, a bridge) has neither
    place = nic_place(sysfs, dev)
    cfg.update(place or {"numa_node": None, "local_cpus": None, "locality": "none: a virtual device"})

    queues = os.path.join(base, "queues")
    try:
        rx = sorted((q for q in os.listdir(queues) if q.startswith("rx-")), key=lambda q: int(q[3:]))
    except OSError:
        rx = []
    rps = {q: mask_to_cpus(read_text(os.path.join(queues, q, "rps_cpus")) or "0") for q in rx}
    flow_cnt = {q: read_int(os.path.join(queues, q, "rps_flow_cnt")) or 0 for q in rx}
    cfg["rx_queues"] = len(rx)
    cfg["rps"] = {"state": "on" if any(rps.values()) else "off", "cpus": rps}
    # RFS needs the host-wide socket table too (host_config adds it: only the initial namespace
    # has net.core.rps_sock_flow_entries)
    cfg["rfs"] = {"flow_cnt": flow_cnt}
    # threaded NAPI: polls run in kthreads the scheduler places, not where the IRQ landed
    cfg["threaded_napi"] = read_int(os.path.join(base, "threaded")) == 1
    cfg["irqs"] = [i.as_dict() for i in device_irqs(dev, sysfs)]
    cc = read_text("/proc/sys/net/ipv4/tcp_congestion_control")
    cfg["congestion_control"] = cc

    out, why = ethtool(["--json", "-k", dev])
    if out is not None:
        features = json.loads(out)[0]
        cfg["offloads"] = {short: ("on" if features.get(name, {}).get("active") else "off")
                           + (" [fixed]" if features.get(name, {}).get("fixed") else "")
                           for short, name in OFFLOADS.items()}
    else:
        cfg["offloads"] = why
    out, why = ethtool(["--json", "--include-statistics", "-a", dev])
    if out is not None and json.loads(out):
        cfg["pause"] = json.loads(out)[0]
    else:
        cfg["pause"] = why or "unsupported by the driver"
    for key, opt in (("rings", "-g"), ("channels", "-l"), ("coalescing", "-c")):
        out, why = ethtool([opt, dev])
        cfg[key] = parse_ethtool_sections(out) if out is not None else why
    return cfg


def irq_method_problems(config: dict) -> list[str]:
    """Why moving DEV's receive IRQs would not move its flows' receive processing, from a
    host_config() with a device: each reason a sentence with its remedy ([]: none)."""
    dev = config.get("device") or {}
    name = dev.get("name", "the device")
    out = []
    if dev.get("error"):
        return [dev["error"]]
    if not any(i["rx"] for i in dev.get("irqs", [])):
        out.append(f"{name} has no receive IRQs of its own (a virtual device?): use --method xdp")
    if str(config.get("irqbalance", "")).startswith("running"):
        out.append(f"irqbalance is {config['irqbalance']} and would move the IRQs back during "
                   "the sweep: stop it first (systemctl stop irqbalance), as the papers did")
    if (dev.get("rps") or {}).get("state") == "on":
        out.append(f"RPS is on for {name}: receive processing would go to the RPS CPUs, not the "
                   f"IRQ's; turn it off first (echo 0 into /sys/class/net/{name}/queues/rx-*/"
                   "rps_cpus)")
    if dev.get("threaded_napi"):
        out.append(f"threaded NAPI is on for {name}: its kthreads, not the IRQ, decide where "
                   f"receive runs; turn it off first (echo 0 > /sys/class/net/{name}/threaded)")
    return out


def _irqbalance(proc: str) -> str:
    for pid in os.listdir(proc):
        if pid.isdigit() and read_text(os.path.join(proc, pid, "comm")) == "irqbalance":
            return f"running (pid {pid})"
    return "not running"


def _smt(sysfs: str) -> dict:
    base = os.path.join(sysfs, "devices/system/cpu/smt")
    return {"control": read_text(os.path.join(base, "control")) or "unavailable: no smt/ in sysfs",
            "active": read_text(os.path.join(base, "active")) == "1"}


def _governor(sysfs: str) -> str:
    base = os.path.join(sysfs, "devices/system/cpu")
    found = set()
    for name in os.listdir(base):
        if re.fullmatch(r"cpu\d+", name):
            g = read_text(os.path.join(base, name, "cpufreq/scaling_governor"))
            if g:
                found.add(g)
    if not found:
        return "unavailable: no cpufreq (a VM, or frequency is the firmware's)"
    return ",".join(sorted(found))


def host_config(dev: str | None, netns: str | None, sysfs: str = "/sys", proc: str = "/proc") -> dict:
    """The host's part (SMT, governor, irqbalance) and DEV's part (in NETNS, a name under
    /run/netns or a path; None: this namespace)."""
    cfg: dict = {"smt": _smt(sysfs), "governor": _governor(sysfs), "irqbalance": _irqbalance(proc)}
    if dev:
        from steer.kernel.errors import KernelError
        from steer.kernel.namespaces import call_with_netns_sysfs
        from steer.steering.xdp import SteerError, netns_path
        try:
            d = call_with_netns_sysfs(netns_path(netns), device_config, dev)
        except (KernelError, SteerError, ValueError) as e:
            cfg["device"] = {"name": dev, "netns": netns, "error": str(e)}
            return cfg
        d["netns"] = netns
        entries = read_int(os.path.join(proc, "sys/net/core/rps_sock_flow_entries"))
        d["rfs"] = {"state": "on" if entries and any(d["rfs"]["flow_cnt"].values()) else "off",
                    "sock_flow_entries": entries, **d["rfs"]}
        cfg["device"] = d
    return cfg


# What a receiver's TCP counts of trouble with what arrives (TcpExt, per network namespace): the
# sender's retransmits as the receiver sees them (a segment that fills a hole left by a loss comes
# after out-of-order ones; a duplicate is answered with a D-SACK), and what it threw away or
# squeezed because the reader did not keep up (NDM'13: a starved same-core reader drops).
RECEIVER_TCP = {
    "out_of_order": ("TCPOFOQueue",), "duplicates": ("TCPDSACKOldSent", "TCPDSACKOfoSent"),
    "ofo_drops": ("TCPOFODrop",), "rcvq_drops": ("TCPRcvQDrop",),
    "backlog_drops": ("TCPBacklogDrop",), "zero_window_drops": ("TCPZeroWindowDrop",),
    "pruned": ("RcvPruned",), "collapsed": ("TCPRcvCollapsed",),
}


def parse_netstat(text: str, table: str = "TcpExt") -> dict[str, int]:
    """TABLE's name -> value from a /proc/net/netstat or /proc/net/snmp (pairs of header and value
    lines, each opening with the table's name)."""
    out: dict[str, int] = {}
    lines = text.splitlines()
    for head, vals in zip(lines[::2], lines[1::2]):
        names, values = head.split(), vals.split()
        if names and names[0] == f"{table}:" and values and values[0] == f"{table}:":
            out.update(zip(names[1:], map(int, values[1:])))
    return out


def _netns_table(netns: str | None, name: str, table: str) -> dict[str, int] | None:
    """TABLE of /proc/net/NAME in network namespace NETNS (a name under /run/netns or a path;
    None: this one), or None where it cannot be read."""
    from steer.kernel.errors import KernelError
    from steer.kernel.namespaces import netns_of
    from steer.steering.xdp import SteerError, netns_path
    try:
        with netns_of(netns_path(netns)):
            # thread-self: /proc/net follows the process's first thread, not this one
            with open(f"/proc/thread-self/net/{name}") as f:
                return parse_netstat(f.read(), table)
    except (OSError, ValueError, KernelError, SteerError):
        return None


def receiver_tcp(netns: str | None) -> dict[str, int] | None:
    """RECEIVER_TCP's counters in network namespace NETNS, or None where they cannot be read; a
    name this kernel lacks counts 0."""
    ext = _netns_table(netns, "netstat", "TcpExt")
    if ext is None:
        return None
    return {k: sum(ext.get(n, 0) for n in names) for k, names in RECEIVER_TCP.items()}


def tcp_retransmits(netns: str | None) -> int | None:
    """The segments TCP sent again in network namespace NETNS since it was made (Tcp RetransSegs:
    every socket's, timeouts, fast retransmits and tail loss probes alike), or None where it
    cannot be read."""
    tcp = _netns_table(netns, "snmp", "Tcp")
    return None if tcp is None or "RetransSegs" not in tcp else tcp["RetransSegs"]


def counter_delta(before: dict | None, after: dict | None) -> dict | None:
    if before is None or after is None:
        return None
    return {k: after[k] - before.get(k, 0) for k in after}
