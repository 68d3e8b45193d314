"""The suite's record of itself (tests/support/record.py): tiers from test ids, a history file
with a torn line, and the line that sets a failure beside the earlier runs."""
import json
import os

from record import held_figures, odds_of, odds_report, past_of, read_history, tier_of


def test_the_tier_is_the_folder_under_tests():
    assert tier_of("tests/live/test_live.py::test_x[a/b]") == "live"
    assert tier_of("tests/guest/test_guest_live.py::test_y") == "guest"
    assert tier_of("other.py::test_z") == "other.py"


def test_a_torn_or_foreign_line_of_the_history_is_passed_over(tmp_path):
    path = tmp_path / "history.jsonl"
    runs = [{"tests": {"t::a": ["passed", 1.0]}}, {"tests": {"t::a": ["failed", 3.0]}}]
    path.write_text(json.dumps(runs[0]) + "\n" + '{"tests": {"t::a": ["pa' + "\n"
                    + "[1, 2]\n" + json.dumps(runs[1]) + "\n")
    assert read_history(str(path)) == runs
    assert read_history(str(path), limit=1) == runs[1:]
    assert read_history(str(tmp_path / "none")) == [] and read_history(None) == []


def test_a_failure_is_told_with_its_past():
    runs = [{"tests": {"t::a": ["passed", 2.0], "t::b": ["passed", 1.0]}},
            {"tests": {"t::a": ["failed", 9.0]}},
            {"tests": {"t::a": ["passed", 4.0]}}]
    assert past_of("t::a", runs) == "failed in 1 of the 3 earlier runs that ran it, 3.0 s when it passed"
    assert past_of("t::b", runs) == "failed in 0 of the 1 earlier runs that ran it, 1.0 s when it passed"
    assert past_of("t::c", runs) == "not in the history"


def test_held_figures_are_read_back_with_the_chance_their_spread_gives():
    # a figure at -0.10 +- 0.01 over 20 runs, bounds -0.15..+0.05: 5 sd from the nearer bound
    values = [-0.10 + 0.01 * x for x in (-1.5, -1, -0.5, 0, 0.5, 1, 1.5) * 3][:20]
    runs = [{"tests": {}, "figures": {"t::a": {"f": [v, -0.15, 0.05]}}} for v in values]
    runs.append({"tests": {}})   # a run from before figures were kept
    assert list(held_figures(runs)) == [("t::a", "f")]
    o = odds_of(values, -0.15, 0.05)
    assert o["n"] == 20 and o["outside"] == 0
    assert 0.009 < o["sd"] < 0.011
    # the spread's upper confidence bound (~1.4x for 20 values) makes it 3.5 sd, not 5
    assert 3.0 < o["margin"] < 4.0 and 1e-5 < o["chance"] < 1e-3
    # a bound that figures cross in runs is counted, and the chance says so
    bad = odds_of(values, -0.105, 0.05)
    assert bad["outside"] > 0 and bad["chance"] > 0.3
    assert odds_of(values[:2], -0.15, 0.05)["chance"] is None
    (line,) = odds_report(runs)
    assert line.startswith("t::a f: 20 runs, mean -0.10") and "0 outside" in line
    assert odds_report(runs, match="nothing") == []


def test_a_failures_message_is_kept_in_the_record():
    """The message a failure ended with goes into run.json, so that the next failure of that
    test can be set beside it (the first one's is kept when setup and call both fail)."""
    from types import SimpleNamespace
    from record import Recorder
    r = Recorder()
    crash = SimpleNamespace(reprcrash=SimpleNamespace(message="AssertionError: 0.91 >= 0.95"))
    r.pytest_runtest_logreport(SimpleNamespace(nodeid="tests/live/x.py::t", duration=1.0,
                                               user_properties=[], failed=True, skipped=False,
                                               when="call", longrepr=crash))
    r.pytest_runtest_logreport(SimpleNamespace(nodeid="tests/live/x.py::t", duration=0.1,
                                               user_properties=[], failed=True, skipped=False,
                                               when="teardown", longrepr="teardown broke"))
    assert r.why == {"tests/live/x.py::t": "AssertionError: 0.91 >= 0.95"}
    assert r.outcome == {"tests/live/x.py::t": "error"}


def test_the_steal_during_a_tests_call_is_recorded(monkeypatch):
    """The host's steal between a test's setup and the end of its call is that test's; a test
    that saw none has no entry, and steal_seconds reads /proc/stat's eighth column (seconds)."""
    from types import SimpleNamespace
    import record
    readings = iter([10.0, 10.0, 10.0, 10.0, 10.5])   # start; a: setup, call; b: setup, call
    monkeypatch.setattr(record, "steal_seconds", lambda: next(readings))
    r = record.Recorder()

    def report(nodeid, when):
        r.pytest_runtest_logreport(SimpleNamespace(nodeid=nodeid, duration=1.0, when=when,
                                                   user_properties=[], failed=False,
                                                   skipped=False, longrepr=None))
    for nodeid in ("a", "b"):
        report(nodeid, "setup")
        report(nodeid, "call")
    assert r.steal == {"b": 0.5}
    monkeypatch.undo()
    with open("/proc/stat") as f:
        ticks = int(f.readline().split()[8])
    assert abs(record.steal_seconds() - ticks / os.sysconf("SC_CLK_TCK")) < 1.0


def test_the_idle_cpu_time_from_a_tests_setup_to_its_teardown_is_recorded(monkeypatch):
    """A test's idle CPU-seconds run from its start (before setup) to its end (after
    teardown); idle_seconds reads /proc/stat's idle and iowait columns."""
    import record
    readings = iter([100.0, 101.5, 101.5, 101.5])
    monkeypatch.setattr(record, "idle_seconds", lambda: next(readings))
    r = record.Recorder()
    for nodeid in ("a", "b"):
        r.pytest_runtest_logstart(nodeid, None)
        r.pytest_runtest_logfinish(nodeid, None)
    assert r.idle == {"a": 1.5, "b": 0.0}
    monkeypatch.undo()
    with open("/proc/stat") as f:
        fields = f.readline().split()
    ticks = int(fields[4]) + int(fields[5])
    assert abs(record.idle_seconds() - ticks / os.sysconf("SC_CLK_TCK")) < 2.0 * os.cpu_count()
