"""Flow specs: 'proto=tcp,dport=5201' selects flows by any subset of the receive-direction
5-tuple (src is the remote sender, dst this host); all five fields make an exact rule."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from steer.abi import xdp as abi
from steer.model.samples import PROTO_NUMBERS, address_text, proto_name

FIELDS = ("proto", "src", "sport", "dst", "dport")
# what a flow spec cannot hold: the reader's workload, which XDP does not see (a packet carries
# no cgroup); steer auto's static rules select by it and steer each of its flows exactly
WORKLOAD_KEYS = ("pod", "container", "unit", "cgroup")


class FlowSpecError(ValueError):
    pass


@dataclass(frozen=True)
class FlowSpec:
    proto: str | None = None
    src: str | None = None
    sport: int | None = None
    dst: str | None = None
    dport: int | None = None

    @classmethod
    def parse(cls, text: str) -> "FlowSpec":
        fields: dict = {}
        if not text.strip():
            raise FlowSpecError("empty flow spec: give key=value pairs, e.g. proto=tcp,dport=5201")
        for part in text.split(","):
            key, sep, value = (s.strip() for s in part.partition("="))
            if not sep or not value:
                raise FlowSpecError(f"{part.strip()!r} is not key=value (keys: {', '.join(FIELDS)})")
            if key in WORKLOAD_KEYS:
                raise FlowSpecError(
                    f"{key}= selects flows by their reader, which XDP cannot see in a packet: "
                    f"steer auto --policy FILE.toml with a [[rule]] of {key} = \"{value}\" and "
                    f"cpu steers each of its flows (docs/guide/steer.md)")
            if key not in FIELDS:
                raise FlowSpecError(f"unknown key {key!r} (keys: {', '.join(FIELDS)})")
            if key in fields:
                raise FlowSpecError(f"{key} given twice")
            fields[key] = _value(key, value)
        src, dst = fields.get("src"), fields.get("dst")
        if src and dst and ipaddress.ip_address(src).version != ipaddress.ip_address(dst).version:
            raise FlowSpecError("src and dst are of different IP versions")
        return cls(**fields)

    @property
    def mask(self) -> int:
        return sum(bit for name, bit in abi.FIELD_BITS.items() if getattr(self, name) is not None)

    @property
    def exact(self) -> bool:
        return self.mask == abi.F_ALL

    def __str__(self) -> str:
        return ",".join(f"{k}={getattr(self, k)}" for k in FIELDS if getattr(self, k) is not None)

    def key(self) -> abi.RuleKey:
        """The BPF rule key: fields outside the mask zeroed, as the XDP program builds it."""
        k = abi.RuleKey(mask=self.mask)
        if self.proto:
            k.proto = PROTO_NUMBERS[self.proto]
        k.sport, k.dport = self.sport or 0, self.dport or 0
        for name, field in (("src", "saddr"), ("dst", "daddr")):
            addr = getattr(self, name)
            if addr:
                ip = ipaddress.ip_address(addr)
                packed = ip.packed.ljust(16, b"\0")
                ctypes_array = getattr(k, field)
                for i, b in enumerate(packed):
                    ctypes_array[i] = b
                k.family = ip.version
        return k

    @classmethod
    def from_key(cls, k: abi.RuleKey) -> "FlowSpec":
        m = k.mask
        return cls(proto=proto_name(k.proto) if m & abi.F_PROTO else None,
                   src=address_text(k.saddr, k.family) if m & abi.F_SRC else None,
                   sport=k.sport if m & abi.F_SPORT else None,
                   dst=address_text(k.daddr, k.family) if m & abi.F_DST else None,
                   dport=k.dport if m & abi.F_DPORT else None)

    def matches(self, proto: str, src: str, sport: int, dst: str, dport: int) -> bool:
        return all(getattr(self, n) is None or getattr(self, n) == v for n, v in
                   (("proto", proto), ("src", src), ("sport", sport), ("dst", dst), ("dport", dport)))


def _value(key: str, value: str):
    if key == "proto":
        v = value.lower()
        if v not in PROTO_NUMBERS:
            raise FlowSpecError(f"proto must be tcp or udp, not {value!r}")
        return v
    if key in ("sport", "dport"):
        if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= 65535:
            raise FlowSpecError(f"{key} must be a port number 1-65535, not {value!r}")
        return int(value)
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise FlowSpecError(f"{key} must be an IPv4 or IPv6 address, not {value!r}") from None


def mask_order(masks) -> list[int]:
    """Masks in lookup order: more fields first, so an exact rule beats a wildcard one; among
    equals, addresses before ports before the protocol (higher bits first)."""
    return sorted(set(masks), key=lambda m: (-bin(m).count("1"), -m))
