"""bench.unseen: the kernel's own events on top of the tasks where no BPF program runs, read from
its ftrace instance's text, and summed over a window of CLOCK_MONOTONIC time."""
from bench.unseen import UnseenReceive

TRACE = """# tracer: nop
#
#                                _-----=> irqs-off/BH-disabled
          tokio-rt-worker-68      [000] ..s.. 24087.766124: netif_receive_skb: dev=veth-rx skbaddr=ffff88813ad176e0 len=65212
          tokio-rt-worker-68      [000] ..s.. 24087.766256: netif_receive_skb: dev=veth-rx skbaddr=ffff88813ad16ee0 len=1500
     idle-reclaim-89      [001] ..s1. 24088.000001: netif_receive_skb: dev=lo skbaddr=ffff88813ad172e0 len=92
"""


def _reader(tmp_path, text=TRACE):
    (tmp_path / "trace").write_text(text)
    u = UnseenReceive.__new__(UnseenReceive)
    u.dir, u.error = str(tmp_path), None
    return u


def test_each_event_is_read_with_its_monotonic_stamp_and_length(tmp_path):
    u = _reader(tmp_path)
    assert u.events() == [(24087_766124_000, 65212), (24087_766256_000, 1500),
                          (24088_000001_000, 92)]
    assert u.bytes() == 65212 + 1500 + 92


def test_a_window_holds_only_its_own_events(tmp_path):
    u = _reader(tmp_path)
    assert u.bytes(24087_766200_000, 24087_999999_999) == 1500
    assert u.bytes(24088_000001_000) == 92


def test_without_an_instance_there_is_nothing_and_close_is_harmless(tmp_path):
    u = _reader(tmp_path, "# tracer: nop\n")
    assert u.events() == [] and u.bytes() == 0
    u.dir = None
    assert u.events() == []
    u.close()
