"""Flow specs and mask order (pure)."""
import pytest

from steer.abi import xdp as abi
from steer.model.flowspec import FlowSpec, FlowSpecError, mask_order


def test_parse_wildcard_and_key():
    s = FlowSpec.parse("proto=tcp,dport=5201")
    assert (s.proto, s.dport, s.src) == ("tcp", 5201, None)
    assert s.mask == abi.F_PROTO | abi.F_DPORT and not s.exact
    k = s.key()
    assert (k.proto, k.dport, k.sport, k.family, bytes(k.saddr)) == (6, 5201, 0, 0, bytes(16))
    assert FlowSpec.from_key(k) == s and str(s) == "proto=tcp,dport=5201"


def test_exact_ipv6():
    s = FlowSpec.parse("proto=udp, src=2001:db8::1, sport=1000, dst=2001:db8::2, dport=53")
    assert s.exact
    k = s.key()
    assert k.family == 6 and bytes(k.daddr)[-1] == 2
    assert FlowSpec.from_key(k) == s


def test_ipv4_address_key_layout():
    k = FlowSpec.parse("src=198.18.0.1").key()
    assert bytes(k.saddr)[:4] == bytes([198, 18, 0, 1]) and bytes(k.saddr)[4:] == bytes(12)
    assert k.family == 4 and k.mask == abi.F_SRC


@pytest.mark.parametrize("bad,msg", [
    ("", "empty"), ("proto", "not key=value"), ("port=1", "unknown key"),
    ("proto=icmp", "tcp or udp"), ("dport=0", "1-65535"), ("dport=70000", "1-65535"),
    ("sport=ab", "1-65535"), ("src=1.2.3", "IPv4 or IPv6"), ("dport=1,dport=2", "twice"),
    ("src=198.18.0.1,dst=::1", "different IP versions"),
    # the reader's workload: not in a packet; the policy route named instead
    ("proto=tcp,pod=shop/api-0", r"pod= selects flows by their reader.*\[\[rule\]\] of pod = \"shop/api-0\""),
    ("unit=nginx.service", "steer auto --policy FILE.toml"),
    ("cgroup=/system.slice/x", "XDP cannot see")])
def test_rejects(bad, msg):
    with pytest.raises(FlowSpecError, match=msg):
        FlowSpec.parse(bad)


def test_mask_order_most_specific_first():
    assert mask_order([abi.F_DPORT, abi.F_ALL, abi.F_PROTO | abi.F_DPORT, abi.F_PROTO]) == \
        [abi.F_ALL, abi.F_PROTO | abi.F_DPORT, abi.F_DPORT, abi.F_PROTO]


def test_matches():
    s = FlowSpec.parse("proto=tcp,dport=5201")
    assert s.matches("tcp", "198.18.0.1", 4000, "198.18.0.2", 5201)
    assert not s.matches("udp", "198.18.0.1", 4000, "198.18.0.2", 5201)
