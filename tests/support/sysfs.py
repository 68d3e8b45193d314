"""Builders of sysfs CPU trees, laid out as the kernel lays them out, for topology tests.

Each builder names a real machine shape and numbers its CPUs the way Linux does on it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from steer.model.topology import format_cpulist


@dataclass
class FakeCpu:
    cpu: int
    socket: int
    core_id: int
    siblings: list[int]
    l2: list[int]
    l3: list[int]
    l3_id: int
    node: int
    online: bool = True


def write_tree(root: str, cpus: list[FakeCpu]) -> str:
    base = os.path.join(root, "devices/system/cpu")
    os.makedirs(base, exist_ok=True)
    allc = [c.cpu for c in cpus]
    online = [c.cpu for c in cpus if c.online]

    def put(path, text):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(f"{text}\n")

    put(f"{base}/possible", format_cpulist(allc))
    put(f"{base}/present", format_cpulist(allc))
    put(f"{base}/online", format_cpulist(online))
    put(f"{base}/offline", format_cpulist(set(allc) - set(online)))
    nodes: dict[int, list[int]] = {}
    for c in cpus:
        d = f"{base}/cpu{c.cpu}"
        os.makedirs(d, exist_ok=True)
        nodes.setdefault(c.node, []).append(c.cpu)
        if c.cpu != 0:
            put(f"{d}/online", "1" if c.online else "0")
        if not c.online:
            continue   # the kernel removes topology/ and cache/ of an offline CPU
        t = f"{d}/topology"
        put(f"{t}/physical_package_id", c.socket)
        put(f"{t}/core_id", c.core_id)
        put(f"{t}/die_id", 0)
        put(f"{t}/thread_siblings_list", format_cpulist(c.siblings))
        put(f"{t}/core_cpus_list", format_cpulist(c.siblings))
        for i, (level, kind, shared, cid) in enumerate([
                (1, "Data", c.siblings, c.core_id), (1, "Instruction", c.siblings, c.core_id),
                (2, "Unified", c.l2, c.core_id), (3, "Unified", c.l3, c.l3_id)]):
            ci = f"{d}/cache/index{i}"
            put(f"{ci}/level", level)
            put(f"{ci}/type", kind)
            put(f"{ci}/shared_cpu_list", format_cpulist(shared))
            put(f"{ci}/id", cid)
    for n, members in nodes.items():
        put(f"{root}/devices/system/node/node{n}/cpulist", format_cpulist(members))
    return root


def xeon_2s_smt(root: str, offline: tuple[int, ...] = ()) -> str:
    """Dual-socket Xeon, 12 cores a socket, 2 threads a core: CPUs 0-11 socket 0, 12-23 socket 1,
    24-47 their SMT siblings (cpu N and N+24 share a core); core ids have gaps as on Xeons."""
    core_ids = [0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13]
    cpus = []
    for n in range(48):
        first = n % 24
        sock = first // 12
        sib = [first, first + 24]
        l3 = [c for c in range(48) if (c % 24) // 12 == sock]
        cpus.append(FakeCpu(n, sock, core_ids[first % 12], sib, sib, l3, sock, sock,
                            online=n not in offline))
    return write_tree(root, cpus)


def sandy_bridge_2s_6c(root: str) -> str:
    """The NDM'13 machine: two 6-core sockets, no SMT, CPUs interleaved (even socket 0, odd 1)."""
    cpus = []
    for n in range(12):
        sock = n % 2
        l3 = [c for c in range(12) if c % 2 == sock]
        cpus.append(FakeCpu(n, sock, n // 2, [n], [n], l3, sock, sock))
    return write_tree(root, cpus)


def epyc_chiplet(root: str) -> str:
    """One socket of 16 cores in 4 CCXs (an L3 each), SMT: CPUs 0-15, siblings 16-31."""
    cpus = []
    for n in range(32):
        first = n % 16
        ccx = first // 4
        sib = [first, first + 16]
        l3 = [c for c in range(32) if (c % 16) // 4 == ccx]
        cpus.append(FakeCpu(n, 0, first, sib, sib, l3, ccx, 0))
    return write_tree(root, cpus)


def add_nic(root: str, name: str, numa_node: int | None, local_cpus: list[int] | None,
            rx_queues: int = 2, mtu: int = 9000, rps: dict[int, str] | None = None) -> str:
    """A network device under class/net: a PCI NIC has device/numa_node (-1 without NUMA
    information) and device/local_cpulist; LOCAL_CPUS None makes a virtual device (no device/)."""
    base = os.path.join(root, "class/net", name)

    def put(path, text):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(f"{text}\n")

    put(f"{base}/mtu", mtu)
    if local_cpus is not None:
        put(f"{base}/device/numa_node", -1 if numa_node is None else numa_node)
        put(f"{base}/device/local_cpulist", format_cpulist(local_cpus))
    for q in range(rx_queues):
        put(f"{base}/queues/rx-{q}/rps_cpus", (rps or {}).get(q, "00000000,00000000"))
        put(f"{base}/queues/rx-{q}/rps_flow_cnt", 0)
    return base


def epyc_2s(root: str, cores: int = 48, ccx_cores: int = 8) -> str:
    """Two sockets of CORES cores in CCXs of CCX_CORES (an L3 each), SMT: CPUs 0..2*CORES-1 the
    first threads (socket 0, then 1), their siblings after, as Linux numbers an EPYC: 48 cores
    give 192 CPUs, 64 give 256."""
    n_first = 2 * cores
    cpus = []
    for n in range(2 * n_first):
        first = n % n_first
        sock, core = first // cores, first % cores
        sib = [first, first + n_first]
        ccx = sock * (cores // ccx_cores) + core // ccx_cores
        l3 = [c for c in range(2 * n_first)
              if (c % n_first) // cores == sock and (c % n_first) % cores // ccx_cores == core // ccx_cores]
        cpus.append(FakeCpu(n, sock, core, sib, sib, l3, ccx, sock))
    return write_tree(root, cpus)
