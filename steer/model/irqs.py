"""A network device's interrupts: which IRQs are its own, which of its queues each one serves,
where each is allowed to run, and how often each fired on every CPU.

The papers moved the NIC queue's IRQ to one core: the IRQ's CPU is where the driver's NAPI poll,
and so the flow's receive softirq, runs (unless RPS or threaded NAPI move it on). A flow's RX
queue (the tracer records skb->queue_mapping) is mapped here to the IRQ that serves it.

The IRQs of a device are the MSI vectors of its PCI function (device/msi_irqs, or the parent's for
a virtio device, whose own directory sits under the PCI function), else its legacy line
(device/irq), else the /proc/interrupts lines that name the device. A vector's queue is read from
its handler's name, which every driver makes up in its own way:

    virtio1-input.3, virtio1-output.3, virtio1-config    virtio-net: RX, TX, neither
    i40e-eth0-TxRx-3, eth0-TxRx-3, eth0-rx-3, eth0-tx-3  Intel, Broadcom and others
    mlx5_comp3@pci:0000:3b:00.0, mlx5_async0@pci:...     mlx5: completion vector 3 serves channel 3
    eth0-3                                               sfc, tg3: a combined queue

A vector whose name says nothing is taken to serve receive (a single-vector NIC does), with no
queue. Every function takes the sysfs and procfs roots, so that tests run on fixture trees.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from steer.model.topology import device_dir_with, parse_cpulist, read_text

# the handler names that serve no RX queue: config/control/admin vectors
_OTHER = re.compile(r"(?i)(?:^|[-_.:])(?:config|async|mgmnt|mgmt|ctrl|control|hiprio|misc|"
                    r"admin|ptp|aeq|cmdq|err|link)(?:\d*)(?:$|[-_.:@])")
_TX_ONLY = re.compile(r"(?i)(?:^|[-_.])(?:tx|output)[-_.]?(\d+)$")
_RX = re.compile(r"(?i)(?:^|[-_.])(?:txrx|tx-rx|rxtx|rx|input|comp)[-_.]?(\d+)$")
_DEV_NUMBERED = r"(?:^|[-_.]){dev}[-_.](\d+)$"


@dataclass(frozen=True)
class DeviceIrq:
    irq: int
    name: str              # its handler's name ("" when the kernel shows none)
    queue: int | None      # the queue it serves, as its name tells (None: not told)
    rx: bool               # it serves received packets (an RX or combined queue, or not told)

    def as_dict(self) -> dict:
        return {"irq": self.irq, "name": self.name, "queue": self.queue, "rx": self.rx}


def classify_irq_name(name: str, dev: str = "") -> tuple[int | None, bool]:
    """(queue, serves receive) of an IRQ from its handler's NAME, for device DEV."""
    base = name.split("@", 1)[0].strip()   # mlx5 appends @pci:<address>
    if _OTHER.search(base):
        return None, False
    if _TX_ONLY.search(base) and not _RX.search(base):
        return None, False
    m = _RX.search(base)
    if m:
        return int(m.group(1)), True
    if dev:
        m = re.search(_DEV_NUMBERED.format(dev=re.escape(dev)), base)
        if m:
            return int(m.group(1)), True
    return None, True


def _msi_dir(sysfs: str, dev: str) -> str | None:
    """The msi_irqs directory of DEV's own device or of its parent (a virtio device's PCI
    function); None when neither has one."""
    d = device_dir_with(sysfs, dev, "msi_irqs")
    return os.path.join(d, "msi_irqs") if d else None


def irq_names(procfs: str = "/proc", sysfs: str = "/sys") -> dict[int, str]:
    """{irq: its handlers' names}, from /sys/kernel/irq/N/actions where the kernel has it (4.17+),
    else the last column of /proc/interrupts."""
    out: dict[int, str] = {}
    kirq = os.path.join(sysfs, "kernel/irq")
    try:
        for n in os.listdir(kirq):
            if n.isdigit():
                out[int(n)] = read_text(os.path.join(kirq, n, "actions")) or ""
    except OSError:
        pass
    if out:
        return out
    for irq, _, name in _interrupt_lines(procfs):
        out[irq] = name
    return out


