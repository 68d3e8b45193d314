"""CPU topology from sysfs: cores, SMT siblings, last-level-cache domains, sockets, NUMA nodes.

Every function takes the sysfs root so that tests run on fixture trees (tests/support/fixtures/).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from steer.model.units import parse_int

MAX_CPU = 8191   # CONFIG_NR_CPUS is at most 8192


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11] (the kernel's cpulist format)."""
    out: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        try:
            a, b = parse_int(lo), parse_int(hi if dash else lo)
        except ValueError:
            raise ValueError(f"not a CPU list: {text.strip()!r}") from None
        if a < 0 or b < a:
            raise ValueError(f"not a CPU list: {text.strip()!r}")
        if b > MAX_CPU:
            raise ValueError(f"CPU {b} is beyond any Linux kernel's (CPUs 0 to {MAX_CPU})")
        out.extend(range(a, b + 1))
    return sorted(set(out))


def format_cpulist(cpus) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    cpus = sorted(set(cpus))
    runs: list[str] = []
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        runs.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(runs)


@dataclass(frozen=True)
class Cpu:
    cpu: int
    online: bool
    core: int | None        # global core index (SMT siblings share it)
    socket: int | None      # physical_package_id
    llc: int | None         # global index of the last-level cache domain
    numa: int | None
    siblings: tuple[int, ...]   # SMT siblings, this CPU included
    llc_cpus: tuple[int, ...]   # every CPU sharing this CPU's last-level cache

    def as_dict(self) -> dict:
        return {"cpu": self.cpu, "core": self.core, "socket": self.socket, "llc": self.llc,
                "numa": self.numa, "siblings": list(self.siblings), "online": self.online}


@dataclass(frozen=True)
class Topology:
    cpus: dict[int, Cpu]
    llc_level: int | None

    @property
    def online(self) -> list[int]:
        return [c for c, v in sorted(self.cpus.items()) if v.online]

    @property
    def sockets(self) -> list[int]:
        return sorted({c.socket for c in self.cpus.values() if c.socket is not None})

    def cpu(self, n: int) -> Cpu:
        try:
            return self.cpus[n]
        except KeyError:
            raise ValueError(f"CPU {n} does not exist (this host has CPUs "
                             f"{format_cpulist(self.cpus)})") from None

    def check_online(self, n: int) -> Cpu:
        c = self.cpu(n)
        if not c.online:
            raise ValueError(f"CPU {n} is offline (online: {format_cpulist(self.online)})")
        return c

    def as_dict(self) -> dict:
        return {"llc_level": self.llc_level,
                "cpus": [c.as_dict() for _, c in sorted(self.cpus.items())]}


