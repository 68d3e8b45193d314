"""steer profile's pure parts: the category rules, kernel text cut into ranges from a kallsyms
file, what the BPF search computes for a stack, and the profile built from the kernel's counts.
The live checks (against the exact tracer, and Cai et al.'s data-copy finding) are in
test_profile_live.py."""
import json
import xml.etree.ElementTree as ET

import pytest

from steer.abi import flowtrace as abi
from steer.present.profile_view import render_table, write_svg
from steer.trace.profile import (CATEGORIES, CATEGORY_IDS, RULES, build_profile, category_of,
                                 pack_ranges, stack_category, text_categories)
from steer.model.samples import FlowId
from steer.trace.tracer import _flow_id_of

KALLSYMS = """\
ffffffff81000000 T _stext
ffffffff81000000 T srso_alias_untrain_ret
ffffffff81001000 T tcp_v4_rcv
ffffffff81001400 t tcp_v4_rcv.cold
ffffffff81001800 T tcp_rcv_established
ffffffff81002000 T __check_object_size
ffffffff81002100 T memset
ffffffff81002200 T _copy_to_iter
ffffffff81002400 T rep_movs_alternative
ffffffff81002500 T _raw_spin_lock_bh
ffffffff81002600 T _raw_spin_unlock_irqrestore
ffffffff81002700 T try_to_wake_up
ffffffff81002800 T napi_alloc_skb
ffffffff81002900 T napi_gro_receive
ffffffff81002a00 T kmem_cache_free
ffffffff81002b00 T do_syscall_64
ffffffff81002b80 T __pfx_tcp_v4_early_demux
ffffffff81002b80 T tcp_v4_early_demux
ffffffff81002c00 d some_data
ffffffffc0001000 t mlx5e_poll_rx_cq\t[mlx5_core]
ffffffffc0001400 t xfs_foo\t[xfs]
ffffffffc0002000 t bpf_prog_1234_ft_sample\t[bpf]
"""


@pytest.fixture
def kallsyms(tmp_path):
    p = tmp_path / "kallsyms"
    p.write_text(KALLSYMS)
    return str(p)


@pytest.mark.parametrize("name,module,want", [
    ("rep_movs_alternative", None, "data_copy"), ("skb_copy_datagram_iter", None, "data_copy"),
    ("tcp_rcv_established", None, "tcp_ip"), ("tcp_v4_rcv.cold", None, "tcp_ip"),
    ("ip_rcv_finish_core.isra.0", None, "tcp_ip"), ("udp_recvmsg", None, "tcp_ip"),
    ("tcp_rmem_schedule", None, "memory"), ("kmem_cache_alloc_node_noprof", None, "memory"),
    ("napi_alloc_skb", None, "skb_mgmt"), ("__kfree_skb", None, "skb_mgmt"),
    ("skb_put", None, "skb_mgmt"), ("napi_gro_receive", None, "netdev"),
    ("skb_gro_receive", None, "netdev"), ("net_rx_action", None, "netdev"),
    ("veth_poll", None, "netdev"), ("mlx5e_poll_rx_cq", "mlx5_core", "netdev"),
    ("tcp_foo", "mlx5_core", "tcp_ip"), ("_raw_spin_lock_bh", None, "lock"),
    ("native_queued_spin_lock_slowpath", None, "lock"), ("try_to_wake_up", None, "scheduling"),
    ("__schedule", None, "scheduling"),
    # no rule: the caller decides
    ("memset", None, None), ("do_syscall_64", None, None), ("xfs_foo", "xfs", None),
    ("_raw_spin_unlock_irqrestore", None, None), ("__local_bh_enable_ip", None, None),
])
def test_rules(name, module, want):
    assert category_of(name, module) == want


def test_every_rule_names_a_category():
    assert {c for c, _ in RULES} - {None} <= set(CATEGORIES)
    assert CATEGORY_IDS["other"] == abi.FT_CATEGORY_OTHER
    assert abi.FT_CATEGORY_NONE not in CATEGORY_IDS.values()
    assert len(set(CATEGORY_IDS.values())) == len(CATEGORIES)


def test_text_ranges_merge_sort_and_end(kallsyms):
    r = text_categories(kallsyms)
    starts = [s for s, _ in r]
    assert starts == sorted(starts)
    # neighbours of one category are one range; the data symbol is not text
    assert all(a[1] != b[1] for a, b in zip(r, r[1:]))
    tcp = CATEGORY_IDS["tcp_ip"]
    assert (0xffffffff81001000, tcp) in r and (0xffffffff81001800, tcp) not in r
    assert r[0] == (0xffffffff81000000, abi.FT_CATEGORY_NONE)
    # of two names at one address, the one with a rule speaks for it
    assert (0xffffffff81002b80, tcp) in r
    # the driver's function is netdev, the other module's and the BPF program's have no rule
    assert (0xffffffffc0001000, CATEGORY_IDS["netdev"]) in r
    assert (0xffffffffc0001400, abi.FT_CATEGORY_NONE) in r
    # past the last symbol: no rule
    assert r[-1][1] == abi.FT_CATEGORY_NONE


def test_kptr_restrict_is_one_clear_error(tmp_path):
    p = tmp_path / "kallsyms"
    p.write_text("0000000000000000 T tcp_v4_rcv\n0000000000000000 T _copy_to_iter\n")
    with pytest.raises(ValueError, match="CAP_SYSLOG"):
        text_categories(str(p))


