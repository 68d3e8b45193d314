"""A NIC's interrupts on fixture trees laid out as the kernel lays them out: which IRQs are the
device's, which queue each serves by its handler's name, where a flow's queue IRQ runs, where IRQs
fired; and what stops the sweep's IRQ method from moving receive processing."""
import os

import pytest

from steer.model.reports import with_queue_irq
from steer.experiment.hostconfig import irq_method_problems
from steer.model.irqs import (DeviceIrq, busiest_cpu, classify_irq_name, device_irqs, interrupt_counts,
                              irq_cpus, queue_irq, rx_irqs)
from steer.model.topology import nic_place


def put(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(f"{text}\n")


def pci_nic(sysfs, dev, pci, irqs: dict[int, str], numa=0, local="0-3", virtio=None):
    """A PCI function with MSI vectors IRQS ({irq: handler name}); DEV's device/ is the function
    itself, or (VIRTIO, e.g. "virtio1") a virtio device under it, as virtio-net's is."""
    fn = os.path.join(sysfs, "devices/pci0000:80/0000:80:00.0", pci)
    put(f"{fn}/numa_node", numa)
    put(f"{fn}/local_cpulist", local)
    for irq, name in irqs.items():
        put(f"{fn}/msi_irqs/{irq}", "msix")
        put(f"{sysfs}/kernel/irq/{irq}/actions", name)
    target = os.path.join(fn, virtio) if virtio else fn
    os.makedirs(target, exist_ok=True)
    os.makedirs(f"{sysfs}/class/net/{dev}", exist_ok=True)
    os.symlink(target, f"{sysfs}/class/net/{dev}/device")


VIRTIO = {28: "virtio1-config", 29: "virtio1-input.0", 30: "virtio1-output.0",
          31: "virtio1-input.1", 32: "virtio1-output.1"}


@pytest.mark.parametrize("name,dev,want", [
    ("virtio1-input.3", "eth0", (3, True)),
    ("virtio1-output.3", "eth0", (None, False)),
    ("virtio1-config", "eth0", (None, False)),
    ("virtio0-hiprio", "eth0", (None, False)),
    ("i40e-ens1f0-TxRx-7", "ens1f0", (7, True)),
    ("ens1f0-TxRx-7", "ens1f0", (7, True)),
    ("eth0-Tx-Rx-2", "eth0", (2, True)),           # ena
    ("eth0-rx-2", "eth0", (2, True)),              # igb with separate vectors
    ("eth0-tx-2", "eth0", (None, False)),
    ("mlx5_comp5@pci:0000:3b:00.0", "ens2f0np0", (5, True)),
    ("mlx5_async0@pci:0000:3b:00.0", "ens2f0np0", (None, False)),
    ("i40e-0000:3b:00.0:misc", "ens1f0", (None, False)),
    ("eth0-3", "eth0", (3, True)),                 # sfc, tg3: a combined queue
    ("eth0", "eth0", (None, True)),                # one vector for everything
])
def test_a_queue_and_its_direction_from_the_drivers_names(name, dev, want):
    assert classify_irq_name(name, dev) == want


def test_a_virtio_nics_irqs_are_its_pci_functions_and_it_is_on_that_node(tmp_path):
    sysfs = str(tmp_path)
    pci_nic(sysfs, "eth0", "0000:81:00.0", VIRTIO, numa=1, local="2-3", virtio="virtio1")
    irqs = device_irqs("eth0", sysfs, procfs=str(tmp_path / "noproc"))
    assert [(i.irq, i.queue, i.rx) for i in irqs] == [
        (28, None, False), (29, 0, True), (30, None, False), (31, 1, True), (32, None, False)]
    assert [i.irq for i in rx_irqs(irqs)] == [29, 31]
    assert queue_irq(irqs, 1).irq == 31 and queue_irq(irqs, 5) is None
    assert queue_irq(irqs, None) is None           # two receive IRQs: the queue decides
    # the locality is the function's: the virtio device's own directory has none
    assert nic_place(sysfs, "eth0") == {"numa_node": 1, "local_cpus": [2, 3]}


def test_a_pci_nics_own_vectors_and_a_legacy_line(tmp_path):
    sysfs = str(tmp_path)
    pci_nic(sysfs, "ens1f0", "0000:3b:00.0", {90: "i40e-0000:3b:00.0:misc", 91: "i40e-ens1f0-TxRx-0",
                                              92: "i40e-ens1f0-TxRx-1"})
    assert [(i.irq, i.queue) for i in rx_irqs(device_irqs("ens1f0", sysfs))] == [(91, 0), (92, 1)]
    # an old NIC with one INTx line and no MSI: that line serves every queue
    put(f"{sysfs}/class/net/eth1/device/irq", 11)
    put(f"{sysfs}/kernel/irq/11/actions", "eth1")
    (one,) = device_irqs("eth1", sysfs)
    assert one == DeviceIrq(11, "eth1", None, True) and queue_irq([one], 3) == one


def test_a_virtual_device_has_no_irqs(tmp_path):
    sysfs = str(tmp_path)
    os.makedirs(f"{sysfs}/class/net/veth0")
    proc = tmp_path / "proc"
    put(str(proc / "interrupts"), "           CPU0       CPU1\n"
                                 "  0:         95          0   IO-APIC   2-edge      timer\n")
    assert device_irqs("veth0", sysfs, str(proc)) == []


INTERRUPTS = """\
           CPU0       CPU1       CPU2       CPU3       
  0:         95          0          0          0   IO-APIC   2-edge      timer
 29:          7          0          0          1   PCI-MSI 67633153-edge      virtio1-input.0
 31:          0          3        500          1   PCI-MSI 67633155-edge      virtio1-input.1
LOC:       1897       2398        957       1565   Local timer interrupts
ERR:          0
"""


def test_interrupt_counts_and_where_an_irq_fired(tmp_path):
    put(str(tmp_path / "interrupts"), INTERRUPTS)
    before = interrupt_counts(str(tmp_path))
    assert before[31] == {0: 0, 1: 3, 2: 500, 3: 1} and "LOC" not in str(before.keys())
    after = {29: {0: 7, 1: 0, 2: 0, 3: 1}, 31: {0: 0, 1: 4, 2: 9500, 3: 1}}
    assert busiest_cpu(before, after, [31]) == (2, 9001)
    assert busiest_cpu(before, after, [29]) == (None, 0)
    # with no /sys/kernel/irq, the names come from /proc/interrupts
    from steer.model.irqs import irq_names
    assert irq_names(str(tmp_path), str(tmp_path / "nosys"))[31] == "virtio1-input.1"
    put(str(tmp_path / "irq/31/effective_affinity_list"), "2")
    put(str(tmp_path / "irq/31/smp_affinity_list"), "2-3")
    assert irq_cpus(31, str(tmp_path)) == [2] and irq_cpus(99, str(tmp_path)) is None


def test_a_flow_shows_its_queues_irq_and_where_it_may_run():
    dev = {"dev": "eth0", "nic": "eth0", "numa_node": 1, "local_cpus": [2, 3],
           "rx_irqs": [{"queue": 0, "irq": 29}, {"queue": 1, "irq": 31}],
           "irq_cpus": {"29": [0], "31": [2]}}
    assert with_queue_irq(dev, 1) == {"dev": "eth0", "nic": "eth0", "numa_node": 1,
                                      "local_cpus": [2, 3], "irq": 31, "irq_cpus": [2]}
    assert with_queue_irq(dev, None)["irq"] is None and with_queue_irq(dev, 7)["irq_cpus"] is None
    single = {**dev, "rx_irqs": [{"queue": None, "irq": 11}], "irq_cpus": {"11": [0, 1]}}
    assert with_queue_irq(single, 4)["irq"] == 11


def test_what_keeps_the_irq_method_from_moving_receive_processing():
    good = {"irqbalance": "not running",
            "device": {"name": "eth0", "rps": {"state": "off"}, "threaded_napi": False,
                       "irqs": [{"irq": 29, "name": "virtio1-input.0", "queue": 0, "rx": True}]}}
    assert irq_method_problems(good) == []
    bad = {"irqbalance": "running (pid 812)",
           "device": {"name": "eth0", "rps": {"state": "on"}, "threaded_napi": True, "irqs": []}}
    problems = irq_method_problems(bad)
    assert len(problems) == 4
    assert "no receive IRQs" in problems[0] and "systemctl stop irqbalance" in problems[1]
    assert "rps_cpus" in problems[2] and "/sys/class/net/eth0/threaded" in problems[3]
    assert irq_method_problems({"device": {"name": "eth9", "error": "no interface 'eth9'"}}) == \
        ["no interface 'eth9'"]
