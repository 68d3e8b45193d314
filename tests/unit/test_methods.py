"""What each way of moving receive work can do on a device, decided from the device's description
(steer.steering.methods), on descriptions of devices this host does not have: a veth with and
without a NAPI, NICs with a vector per queue, threaded, on a kernel before the netdev family."""
import pytest

from steer.steering.methods import choose, methods
from steer.trace.check import method_lines

STEERING = "available (XDP program and cpumap; attaching to a device is tried by `steer pin`)"


def _irq(n, name, queue, rx=True):
    return {"irq": n, "name": name, "queue": queue, "rx": rx}


def veth(napi=False):
    return {"dev": "veth-rx", "netns": "lab", "kind": "veth", "ifindex": 2,
            "rx_queues": {0: 8193 if napi else None}, "rps": True, "threaded": False, "irqs": [],
            "napis": {8193: {"id": 8193, "irq": None, "pid": None, "threaded": False}} if napi else {}}


def nic(queues=4, threaded=False, netlink=True, per_napi=True, names="mlx5_comp{}@pci:0000:3b:00.0"):
    napis = {8200 + q: {"id": 8200 + q, "irq": 100 + q, "pid": None,
                        "threaded": (threaded if per_napi else None)} for q in range(queues)}
    return {"dev": "eth1", "netns": None, "kind": None, "ifindex": 3,
            "rx_queues": {q: (8200 + q if netlink else None) for q in range(queues)}, "rps": True,
            "threaded": threaded,
            "irqs": [_irq(99, "mlx5_async0@pci:0000:3b:00.0", None, rx=False)]
            + [_irq(100 + q, names.format(q), q if "{}" in names else None) for q in range(queues)],
            "napis": napis if netlink else None}


def _works(desc, steering=STEERING):
    return {n: m.works for n, m in methods(desc, steering).items()}


def test_a_veth_without_napi_moves_by_rps_or_cpumap():
    m = methods(veth(), STEERING)
    assert _works(veth()) == {"cpumap": True, "irq": False, "napi": False, "rps": True}
    assert "no IRQs of its own" in m["irq"].why
    assert "gro on" in m["napi"].why          # what would give it one
    assert choose(m, alone=True) == "rps" and choose(m, alone=False) == "cpumap"


def test_a_veth_with_napi_threads_it():
    m = methods(veth(napi=True), STEERING)
    assert m["napi"].works and "on its own" in m["napi"].why
    assert choose(m, alone=True) == "napi"


def test_a_nic_with_a_vector_per_queue_moves_by_its_irq_first():
    m = methods(nic(), STEERING)
    assert all(x.works for x in m.values())
    assert "4 of 4 queues named" in m["irq"].why
    assert choose(m, alone=True) == "irq" and choose(m, alone=False) == "cpumap"
    assert m["cpumap"].moves == "the matching flows alone" and "RX queue" in m["irq"].moves


def test_threaded_napi_takes_the_irq_out():
    m = methods(nic(threaded=True), STEERING)
    assert not m["irq"].works and "threaded" in m["irq"].why
    assert choose(m, alone=True) == "napi"


def test_before_the_netdev_family_threading_is_the_devices():
    m = methods(nic(netlink=False, per_napi=False), STEERING)
    assert m["napi"].works and "as a whole" in m["napi"].why and "from its traffic" in m["napi"].why
    old = dict(nic(netlink=False), threaded=None)   # before 5.12: no threaded file either
    assert not methods(old, STEERING)["napi"].works


def test_irqs_whose_names_say_no_queue():
    unnamed = nic(names="eth1-msix")
    m = methods(unnamed, STEERING)
    assert not m["irq"].works and "do not say which queue" in m["irq"].why
    single = dict(nic(queues=1, names="eth1"))
    one = methods(single, STEERING)["irq"]
    assert one.works and one.moves == "every flow of the device"


@pytest.mark.parametrize("steering", ["unavailable: the kernel refused a cpumap entry: EPERM"])
def test_no_cpumap_where_steering_is_refused(steering):
    m = methods(nic(), steering)
    assert not m["cpumap"].works and m["cpumap"].why == steering
    assert choose(m, alone=False) == "cpumap"   # said, and refused by steer pin itself


def test_no_rps_without_its_files():
    assert not methods(dict(veth(), rps=False), STEERING)["rps"].works


def test_check_lists_each_devices_methods_and_its_errors():
    report = {"methods": {"veth-rx": {"methods": [m.as_dict() for m in
                                                  methods(veth(), STEERING).values()]},
                          "gone0": {"error": "no interface 'gone0'"}}}
    lines = method_lines(report, 100)
    print("\n".join(lines))
    assert lines[0] == "ways to move the receive work of veth-rx (steer pin --method):"
    assert any(l.startswith("  cpumap  works  moves the matching flows alone") for l in lines)
    assert any(l.startswith("  irq     no     veth-rx has no IRQs") for l in lines)
    assert "    no interface 'gone0'" in lines