def test_stack_category_takes_the_innermost_frame_with_a_rule(kallsyms):
    r = text_categories(kallsyms)
    copy, check, memset = 0xffffffff81002410, 0xffffffff81002010, 0xffffffff81002110
    to_iter, tcp, syscall = 0xffffffff81002210, 0xffffffff81001810, 0xffffffff81002b10
    unlock, wake = 0xffffffff81002610, 0xffffffff81002710
    assert stack_category([copy, to_iter, tcp], r) == "data_copy"
    # a helper without a rule goes to its caller: memset under the usercopy check
    assert stack_category([memset, check, to_iter], r) == "data_copy"
    # irqs turned back on: the caller says what they were off for
    assert stack_category([unlock, wake, tcp], r) == "scheduling"
    assert stack_category([syscall], r) == "other"
    assert stack_category([], r) == "other"
    assert stack_category([0xffffffff80000000], r) == "other"   # below kernel text


def test_packed_ranges_match_the_bpf_layout(kallsyms):
    r = text_categories(kallsyms)
    keys, values = pack_ranges(r)
    assert len(keys) == 4 * len(r) and len(values) == 16 * len(r)
    first = abi.TextCategory.from_buffer_copy(values[:16])
    assert (first.start, first.category) == r[0]


def _key(flow: bytes, sport: int, dport: int, cpu: int, side: int, category: str) -> bytes:
    k = abi.ProfileKey()
    k.flow.saddr[:4] = list(flow)
    k.flow.daddr[:4] = [198, 18, 0, 2]
    k.flow.sport, k.flow.dport, k.flow.proto, k.flow.family = sport, dport, 6, 4
    k.cpu, k.side, k.category = cpu, side, CATEGORY_IDS[category]
    return bytes(k)


def test_build_profile_splits_flows_sides_and_cpus():
    a = _key(bytes([198, 18, 0, 1]), 40000, 5201, 1, abi.FT_SIDE_APP, "data_copy")
    b = _key(bytes([198, 18, 0, 1]), 40000, 5201, 0, abi.FT_SIDE_KERNEL, "tcp_ip")
    c = _key(bytes([198, 18, 0, 1]), 40000, 5201, 0, abi.FT_SIDE_KTHREAD, "netdev")
    none = bytes(abi.ProfileKey(cpu=0, side=abi.FT_SIDE_KERNEL, category=CATEGORY_IDS["other"]))
    before = {a: (10, 10_000_000)}
    after = {a: (110, 110_000_000), b: (50, 50_000_000), c: (5, 5_000_000), none: (3, 3_000_000)}
    fid = FlowId("tcp", "198.18.0.1", 40000, "198.18.0.2", 5201)
    p = build_profile(before, after, {fid: 12345}, 2.0, 999, 500, _flow_id_of)
    assert [f.flow for f in p.flows] == [fid]
    f = p.flows[0]
    assert f.rx_bytes == 12345 and f.samples == 155
    assert f.app.seconds == {"data_copy": pytest.approx(0.1)}
    # a cpumap kthread's work is the kernel side too
    assert f.kernel.seconds == {"tcp_ip": pytest.approx(0.05), "netdev": pytest.approx(0.005)}
    assert p.unattributed.seconds == {"other": pytest.approx(0.003)}
    assert p.cpus[0]["kernel"].samples == 58 and p.cpus[1]["app"].samples == 100
    j = json.loads(json.dumps(p.as_json()))
    assert j["categories"] == list(CATEGORIES)
    assert set(j["flows"][0]) >= {"proto", "src", "sport", "dst", "dport", "rx_bytes", "kernel",
                                  "app", "samples"}
    assert set(j["flows"][0]["kernel"]) == set(CATEGORIES)
    assert j["flows"][0]["app"]["data_copy"] == pytest.approx(0.1)
    assert [c["cpu"] for c in j["cpus"]] == [0, 1]


def test_table_and_svg(tmp_path):
    a = _key(bytes([198, 18, 0, 1]), 40000, 5201, 1, abi.FT_SIDE_APP, "data_copy")
    b = _key(bytes([198, 18, 0, 1]), 40000, 5201, 1, abi.FT_SIDE_APP, "lock")
    fid = FlowId("tcp", "198.18.0.1", 40000, "198.18.0.2", 5201)
    p = build_profile({}, {a: (75, 75_000_000), b: (25, 25_000_000)}, {fid: 1}, 1.0, 999, 100,
                      _flow_id_of)
    from rich.console import Console
    console = Console(width=200, record=True)
    console.print(render_table(p, 20))
    text = console.export_text()
    assert "75%" in text and "25%" in text and "app" in text
    empty = build_profile({}, {}, {}, 1.0, 999, 0, _flow_id_of)
    console.print(render_table(empty, 20))
    assert "no receive work was sampled" in console.export_text()
    pytest.importorskip("matplotlib")
    svg = tmp_path / "p.svg"
    write_svg(p, str(svg))
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    assert "data copy" in svg.read_text()
    # a link planted at the name is replaced by the file, its target left alone
    target, planted = tmp_path / "target", tmp_path / "planted.svg"
    target.write_text("kept")
    planted.symlink_to(target)
    write_svg(p, str(planted))
    assert target.read_text() == "kept" and not planted.is_symlink()
    assert "data copy" in planted.read_text()
