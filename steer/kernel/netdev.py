"""The kernel's netdev netlink family (Documentation/netlink/specs/netdev.yaml): a device's RX
queues and the NAPI instance that polls each (Linux 6.8+), each NAPI's IRQ and, when threaded, its
kthread's pid (6.9+), and whether that one NAPI is threaded (6.17+; before, threading is the
device's as a whole, /sys/class/net/DEV/threaded). Drivers that do not report their queues to it
(veth, until a NAPI exists; older drivers) have none here. The caller is in the device's network
namespace: the socket sees that namespace's devices."""
from __future__ import annotations

import errno
from dataclasses import dataclass

from steer.kernel.errors import KernelError

FAMILY = "netdev"
CMD_QUEUE_GET, CMD_NAPI_GET, CMD_NAPI_SET = 10, 11, 14
QUEUE_TYPE_RX = 0


@dataclass(frozen=True)
class Napi:
    id: int
    irq: int | None          # the IRQ that schedules it (None: not reported, or none)
    pid: int | None          # its kthread, when threaded
    threaded: bool | None    # this NAPI alone threaded (None: the kernel does not say: before 6.17)

    def as_dict(self) -> dict:
        return {"id": self.id, "irq": self.irq, "pid": self.pid, "threaded": self.threaded}


def _messages():
    from pyroute2.netlink import genlmsg

    class queue_msg(genlmsg):
        nla_map = (("NETDEV_A_QUEUE_UNSPEC", "none"), ("NETDEV_A_QUEUE_ID", "uint32"),
                   ("NETDEV_A_QUEUE_IFINDEX", "uint32"), ("NETDEV_A_QUEUE_TYPE", "uint32"),
                   ("NETDEV_A_QUEUE_NAPI_ID", "uint32"))

    class napi_msg(genlmsg):
        # GRO_FLUSH_TIMEOUT and IRQ_SUSPEND_TIMEOUT are variable-sized: left undecoded
        nla_map = (("NETDEV_A_NAPI_UNSPEC", "none"), ("NETDEV_A_NAPI_IFINDEX", "uint32"),
                   ("NETDEV_A_NAPI_ID", "uint32"), ("NETDEV_A_NAPI_IRQ", "uint32"),
                   ("NETDEV_A_NAPI_PID", "uint32"), ("NETDEV_A_NAPI_DEFER_HARD_IRQS", "uint32"),
                   ("NETDEV_A_NAPI_GRO_FLUSH_TIMEOUT", "hex"),
                   ("NETDEV_A_NAPI_IRQ_SUSPEND_TIMEOUT", "hex"),
                   ("NETDEV_A_NAPI_THREADED", "uint32"))
    return queue_msg, napi_msg


class _Socket:
    def __enter__(self):
        from pyroute2.netlink.generic import GenericNetlinkSocket
        self.queue_msg, self.napi_msg = _messages()
        self.sock = GenericNetlinkSocket()
        try:
            self.sock.bind(FAMILY, self.napi_msg)
        except Exception as e:   # noqa: BLE001 - pyroute2 raises its own kinds
            self.sock.close()
            if getattr(e, "code", None) == errno.ENOENT:
                raise NoFamily("the kernel has no netdev netlink family (Linux 6.8+)") from None
            raise KernelError(f"netdev netlink: {e}") from None
        return self

    def __exit__(self, *exc):
        self.sock.close()

    def request(self, msg_class, cmd: int, attrs: list, dump: bool) -> list:
        from pyroute2.netlink import NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST
        self.sock.marshal.msg_map[self.sock.prid] = msg_class
        m = msg_class()
        m["cmd"], m["version"], m["attrs"] = cmd, 1, attrs
        flags = NLM_F_REQUEST | (NLM_F_DUMP if dump else NLM_F_ACK)
        try:
            return list(self.sock.nlm_request(m, msg_type=self.sock.prid, msg_flags=flags))
        except Exception as e:   # noqa: BLE001
            code = getattr(e, "code", 0)
            raise KernelError(f"netdev netlink: {e}", code) from None


class NoFamily(KernelError):
    """The kernel predates the netdev family, or its queue and NAPI objects."""


def rx_queues_and_napis(ifindex: int) -> tuple[dict[int, int | None], dict[int, Napi]]:
    """DEVICE IFINDEX's RX queues ({queue: NAPI id, None where none polls it}) and NAPIs
    ({id: Napi}). Both empty for a device that reports none. Raises NoFamily before 6.8."""
    with _Socket() as s:
        try:
            queues = s.request(s.queue_msg, CMD_QUEUE_GET, [], dump=True)
            napis = s.request(s.napi_msg, CMD_NAPI_GET, [], dump=True)
        except KernelError as e:
            if e.errno in (errno.EOPNOTSUPP, errno.EINVAL):
                raise NoFamily("the kernel's netdev netlink family has no queue or NAPI objects "
                               "(Linux 6.8+)") from None
            raise
    rx = {}
    for q in queues:
        if q.get_attr("NETDEV_A_QUEUE_IFINDEX") == ifindex and \
                q.get_attr("NETDEV_A_QUEUE_TYPE") == QUEUE_TYPE_RX:
            rx[q.get_attr("NETDEV_A_QUEUE_ID")] = q.get_attr("NETDEV_A_QUEUE_NAPI_ID")
    out = {}
    for n in napis:
        if n.get_attr("NETDEV_A_NAPI_IFINDEX") != ifindex:
            continue
        threaded = n.get_attr("NETDEV_A_NAPI_THREADED")
        out[n.get_attr("NETDEV_A_NAPI_ID")] = Napi(
            n.get_attr("NETDEV_A_NAPI_ID"), n.get_attr("NETDEV_A_NAPI_IRQ"),
            n.get_attr("NETDEV_A_NAPI_PID") or None,
            None if threaded is None else threaded != 0)
    return rx, out


def set_napi_threaded(napi_id: int, on: bool) -> None:
    """Thread NAPI NAPI_ID alone (a kthread of its own, napi/<dev>-<id>) or stop it (6.17+)."""
    with _Socket() as s:
        s.request(s.napi_msg, CMD_NAPI_SET,
                  [("NETDEV_A_NAPI_ID", napi_id), ("NETDEV_A_NAPI_THREADED", 1 if on else 0)],
                  dump=False)