def _interrupt_lines(procfs: str):
    """(irq, per-CPU counts by CPU number, handler name) of /proc/interrupts' numbered lines."""
    try:
        with open(os.path.join(procfs, "interrupts")) as f:
            lines = f.read().splitlines()
    except OSError:
        return
    if not lines:
        return
    cpus = [int(c[3:]) for c in lines[0].split() if c.startswith("CPU")]
    for line in lines[1:]:
        head, _, rest = line.partition(":")
        if not head.strip().isdigit():
            continue
        words = rest.split()
        counts = {}
        for cpu, w in zip(cpus, words):
            if not w.isdigit():
                break
            counts[cpu] = int(w)
        # after the counts: the chip, the hwirq and its trigger, then the handlers' names
        tail = words[len(counts):]
        yield int(head), counts, " ".join(tail[2:]) if len(tail) > 2 else ""


def interrupt_counts(procfs: str = "/proc") -> dict[int, dict[int, int]]:
    """{irq: {cpu: times it fired there since boot}} of every numbered IRQ."""
    return {irq: counts for irq, counts, _ in _interrupt_lines(procfs)}


def device_irqs(dev: str, sysfs: str = "/sys", procfs: str = "/proc") -> list[DeviceIrq]:
    """The IRQs of network device DEV (under SYSFS/class/net), each with the queue it serves;
    [] for a device without interrupts of its own (veth, loopback, a bridge)."""
    names = irq_names(procfs, sysfs)
    msi = _msi_dir(sysfs, dev)
    if msi:
        irqs = sorted(int(n) for n in os.listdir(msi) if n.isdigit())
    else:
        legacy = read_text(os.path.join(sysfs, "class/net", dev, "device/irq"))
        if legacy and legacy.isdigit() and int(legacy) > 0:
            irqs = [int(legacy)]
        else:   # no device/ (or a platform device): the lines that name DEV
            irqs = sorted(i for i, n in names.items()
                          if any(w == dev or w.startswith(dev + "-") or f"-{dev}-" in w
                                 for w in re.split(r"[\s,]+", n)))
    out = []
    for irq in irqs:
        name = names.get(irq, "")
        queue, rx = classify_irq_name(name, dev)
        out.append(DeviceIrq(irq, name, queue, rx))
    return out


def rx_irqs(irqs: list[DeviceIrq]) -> list[DeviceIrq]:
    return [i for i in irqs if i.rx]


def queue_irq(irqs: list[DeviceIrq], queue: int | None) -> DeviceIrq | None:
    """The IRQ that serves RX QUEUE; with a single receive IRQ and no queue names, that one."""
    rx = rx_irqs(irqs)
    if queue is not None:
        for i in rx:
            if i.queue == queue:
                return i
    if len(rx) == 1 and rx[0].queue is None:
        return rx[0]
    return None


def irq_cpus(irq: int, procfs: str = "/proc") -> list[int] | None:
    """The CPUs IRQ is delivered to: the effective affinity (what the interrupt controller was
    programmed with), else the allowed one; None: no such IRQ."""
    for f in ("effective_affinity_list", "smp_affinity_list"):
        text = read_text(os.path.join(procfs, "irq", str(irq), f))
        if text:
            return parse_cpulist(text)
    return None


def busiest_cpu(before: dict[int, dict[int, int]], after: dict[int, dict[int, int]],
                irqs) -> tuple[int | None, int]:
    """(the CPU on which IRQS fired most between two interrupt_counts(), how often in all);
    (None, 0) when none fired."""
    per_cpu: dict[int, int] = {}
    for irq in irqs:
        b = before.get(irq, {})
        for cpu, n in after.get(irq, {}).items():
            per_cpu[cpu] = per_cpu.get(cpu, 0) + n - b.get(cpu, 0)
    total = sum(per_cpu.values())
    if not total:
        return None, 0
    return max(per_cpu, key=lambda c: (per_cpu[c], -c)), total
