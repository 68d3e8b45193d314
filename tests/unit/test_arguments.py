"""No command-line text gives a traceback: Hypothesis feeds every option that takes a value, and
each parser of ours, arbitrary text. What argparse refuses exits 2 with one line; what our
parsers refuse is a ValueError the commands turn into one line."""
import argparse

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from steer.cli.main import build_parser
from steer.experiment.devsettings import parse_offloads, parse_pause
from steer.model.flowspec import FlowSpec
from steer.model.topology import MAX_CPU, parse_cpulist
from steer.model.units import parse_float, parse_int
from steer.present.exporter import parse_listen
from steer.model.units import parse_rate

# text as it comes from a shell: any characters, numbers in every script, the words float() takes
NUMBERISH = st.one_of(
    st.text(), st.from_regex(r"-?[0-9\u0660-\u0669\uff10-\uff19_]{1,25}", fullmatch=True),
    st.sampled_from(["inf", "-inf", "nan", "1e400", "1e-400", "0x10", "1_000", " 1 ", "4294967297",
                     "9" * 400, "0-1000000000", "1,2,,3", "-", "٣", "²"]),
    st.floats().map(repr), st.integers().map(str))


def _options_with_values():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sorted(sub.choices.items()):
        for a in p._actions:
            if a.option_strings and a.nargs != 0 and a.option_strings[-1].startswith("--"):
                yield name, a.option_strings[-1]


# one parser for every example: argparse keeps no state between parses (steer has no Action of
# its own), and building it 40 times for each of ~120 options took 26 s of the unit tier
PARSER = build_parser()


@pytest.mark.parametrize("command, option", list(_options_with_values()))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=NUMBERISH)
def test_no_option_value_gives_a_traceback(command, option, value):
    try:
        PARSER.parse_args([command, f"{option}={value}"])
    except SystemExit as e:
        assert e.code in (0, 2)


@pytest.mark.parametrize("parse", [parse_cpulist, parse_rate, parse_listen, parse_pause,
                                   parse_offloads, FlowSpec.parse, parse_int, parse_float])
@settings(max_examples=300, deadline=None)
@given(text=NUMBERISH)
def test_our_parsers_refuse_with_a_value_error_only(parse, text):
    try:
        parse(text)
    except ValueError:
        pass


@given(text=NUMBERISH)
def test_a_cpu_list_is_bounded_and_ascii(text):
    try:
        cpus = parse_cpulist(text)
    except ValueError:
        return
    assert all(0 <= c <= MAX_CPU for c in cpus)
    assert all(ch.isascii() for ch in text if ch.isdigit())


@given(text=NUMBERISH)
def test_a_float_is_finite_and_spelled_in_ascii(text):
    try:
        v = parse_float(text)
    except ValueError:
        return
    assert v == v and abs(v) != float("inf") and text.strip().isascii()
