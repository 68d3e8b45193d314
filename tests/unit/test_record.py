"""The suite's record of itself (tests/support/record.py): tiers from test ids, a history file
with a torn line, and the line that sets a failure beside the earlier runs."""
import json

from record import past_of, read_history, tier_of


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
