"""Ways to move a flow's receive work to a CPU, what each moves and what it costs:

    cpumap  an XDP rule per flow (steer.steering.xdp): the matching flows alone. An XDP program
            runs on every packet of the device, and the target's cpumap kthread takes the flow's
            packets up the stack (with generic XDP the arrival CPU has built, and linearised,
            each skb first).
    irq     the RX queue's IRQ (smp_affinity_list): the driver's NAPI poll, and with it the
            softirq of every flow of that queue, runs where the IRQ fires. Nothing per packet.
    napi    the queue's NAPI polled by a kthread of its own, pinned to the CPU (threaded NAPI):
            every flow of the queue, nothing per packet, a kthread switch per poll. Per NAPI from
            Linux 6.17; before that, threading is the whole device's.
    rps     the RX queue's rps_cpus: every flow of the queue goes up the stack from the target's
            backlog; the CPU that took the packets in still runs the driver (and GRO), and wakes
            the target with an IPI per batch.

A device's description (describe()) is read in its network namespace: its RX queues, RPS, its
receive IRQs and the queue each serves, its NAPI instances and the queue each polls (the netdev
netlink family, Linux 6.8+), and whether its NAPIs are threaded. What a method can do there is
decided from that description alone (methods()), so that it is tested on descriptions of devices
this host does not have."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

METHODS = ("cpumap", "irq", "napi", "rps")
# the per-queue methods in the order `--method auto` prefers them: the IRQ adds no context, the
# NAPI kthread a switch per poll, RPS an IPI per batch and the arrival CPU's part stays behind
QUEUE_METHODS = ("irq", "napi", "rps")


@dataclass(frozen=True)
class Method:
    name: str
    works: bool
    moves: str       # what it moves: the matching flows, or every flow of a queue
    why: str         # how it works here, or why it cannot

    def as_dict(self) -> dict:
        return {"method": self.name, "works": self.works, "moves": self.moves, "why": self.why}


def methods(desc: dict, steering: str) -> dict[str, Method]:
    """What each method can do on the device DESC (describe()), given the XDP steering's status
    (STEERING: steer check's line, "available ..." or "unavailable: why")."""
    dev = desc["dev"]
    queue_of = "every flow of the flow's RX queue"
    out = {"cpumap": Method("cpumap", steering.startswith("available"), "the matching flows alone",
                            "an XDP program on every packet of the device and a cpumap kthread "
                            "on the target" if steering.startswith("available") else steering)}
    rx_irqs = [i for i in desc["irqs"] if i["rx"]]
    queued = sorted({i["queue"] for i in rx_irqs if i["queue"] is not None})
    if not desc["irqs"]:
        out["irq"] = Method("irq", False, queue_of, f"{dev} has no IRQs of its own "
                            "(a virtual device): its packets arrive on the sender's CPU")
    elif not rx_irqs:
        out["irq"] = Method("irq", False, queue_of, f"none of {dev}'s IRQs serves receive")
    elif desc["threaded"]:
        out["irq"] = Method("irq", False, queue_of, f"{dev}'s NAPIs are threaded: the IRQ only "
                            "wakes their kthreads, which run where the scheduler puts them "
                            "(use napi, or echo 0 > /sys/class/net/" + dev + "/threaded)")
    elif len(rx_irqs) == 1 or queued:
        per = f"one per RX queue ({len(queued)} of {len(desc['rx_queues'])} queues named)" \
            if queued else "one IRQ for the device"
        out["irq"] = Method("irq", True, queue_of if queued else "every flow of the device",
                            f"the receive IRQ's smp_affinity_list: {per}")
    else:
        out["irq"] = Method("irq", False, queue_of, f"{dev} has {len(rx_irqs)} receive IRQs "
                            "whose names do not say which queue each serves")
    napis = desc["napis"]
    if napis is None and desc["threaded"] is None:
        out["napi"] = Method("napi", False, queue_of, f"{dev} cannot thread its NAPI "
                             f"(no /sys/class/net/{dev}/threaded): Linux 5.12+")
    elif napis is not None and not napis:
        why = (f"{dev} has no NAPI instance: a veth polls only with GRO on (ethtool -K {dev} gro "
               "on) or an XDP program attached, and then only the skbs it can aggregate"
               if desc.get("kind") == "veth" else f"{dev} reports no NAPI instance")
        out["napi"] = Method("napi", False, queue_of, why)
    else:
        per_napi = napis is not None and any(n["threaded"] is not None for n in napis.values())
        how = "each NAPI threaded on its own (netdev netlink)" if per_napi else \
            f"threading is {dev}'s as a whole (/sys/class/net/{dev}/threaded): every queue's " \
            "NAPI gets a kthread of its own"
        mapped = napis is not None and any(q is not None for q in desc["rx_queues"].values())
        out["napi"] = Method("napi", True, queue_of, how + ("; each queue's NAPI from netdev "
                             "netlink" if mapped else "; a queue's NAPI from its traffic"))
    if desc["rps"]:
        out["rps"] = Method("rps", True, queue_of, "the RX queue's rps_cpus: an IPI per batch "
                            "from the arrival CPU, which still runs the driver and GRO")
    else:
        out["rps"] = Method("rps", False, queue_of, f"{dev} has no rps_cpus (a kernel without "
                            "CONFIG_RPS)")
    return out


def choose(available: dict[str, Method], alone: bool) -> str:
    """The method `--method auto` takes: a per-queue one (the cheapest that works) where the
    flows to move are ALONE on their queue, else cpumap."""
    if alone:
        for name in QUEUE_METHODS:
            if available[name].works:
                return name
    return "cpumap"


def describe(dev: str, netns: str | None) -> dict:
    """DEV's queues, RPS, receive IRQs, NAPIs and threading, read in its namespace NETNS."""
    from steer.steering.affinity import with_sysfs_of
    from steer.steering.xdp import device_info, netns_path
    _, kind = device_info(dev, netns_path(netns))
    desc = with_sysfs_of(netns, _describe, dev)
    desc["rx_queues"] = {int(q): n for q, n in desc["rx_queues"].items()}
    if desc["napis"] is not None:
        desc["napis"] = {int(i): n for i, n in desc["napis"].items()}
    return dict(desc, dev=dev, netns=netns, kind=kind)


def _describe(sysfs: str, dev: str) -> dict:
    from steer.kernel import netdev
    from steer.model.irqs import device_irqs
    base = os.path.join(sysfs, "class/net", dev)
    with open(os.path.join(base, "ifindex")) as f:
        ifindex = int(f.read())
    qdir = os.path.join(base, "queues")
    rx = sorted(int(q[3:]) for q in os.listdir(qdir) if q.startswith("rx-") and q[3:].isdigit())
    rps = all(os.path.exists(os.path.join(qdir, f"rx-{q}", "rps_cpus")) for q in rx) and bool(rx)
    try:
        with open(os.path.join(base, "threaded")) as f:
            threaded = f.read().strip() not in ("0", "")
    except OSError:
        threaded = None
    try:
        queues, napis = netdev.rx_queues_and_napis(ifindex)
        napi_dicts = {i: n.as_dict() for i, n in napis.items()}
    except netdev.NoFamily:
        queues, napi_dicts = {}, None
    return {"ifindex": ifindex, "rx_queues": {q: queues.get(q) for q in rx}, "rps": rps,
            "threaded": threaded, "irqs": [i.as_dict() for i in device_irqs(dev, sysfs)],
            "napis": napi_dicts}


@dataclass
class QueueMove:
    method: str
    dev: str
    queue: int
    cpu: int
    said: str        # what was moved, and from where, one line
    undo: Callable[[], None] = field(repr=False, default=lambda: None)   # back as it was found

    def as_dict(self) -> dict:
        return {"method": self.method, "dev": self.dev, "queue": self.queue, "cpu": self.cpu,
                "said": self.said}


def move_queue(method: str, desc: dict, queue: int, cpu: int,
               napi_id: int | None = None) -> QueueMove:
    """Move RX QUEUE of the device DESC to CPU by METHOD (irq, napi or rps); what it changed is
    kept for `steer reset`. NAPI_ID: the queue's NAPI as the flow's traffic showed it, where the
    kernel does not map queues to NAPIs."""
    from steer.model.irqs import DeviceIrq, queue_irq
    from steer.steering.affinity import (restore_irqs, restore_rps, set_irq_affinity, set_rps,
                                         thread_napi, unthread_napi)
    from steer.steering.xdp import SteerError
    dev, netns = desc["dev"], desc["netns"]
    if queue not in desc["rx_queues"]:
        raise SteerError(f"{dev} has no RX queue {queue} (it has "
                         f"{', '.join(map(str, sorted(desc['rx_queues'])))})")
    if method == "irq":
        # the IRQs describe() read: the queue's own, or a device's single unnamed one
        irq = queue_irq([DeviceIrq(**i) for i in desc["irqs"]], queue)
        if irq is None:
            raise SteerError(f"{dev} has no IRQ for RX queue {queue}")
        before = set_irq_affinity([irq], [cpu])
        return QueueMove(method, dev, queue, cpu, f"IRQ {irq.irq} ({irq.name or 'no name'}) of "
                         f"RX queue {queue} to CPU {cpu} (was CPU {before[irq.irq]})",
                         lambda: restore_irqs(before))
    if method == "rps":
        before = set_rps(dev, [cpu], netns, queue=queue)
        was = before[f"rx-{queue}"]
        return QueueMove(method, dev, queue, cpu, f"RPS of RX queue {queue} to CPU {cpu} (was "
                         f"mask {was})", lambda: restore_rps(dev, f"rx-{queue}", was, netns))
    if method == "napi":
        napi = desc["rx_queues"].get(queue) or napi_id
        if napi is None:
            raise SteerError(f"which NAPI polls RX queue {queue} of {dev} is not known: the "
                             "kernel's netdev netlink family does not say (Linux 6.8+, and a "
                             "driver that reports it), and no packet of the flow showed it")
        r = thread_napi(dev, napi, cpu, netns)
        scope = f"NAPI {napi} threaded on its own" if r["scope"] == "napi" else \
            f"NAPI {napi} ({dev}'s NAPIs threaded, all of them)"
        was = "already threaded, on CPU " + _cpus(r["cpus_before"]) if r["was_threaded"] else \
            "was polled in softirq"
        return QueueMove(method, dev, queue, cpu, f"{scope}: its kthread {r['pid']} on CPU {cpu} "
                         f"({was})", lambda: unthread_napi(dev, napi, r, netns))
    raise ValueError(method)


def _cpus(cpus: list[int]) -> str:
    from steer.model.topology import format_cpulist
    return format_cpulist(cpus)



class QueueSteering:
    """steer auto's moves by queue on one device: the RX queue a flow arrives on there, the
    cheapest per-queue method the device allows, a queue moved to a CPU and put back as it was
    found (at a revert, when its flow ends, and at exit; what a killed process leaves is
    `steer reset`'s, as for steer pin)."""

    def __init__(self, dev: str, netns: str | None):
        from steer.steering.xdp import netns_path
        self.dev, self.netns = dev, netns
        self.desc = describe(dev, netns)
        avail = methods(self.desc, "not asked")
        self.method = next((m for m in QUEUE_METHODS if avail[m].works), None)
        self.why = "; ".join(f"{m}: {avail[m].why}" for m in QUEUE_METHODS)
        self.netns_inode = os.stat(netns_path(netns) or "/proc/self/ns/net").st_ino
        self._undo: dict[int, Callable[[], None]] = {}   # queue -> back as found

    def queue_of(self, f) -> int | None:
        """The RX queue of this device that FlowReport F arrives on (None: another device, a
        queue not known, or no per-queue method here)."""
        rx = f.rx_path
        if self.method is None or rx is None or rx.ifindex != self.desc["ifindex"] \
                or rx.netns != self.netns_inode:
            return None
        if rx.queue is not None:
            return rx.queue
        return 0 if len(self.desc["rx_queues"]) == 1 else None

    def move(self, queue: int, cpu: int, napi_id: int | None = None) -> str:
        """Move QUEUE to CPU; what was done, in words."""
        moved = move_queue(self.method, self.desc, queue, cpu, napi_id)
        self._undo.setdefault(queue, moved.undo)   # the first move's: as found before any
        return moved.said

    def restore(self, queue: int) -> None:
        """Put QUEUE back as this engine found it."""
        undo = self._undo.pop(queue, None)
        if undo is not None:
            undo()

    def close(self) -> None:
        for queue in list(self._undo):
            try:
                self.restore(queue)
            except Exception:   # noqa: BLE001 - the device went; steer reset has the rest
                pass
