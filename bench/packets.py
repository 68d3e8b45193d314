"""Packet building and an independent reference parser for the XDP steering program: used by its
tests (tests/live/test_steering_live.py) and by the benches that feed it packets (fuzz, steering_cost).

The reference parser is written from the protocol specs, not from bpf/parsing.bpf.h: it says which
packets are well-formed TCP/UDP the steering program should steer, and what their tuple is."""
from __future__ import annotations

import ipaddress
import random
import struct

ETH_IP, ETH_IP6, VLAN_TPIDS = 0x0800, 0x86DD, (0x8100, 0x88A8)
EXT_HEADERS = (0, 43, 60, 51)   # hop-by-hop, routing, destination options, AH


def eth(payload: bytes, ethertype: int, vlans=()) -> bytes:
    head = bytes(6) + bytes([2, 0, 0, 0, 0, 1])
    types = list(vlans) + [ethertype]
    # the first EtherType field carries the outer TPID (or the protocol without tags), each tag
    # its TCI and the next type
    out = head + struct.pack("!H", types[0])
    for i in range(len(vlans)):
        out += struct.pack("!HH", 100 + i, types[i + 1])
    return out + payload


def ipv4(src, dst, proto, l4: bytes, options: bytes = b"", frag: int = 0) -> bytes:
    ihl = 5 + len(options) // 4
    tot = ihl * 4 + len(l4)
    return struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, tot, 1, frag, 64, proto, 0,
                       ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed) + options + l4


def ipv6(src, dst, nexthdr, payload: bytes) -> bytes:
    return struct.pack("!IHBB16s16s", 0x60000000, len(payload), nexthdr, 64,
                       ipaddress.IPv6Address(src).packed, ipaddress.IPv6Address(dst).packed) + payload


def ext(nexthdr: int, kind: int, body_units: int = 0) -> bytes:
    """An IPv6 extension header of KIND announcing NEXTHDR after it."""
    if kind == 51:   # AH: length in 4-byte units, minus 2
        return bytes([nexthdr, 1 + body_units]) + bytes((3 + body_units) * 4 - 2)
    return bytes([nexthdr, body_units]) + bytes((body_units + 1) * 8 - 2)


def tcp(sport, dport, payload=b"", doff=5) -> bytes:
    opts = bytes((doff - 5) * 4) if doff >= 5 else b""
    return struct.pack("!HHIIBBHHH", sport, dport, 1, 0, doff << 4, 0x10, 65535, 0, 0) + opts + payload


def udp(sport, dport, payload=b"") -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload


# the rules the parser fuzzing installs: a wildcard, an exact IPv6 rule, a two-field rule
FUZZ_SPECS = ("proto=tcp,dport=5201", "proto=udp,src=2001:db8::1,sport=53,dst=2001:db8::2,dport=53",
              "src=198.18.0.1,dport=9000")


def reference_tuple(pkt: bytes):
    """(proto, src, sport, dst, dport) of a well-formed, unfragmented TCP/UDP packet, else None."""
    if len(pkt) < 14:
        return None
    off, etype = 14, struct.unpack_from("!H", pkt, 12)[0]
    for _ in range(2):
        if etype not in VLAN_TPIDS:
            break
        if len(pkt) < off + 4:
            return None
        etype = struct.unpack_from("!H", pkt, off + 2)[0]
        off += 4
    if etype == ETH_IP:
        if len(pkt) < off + 20:
            return None
        vihl = pkt[off]
        if vihl >> 4 != 4 or vihl & 15 < 5:
            return None
        hl = (vihl & 15) * 4
        if len(pkt) < off + hl:
            return None
        tot, frag = struct.unpack_from("!H", pkt, off + 2)[0], struct.unpack_from("!H", pkt, off + 6)[0]
        if tot < hl or frag & 0x3FFF:
            return None
        proto = pkt[off + 9]
        src, dst = str(ipaddress.IPv4Address(pkt[off + 12:off + 16])), str(ipaddress.IPv4Address(pkt[off + 16:off + 20]))
        off += hl
    elif etype == ETH_IP6:
        if len(pkt) < off + 40 or pkt[off] >> 4 != 6:
            return None
        proto = pkt[off + 6]
        src = str(ipaddress.IPv6Address(pkt[off + 8:off + 24]))
        dst = str(ipaddress.IPv6Address(pkt[off + 24:off + 40]))
        off += 40
        for _ in range(6):
            if proto == 44:
                return None
            if proto not in EXT_HEADERS:
                break
            if len(pkt) < off + 2:
                return None
            n = (pkt[off + 1] + 2) * 4 if proto == 51 else (pkt[off + 1] + 1) * 8
            if len(pkt) < off + n:
                return None
            proto, off = pkt[off], off + n
    else:
        return None
    if proto == 6:
        if len(pkt) < off + 20:
            return None
        doff = (pkt[off + 12] >> 4) * 4
        if doff < 20 or len(pkt) < off + doff:
            return None
        sport, dport = struct.unpack_from("!HH", pkt, off)
        return ("tcp", src, sport, dst, dport)
    if proto == 17:
        if len(pkt) < off + 8:
            return None
        sport, dport, ulen = struct.unpack_from("!HHH", pkt, off)
        if ulen < 8:
            return None
        return ("udp", src, sport, dst, dport)
    return None


