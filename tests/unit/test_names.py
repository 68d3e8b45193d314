"""Names from the host and the command line: shown escaped, checked against the kernel's rules
before they reach a path, encoded into file names without collisions."""
import pytest
from hypothesis import given, strategies as st

from steer.model.names import file_part, ifname_error, netns_error, printable


@pytest.mark.parametrize("name, shown", [
    ("iperf3", "iperf3"),
    ("\x1b[31mred", "\\x1b[31mred"),
    ("tab\there", "tab\\x09here"),
    ("c1\x9b", "c1\\x9b"),
    ("rtl\u202eevil", "rtl\\u202eevil"),
    ("zero\u200bwidth", "zero\\u200bwidth"),
    ("ünïcode", "ünïcode"),
    ("line\u2028sep\u2029", "line\\u2028sep\\u2029"),
    ("not\udcffutf8", "not\\udcffutf8"),              # a file name's byte 0xff, as Python reads it
    ("tag\U000e0041", "tag\\U000e0041"),
])
def test_printable_escapes_what_a_terminal_acts_on_and_keeps_the_rest(name, shown):
    assert printable(name) == shown


@given(st.text())
def test_printable_output_holds_no_control_character(name):
    out = printable(name)
    assert not any(ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f for c in out)
    out.encode("utf-8")   # no lone surrogate left: a strict UTF-8 terminal takes it
    assert "\u2028" not in out and "\u2029" not in out


@pytest.mark.parametrize("name, ok", [
    ("eth0", True), ("veth-steer1", True), ("a" * 15, True), ("a" * 16, False), ("", False),
    ("..", False), (".", False), ("../../etc", False), ("a/b", False), ("eth0:1", False),
    ("a b", False), ("a\x1b", False), ("é" * 8, False),   # 16 bytes in UTF-8
])
def test_device_names_follow_the_kernels_dev_valid_name(name, ok):
    assert (ifname_error(name) is None) == ok, ifname_error(name)


@pytest.mark.parametrize("name, ok", [
    ("steer-lab", True), ("a@b|c", True), ("x" * 255, True), ("x" * 256, False), ("", False),
    ("..", False), ("a/b", False), ("a\0b", False),
])
def test_namespace_names_are_file_names(name, ok):
    assert (netns_error(name) is None) == ok, netns_error(name)


@given(st.text(min_size=1), st.text(min_size=1))
def test_file_parts_never_hold_separators_and_never_collide(a, b):
    pa, pb = file_part(a), file_part(b)
    assert "/" not in pa and "@" not in pa and "\0" not in pa and pa not in (".", "..")
    assert (pa == pb) == (a == b)
