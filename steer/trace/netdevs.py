"""Network devices by (network namespace inode, ifindex), the way the tracer records where a
flow's packets come in: the device's name, its namespace's name, and the NIC under it (the device
itself, or the lower device of a VLAN, macvlan or bond) with the NIC's NUMA node and local CPUs.

A namespace is found by its inode among this process's, the named ones (/run/netns) and those of
running processes (a container's); its devices are read from a sysfs mounted inside it.
"""
from __future__ import annotations

import os
import time

from steer.model.irqs import device_irqs, irq_cpus, rx_irqs
from steer.kernel.errors import KernelError
from steer.kernel.namespaces import call_with_netns_sysfs
from steer.model.topology import nic_place, read_text

NETNS_DIR = "/run/netns"
CACHE_SECONDS = 30.0   # a device renamed or recreated shows within this
# Bounds, as on the other per-flow state: a host whose containers come and go leaves a device
# behind in each namespace, and each new one is looked up by a thread that enters its namespace.
MAX_DEVICES = 4096          # described devices kept; past it, those past CACHE_SECONDS go, then
                            # the older half
NEW_PER_SECOND = 32         # new devices looked up a second at most (a burst of as many); the
                            # others are said not looked up yet, and are at the next call


def _inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def find_netns(inode: int) -> tuple[str | None, str | None] | None:
    """(path to enter, name to show) of the namespace with INODE; (None, None) is this process's
    own; None: no such namespace (gone, or only a socket holds it)."""
    if _inode("/proc/self/ns/net") == inode:
        return None, None
    try:
        names = sorted(os.listdir(NETNS_DIR))
    except OSError:
        names = []
    for name in names:
        path = os.path.join(NETNS_DIR, name)
        if _inode(path) == inode:
            return path, name
    want = f"net:[{inode}]"
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.readlink(f"/proc/{pid}/ns/net") == want:
                    return f"/proc/{pid}/ns/net", f"pid {pid}"
            except OSError:
                continue
    return None


def _nic_under(sysfs: str, name: str, depth: int = 0) -> dict | None:
    """The physical device at or below NAME (lower_* links), with its NUMA node and local CPUs."""
    place = nic_place(sysfs, name)
    if place is not None:
        return {"nic": name, **place}
    base = os.path.join(sysfs, "class/net", name)
    if depth >= 4:
        return None
    try:
        lowers = sorted(n[len("lower_"):] for n in os.listdir(base) if n.startswith("lower_"))
    except OSError:
        return None
    for lower in lowers:
        found = _nic_under(sysfs, lower, depth + 1)
        if found:
            return found
    return None


def devices_by_index(sysfs: str, indexes: list[int]) -> dict[str, dict]:
    """{ifindex: {"dev", "nic", "numa_node", "local_cpus", "rx_irqs"}} of the devices of the
    namespace whose sysfs is at SYSFS (JSON keys: call_with_netns_sysfs returns it as JSON
    gives it); rx_irqs: the NIC's receive IRQs, [{"queue", "irq"}] (a queue of None: the IRQ's
    name does not tell)."""
    want = set(indexes)
    out: dict[str, dict] = {}
    root = os.path.join(sysfs, "class/net")
    for name in sorted(os.listdir(root)):
        idx = read_text(os.path.join(root, name, "ifindex"))
        if idx and idx.isdigit() and int(idx) in want:
            nic = _nic_under(sysfs, name)
            out[idx] = {"dev": name, **(nic or {"nic": None, "numa_node": None, "local_cpus": None,
                                                "locality": "none: a virtual device"})}
            if nic:
                out[idx]["rx_irqs"] = [{"queue": i.queue, "irq": i.irq}
                                       for i in rx_irqs(device_irqs(nic["nic"], sysfs))]
    return out


class DeviceResolver:
    """lookup(netns inode, ifindex) -> the device's description, cached for CACHE_SECONDS but
    for where its receive IRQs may run ("irq_cpus": {irq: CPUs}), read anew each time: `steer
    irq` or irqbalance moves them at any moment."""

    def __init__(self, cache_seconds: float = CACHE_SECONDS, clock=time.monotonic):
        self.cache_seconds = cache_seconds
        self._clock = clock
        self._cache: dict[tuple[int, int], tuple[float, dict]] = {}
        self._budget, self._budget_at = float(NEW_PER_SECOND), clock()

    def __call__(self, netns: int, ifindex: int) -> dict:
        now = self._clock()
        hit = self._cache.get((netns, ifindex))
        if not hit or now - hit[0] >= self.cache_seconds:
            if not self._may_look_up(now):
                return {"dev": None, "error": f"not looked up yet: more than {NEW_PER_SECOND} "
                                              "devices a second to look up"}
            if (netns, ifindex) not in self._cache and len(self._cache) >= MAX_DEVICES:
                self._make_room(now)
            hit = self._cache[(netns, ifindex)] = (now, self._resolve(netns, ifindex))
        info = hit[1]
        if info.get("rx_irqs"):
            info = {**info, "irq_cpus": {str(i["irq"]): irq_cpus(i["irq"])
                                         for i in info["rx_irqs"]}}
        return info

    def _may_look_up(self, now: float) -> bool:
        self._budget = min(float(NEW_PER_SECOND),
                           self._budget + (now - self._budget_at) * NEW_PER_SECOND)
        self._budget_at = now
        if self._budget < 1:
            return False
        self._budget -= 1
        return True

    def _make_room(self, now: float) -> None:
        self._cache = {k: v for k, v in self._cache.items() if now - v[0] < self.cache_seconds}
        if len(self._cache) >= MAX_DEVICES:
            newest = sorted(self._cache.items(), key=lambda kv: kv[1][0])[len(self._cache) // 2:]
            self._cache = dict(newest)

    @staticmethod
    def _resolve(netns: int, ifindex: int) -> dict:
        where = find_netns(netns)
        if where is None:
            return {"dev": None, "error": f"network namespace {netns} not found (gone, or held "
                                          "only by a socket)"}
        path, name = where
        try:
            found = call_with_netns_sysfs(path, devices_by_index, [ifindex]).get(str(ifindex))
        except KernelError as e:
            return {"dev": None, "netns": name, "error": str(e)}
        if found is None:
            return {"dev": None, "netns": name, "error": f"no device {ifindex} (removed)"}
        return {"netns": name, **found}