def base_packets() -> list[bytes]:
    """Well-formed packets of every shape the parser knows, matching and not."""
    a4, b4, a6, b6 = "198.18.0.1", "198.18.0.2", "2001:db8::1", "2001:db8::2"
    out = [
        eth(ipv4(a4, b4, 6, tcp(40000, 5201, b"x" * 100)), ETH_IP),
        eth(ipv4(a4, b4, 6, tcp(40000, 5201, b"y" * 20, doff=8), options=bytes(8)), ETH_IP),
        eth(ipv4(a4, b4, 17, udp(5000, 9000, b"z" * 60)), ETH_IP),
        eth(ipv4(a4, b4, 6, tcp(40000, 80)), ETH_IP, vlans=(0x8100,)),
        eth(ipv4(a4, b4, 6, tcp(40001, 5201)), ETH_IP, vlans=(0x88A8, 0x8100)),
        eth(ipv6(a6, b6, 6, tcp(40000, 5201, b"q" * 40)), ETH_IP6),
        eth(ipv6(a6, b6, 0, ext(60, 0) + ext(17, 60, 1) + udp(53, 53, b"d" * 30)), ETH_IP6),
        eth(ipv6(a6, b6, 43, ext(51, 43) + ext(6, 51, 1) + tcp(1, 5201)), ETH_IP6),
        eth(ipv4(a4, b4, 6, tcp(40000, 5201), frag=0x2000), ETH_IP),        # first fragment
        eth(ipv4(a4, b4, 17, udp(1, 2), frag=0x0010), ETH_IP),              # later fragment
        eth(ipv6(a6, b6, 44, bytes([6, 0, 0, 1, 0, 0, 0, 1]) + tcp(1, 5201)), ETH_IP6),
        eth(b"\x00\x01\x08\x00\x06\x04\x00\x01" + bytes(20), 0x0806),     # ARP
    ]
    return out


def fuzz_packets(n: int, seed: int = 1) -> list[bytes]:
    """N packets: every base packet truncated at every length, malformed header fields, IPv6
    extension chains, VLAN stacks, then random mutations and random bytes up to N."""
    rnd = random.Random(seed)
    bases = base_packets()
    out = []
    for b in bases:
        out += [b[:i] for i in range(14, len(b) + 1)]       # the kernel refuses < 14 (ETH_HLEN)
    a4, b4 = "198.18.0.1", "198.18.0.2"
    for ihl in range(16):   # bad and odd IHLs
        p = bytearray(eth(ipv4(a4, b4, 6, tcp(1, 5201), options=bytes(40)), ETH_IP))
        p[14] = 0x40 | ihl
        out.append(bytes(p))
    for doff in range(16):
        out.append(eth(ipv4(a4, b4, 6, tcp(1, 5201, doff=doff)), ETH_IP))
    for _ in range(500):   # random IPv6 extension chains
        chain, nh = b"", 6
        kinds = [rnd.choice((0, 43, 60, 51, 44, 59, 6, 17, 255)) for _ in range(rnd.randint(0, 8))]
        for k in reversed(kinds):
            chain = (ext(nh, k, rnd.randint(0, 3)) if k in EXT_HEADERS else
                     bytes([nh, 0]) + bytes(6)) + chain
            nh = k
        out.append(eth(ipv6("2001:db8::1", "2001:db8::2", nh, chain + tcp(2, 5201)), ETH_IP6))
    for _ in range(300):   # VLAN stacks of 0-4 tags, some deeper than the parser follows
        tags = tuple(rnd.choice(VLAN_TPIDS) for _ in range(rnd.randint(0, 4)))
        out.append(eth(ipv4(a4, b4, 6, tcp(3, 5201)), ETH_IP, vlans=tags))
    while len(out) < n:
        if rnd.random() < 0.7:
            p = bytearray(rnd.choice(bases))
            for _ in range(rnd.randint(1, 6)):
                p[rnd.randrange(len(p))] = rnd.randrange(256)
            if rnd.random() < 0.3:
                p = p[:rnd.randint(14, len(p))]
            out.append(bytes(p))
        else:
            out.append(bytes(rnd.randrange(256) for _ in range(rnd.randint(14, 200))))
    return out
