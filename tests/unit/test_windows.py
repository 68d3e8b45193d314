"""The windows' schedule (steer.trace.windows): parsing --windows, how long each window runs so that
the windows stand for all the time since the first, and the thread that opens and closes them
and serves reads only between them."""
import threading
import time

import pytest

from steer.trace.windows import (FIRST_READ_WAIT, Schedule, WindowRunner, Windows, WindowsError,
                                 parse_windows)

MS = 1_000_000


@pytest.mark.parametrize("text, expected", [
    ("off", None), ("50/500", Windows(0.05, 0.5)), (" 10/10 ", Windows(0.01, 0.01)),
    ("2.5/25", Windows(0.0025, 0.025)),
])
def test_parse(text, expected):
    assert parse_windows(text) == expected


@pytest.mark.parametrize("text, fragment", [
    ("abc", "WINDOW/CYCLE in milliseconds"), ("50", "WINDOW/CYCLE"), ("50/500/5", "WINDOW/CYCLE"),
    ("0/500", "from 1 ms"), ("600/500", "from 1 ms"), ("50/120000", "60000"),
    ("30/100", "whole multiple"), ("nan/500", "from 1 ms"),
])
def test_bad_windows_are_one_line(text, fragment):
    with pytest.raises(WindowsError, match=fragment) as e:
        parse_windows(text)
    assert "\n" not in str(e.value)


def test_scale_is_the_cycle_over_the_window():
    assert Windows(0.05, 0.5).scale == 10 and Windows(0.01, 0.01).scale == 1


def test_on_time_windows_run_their_length_and_open_a_cycle_apart():
    s = Schedule(Windows(0.05, 0.5))
    opened = 1_000 * MS
    for _ in range(5):
        assert s.length(opened) == 50 * MS
        nxt = s.closed(opened + 50 * MS)
        assert nxt == opened + 500 * MS
        opened = nxt
    assert s.represented == 5 * 500 * MS


def test_a_late_opening_is_made_up_by_a_longer_window():
    """Woken 30 ms late: 30 ms that no window stood for, which the next covers by running 3 ms
    longer (each of its ms stands for 10); the one after opens where the two stand for up to, and
    runs its length."""
    s = Schedule(Windows(0.05, 0.5))
    assert s.length(0) == 50 * MS
    nxt = s.closed(50 * MS)
    assert nxt == 500 * MS
    late = nxt + 30 * MS
    assert s.length(late) == 53 * MS
    nxt = s.closed(late + 53 * MS)
    assert nxt == 1030 * MS == s.represented   # all the time since the first opening
    assert s.length(nxt) == 50 * MS


def test_a_window_runs_at_most_twice_its_length():
    s = Schedule(Windows(0.05, 0.5))
    s.length(0)
    s.closed(50 * MS)
    assert s.length(10_000 * MS) == 100 * MS


def test_the_runner_alternates_and_reads_only_between_windows():
    """Windows of 10 ms every 50 ms for ~0.4 s: opened and closed in turn, each read made while
    none is open, the seq counting up, and stop() closing the one open."""
    events, state = [], {"open": False}
    lock = threading.Lock()

    def open_window(seq, scale):
        with lock:
            assert not state["open"]
            state["open"] = True
            events.append(("open", seq, scale))
        return time.monotonic_ns()

    def close_window():
        with lock:
            assert state["open"]
            state["open"] = False
            events.append(("close",))
        return time.monotonic_ns()

    r = WindowRunner(Windows(0.01, 0.05), open_window, close_window)
    r.start()
    reads = []
    for _ in range(4):
        reads.append(r.between_windows(lambda: state["open"], timeout=2))
        time.sleep(0.03)
    r.stop()
    assert r.error is None
    assert reads == [False] * 4
    assert not state["open"]   # stop() closed it
    opens = [e for e in events if e[0] == "open"]
    assert [e[1] for e in opens] == list(range(1, len(opens) + 1)) and len(opens) >= 4
    assert all(e[2] == 5 for e in opens)
    assert [e[0] for e in events] == ["open", "close"] * len(opens)
    with pytest.raises(RuntimeError):
        r.between_windows(lambda: None, timeout=1)


def test_a_first_read_is_taken_before_the_first_window_at_once():
    """A command reads its baseline right after the tracer starts: that read is served before
    any window opens (nothing counted in windows yet), not at the end of the first cycle; with
    no read, the first window opens FIRST_READ_WAIT after the start."""
    events = []

    def open_window(seq, scale):
        events.append(("open", time.monotonic()))
        return time.monotonic_ns()

    cycle = Windows(0.1, 0.5)
    r = WindowRunner(cycle, open_window, lambda: time.monotonic_ns())
    started = time.monotonic()
    r.start()
    seen = r.between_windows(lambda: list(events), timeout=2)
    took = time.monotonic() - started
    r.stop()
    assert seen == [] and took < FIRST_READ_WAIT, (seen, took)
    quiet = WindowRunner(cycle, open_window, lambda: time.monotonic_ns())
    events.clear()
    started = time.monotonic()
    quiet.start()
    time.sleep(FIRST_READ_WAIT + 0.2)
    quiet.stop()
    assert events and events[0][1] - started >= FIRST_READ_WAIT * 0.9, events


def test_a_failing_window_is_said_to_the_readers():
    def open_window(seq, scale):
        raise OSError("the kernel said no")

    r = WindowRunner(Windows(0.01, 0.05), open_window, lambda: time.monotonic_ns())
    r.start()
    r.join(timeout=2)
    assert isinstance(r.error, OSError)
    with pytest.raises(RuntimeError, match="not running"):
        r.between_windows(lambda: None, timeout=1)