def read_text(path: str) -> str | None:
    """A sysfs or procfs file's content, stripped, or None where it cannot be read."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def read_int(path: str) -> int | None:
    """The integer a sysfs or procfs file holds, or None where it is missing or not a number."""
    v = read_text(path)
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def _llc_of(cpu_dir: str) -> tuple[int | None, tuple[int, ...], str | None]:
    """(level, CPUs sharing it, identity) of the highest data/unified cache level of one CPU."""
    cache_dir = os.path.join(cpu_dir, "cache")
    best: tuple[int, tuple[int, ...], str] | None = None
    try:
        names = sorted(n for n in os.listdir(cache_dir) if n.startswith("index"))
    except OSError:
        return None, (), None
    for name in names:
        d = os.path.join(cache_dir, name)
        level = read_int(os.path.join(d, "level"))
        if level is None or read_text(os.path.join(d, "type")) == "Instruction":
            continue
        shared = read_text(os.path.join(d, "shared_cpu_list"))
        if shared is None:
            continue
        if best is None or level > best[0]:
            cpus = tuple(parse_cpulist(shared))
            # the cache id is unique per level when present (4.15+); the sharing set identifies
            # the domain everywhere
            ident = f"L{level}:{read_text(os.path.join(d, 'id')) or ''}:{shared}"
            best = (level, cpus, ident)
    return best if best else (None, (), None)


def _numa_nodes(root: str) -> dict[int, int]:
    node_dir = os.path.join(root, "devices/system/node")
    out: dict[int, int] = {}
    try:
        names = os.listdir(node_dir)
    except OSError:
        return out
    for name in names:
        if name.startswith("node") and name[4:].isdigit():
            cpus = read_text(os.path.join(node_dir, name, "cpulist"))
            for c in parse_cpulist(cpus or ""):
                out[c] = int(name[4:])
    return out


def online_cpus(root: str = "/sys") -> list[int]:
    """The CPUs online now: one small sysfs read, for loops that must notice hotplug."""
    cpu_root = os.path.join(root, "devices/system/cpu")
    text = read_text(os.path.join(cpu_root, "online")) or read_text(os.path.join(cpu_root, "possible"))
    if text is None:
        raise FileNotFoundError(f"no CPU topology under {cpu_root}")
    return parse_cpulist(text)


def read_topology(root: str = "/sys") -> Topology:
    """Read the CPU topology under ROOT (normally /sys)."""
    cpu_root = os.path.join(root, "devices/system/cpu")
    possible = read_text(os.path.join(cpu_root, "possible")) or read_text(os.path.join(cpu_root, "present"))
    if possible is None:
        raise FileNotFoundError(f"no CPU topology under {cpu_root}")
    all_cpus = parse_cpulist(possible)
    online = set(parse_cpulist(read_text(os.path.join(cpu_root, "online")) or possible))
    numa = _numa_nodes(root)

    raw = {}
    for n in all_cpus:
        d = os.path.join(cpu_root, f"cpu{n}")
        if not os.path.isdir(d):
            continue   # possible but not present (hot-pluggable slot)
        t = os.path.join(d, "topology")
        sib = read_text(os.path.join(t, "thread_siblings_list")) or read_text(os.path.join(t, "core_cpus_list"))
        level, llc_cpus, llc_ident = _llc_of(d)
        raw[n] = dict(socket=read_int(os.path.join(t, "physical_package_id")),
                      core_id=read_int(os.path.join(t, "core_id")),
                      die=read_int(os.path.join(t, "die_id")) or 0,
                      siblings=tuple(parse_cpulist(sib)) if sib else (n,),
                      level=level, llc_cpus=llc_cpus, llc_ident=llc_ident)

    # global indices in order of the lowest CPU, as lscpu numbers cores
    core_index: dict[tuple, int] = {}
    llc_index: dict[str, int] = {}
    levels = {r["level"] for r in raw.values() if r["level"] is not None}
    cpus: dict[int, Cpu] = {}
    for n in sorted(raw):
        r = raw[n]
        core = None
        if r["socket"] is not None and r["core_id"] is not None:
            core = core_index.setdefault((r["socket"], r["die"], r["core_id"]), len(core_index))
        llc = None
        if r["llc_ident"] is not None:
            llc = llc_index.setdefault(r["llc_ident"], len(llc_index))
        cpus[n] = Cpu(cpu=n, online=n in online, core=core, socket=r["socket"], llc=llc,
                      numa=numa.get(n), siblings=r["siblings"], llc_cpus=r["llc_cpus"])
    return Topology(cpus, max(levels) if levels else None)


def nic_sockets(topo: Topology, numa_node: int | None, local_cpus) -> tuple[int, ...] | None:
    """The sockets a NIC is attached to: those of its NUMA node's CPUs, else those of its local
    CPUs when they are not every CPU; None where it has no place (a virtual device, or a NIC
    without NUMA information on a multi-socket host: it looks local to every CPU)."""
    if numa_node is not None:
        socks = {c.socket for c in topo.cpus.values() if c.numa == numa_node and c.socket is not None}
        if socks:
            return tuple(sorted(socks))
    if not local_cpus:
        return None
    socks = {topo.cpus[c].socket for c in local_cpus if c in topo.cpus and topo.cpus[c].socket is not None}
    if not socks or (len(topo.sockets) > 1 and socks == set(topo.sockets)):
        return None   # local to every socket of a multi-socket host: it says nothing
    return tuple(sorted(socks))


def nic_local(topo: Topology, sockets: tuple[int, ...] | None, cpu: int | None) -> bool | None:
    """Whether CPU sits on a socket the NIC is attached to; None where either is unknown."""
    if sockets is None or cpu is None or cpu not in topo.cpus or topo.cpus[cpu].socket is None:
        return None
    return topo.cpus[cpu].socket in sockets


def device_dir_with(sysfs: str, dev: str, name: str) -> str | None:
    """The directory, of network device DEV's device/ or of its parent, that has NAME: a virtio
    NIC's device/ is the virtio device, which sits under the PCI function that has the NUMA
    node and the MSI vectors. None: neither has it, or DEV has no device/ (a virtual device)."""
    link = os.path.join(sysfs, "class/net", dev, "device")
    if not os.path.exists(link):
        return None
    here = os.path.realpath(link)
    for d in (here, os.path.dirname(here)):
        if os.path.exists(os.path.join(d, name)):
            return d
    return None


def nic_place(sysfs: str, dev: str) -> dict | None:
    """Where network device DEV (under SYSFS/class/net) sits: {"numa_node", "local_cpus"} from its
    device/, or the parent of a virtio device/ (a NUMA node of -1 is none); None for a virtual
    device, which has no device/."""
    base = os.path.join(sysfs, "class/net", dev, "device")
    if not os.path.exists(base):
        return None
    base = device_dir_with(sysfs, dev, "numa_node") or base
    numa = read_int(os.path.join(base, "numa_node"))
    local = read_text(os.path.join(base, "local_cpulist"))
    return {"numa_node": numa if numa is not None and numa >= 0 else None,
            "local_cpus": parse_cpulist(local) if local else None}
