"""The docs: README.md a front door under 200 lines, every relative link and anchor of README.md
and docs/ resolving, every page reachable from README.md, every table included from
bench/results/ the current one (python -m bench.include), and every option they give a command
one that command has."""
import os
import re

import pytest

from helpers import ROOT

from bench import include

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _pages():
    return [str(p) for p in include.pages()]


def _anchors(path):
    """GitHub's anchors of a markdown file's headings: lower case, punctuation but - and _ dropped,
    spaces to -, a repeated heading numbered."""
    seen, out = {}, set()
    fence = False
    for line in open(path):
        if line.startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"#{1,6} (.*)", line)
        if m:
            a = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(a, 0)
            seen[a] = n + 1
            out.add(a if n == 0 else f"{a}-{n}")
    return out


def _links(path):
    text = open(path).read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def test_readme_is_a_front_door():
    lines = open(os.path.join(ROOT, "README.md")).read().splitlines()
    assert len(lines) < 200, f"README.md has {len(lines)} lines: move the detail into docs/"
    text = "\n".join(lines)
    # as root (the quick start says so): a fresh Debian has no sudo
    for cmd in ("make demo", "make test"):
        assert f"    {cmd}\n" in text + "\n", cmd
    assert "docs/img/steer-top.svg" in text


@pytest.mark.parametrize("page", _pages(), ids=lambda p: os.path.relpath(p, ROOT))
def test_links_and_anchors_resolve(page):
    broken = []
    for target in _links(page):
        path, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(dest):
            broken.append(f"{target}: no such file")
        elif anchor and dest.endswith(".md") and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, broken


def test_every_page_is_reachable_from_the_readme():
    readme = os.path.join(ROOT, "README.md")
    reached, todo = {readme}, [readme]
    while todo:
        page = todo.pop()
        for target in _links(page):
            path = target.partition("#")[0]
            if path.endswith(".md"):
                dest = os.path.normpath(os.path.join(os.path.dirname(page), path))
                if dest not in reached and os.path.exists(dest):
                    reached.add(dest)
                    todo.append(dest)
    orphans = sorted(os.path.relpath(p, ROOT) for p in _pages() if p not in reached)
    assert not orphans, f"no link leads to {orphans}"


def test_included_tables_are_the_current_results():
    stale = []
    for page in _pages():
        text = open(page).read()
        for path, body in include.blocks(text):
            want = include.source(path).rstrip("\n") + "\n"
            if body != want:
                stale.append(f"{os.path.relpath(page, ROOT)}: {path}")
    assert not stale, f"run python -m bench.include: {stale}"


def test_the_summary_is_made_from_the_results():
    from bench import summary
    assert open(os.path.join(summary.RESULTS, "summary.md")).read() == summary.table(), \
        "run python -m bench.summary, then python -m bench.include"


def test_the_suite_record_is_made_from_its_runs(tmp_path):
    """bench/results/suite*.md are suite.json's tables; a run's record (run.json) adds a row
    with its tiers, failures and figures, and a wall clock that is not minutes:seconds is one
    line."""
    from bench import suite
    runs = suite.load()
    assert open(os.path.join(suite.RESULTS, "suite.md")).read() == suite.table(runs)
    assert open(os.path.join(suite.RESULTS, "suite_figures.md")).read() == suite.figures(runs), \
        "run python -m bench.suite, then python -m bench.include"
    record = {"started": "2026-11-28T16:27:11+0000", "seconds": 1306.8, "commit": "e6d3b23",
              "tiers": {"artifacts": 76.2, "unit": 127.0, "guest": 120.8, "live": 977.2},
              "failures": {"tests/live/test_x.py::test_y": "AssertionError"},
              "figures": {"tests/live/test_x.py::test_z": {"bytes vs iperf3": [0.01, -0.02, 0.02]}}}
    row = suite.row(record, suite._wall("22:16"), "a note")
    assert row["wall"] == 1336 and row["failed"] == ["tests/live/test_x.py::test_y"]
    text = suite.table([row])
    assert "| 2026-11-28 16:27 | e6d3b23 | 22:16 | 21:47 | 76 s | 121 s | 977 s | 127 s | 1 failed |" in text
    assert "| `test_z` | bytes vs iperf3 | -2.0%..+2.0% | +1.00% | +1.00%..+1.00% |" in suite.figures([row])
    with pytest.raises(Exception, match="minutes:seconds"):
        suite._wall("1336")


def test_the_anchor_rule(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Steer flows by hand\n## By policy: `steer auto`\n## `steer flows --json`\n"
                    "```\n# not a heading\n```\n## Steer flows by hand\n")
    assert _anchors(str(page)) == {"steer-flows-by-hand", "by-policy-steer-auto",
                                   "steer-flows---json", "steer-flows-by-hand-1"}


def test_the_summary_says_which_targets_the_default_meets():
    """Met: the whole interval on the target's side; not shown: the median is, the interval
    reaches across; missed: the median is not (a rate at least, a time at most)."""
    from bench.summary import verdict
    rate, time_ = (">=", 0.99), ("<=", 1.01)
    assert verdict({"median": 0.995, "median_ci95": (0.991, 0.999)}, rate) == "met"
    assert verdict({"median": 0.995, "median_ci95": (0.980, 0.999)}, rate) == "not shown"
    assert verdict({"median": 0.985, "median_ci95": (0.980, 0.999)}, rate) == "missed"
    assert verdict({"median": 1.005, "median_ci95": (1.001, 1.009)}, time_) == "met"
    assert verdict({"median": 1.005, "median_ci95": (1.001, 1.020)}, time_) == "not shown"
    assert verdict({"median": 1.015, "median_ci95": None}, time_) == "missed"
    assert verdict({"median": 1.005}, time_) == "met"   # no interval: the median alone
    assert verdict(None, rate) == "-" and verdict({"median": None}, rate) == "-"


def _command_options():
    """{command: its option strings}, from the parser itself (subcommands' own parsers)."""
    import argparse
    from steer.cli.main import build_parser
    p = build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return {name: {s for a in sp._actions for s in a.option_strings}
            for name, sp in sub.choices.items()}


# `steer COMMAND ... --flag`: in inline code or a code block, up to the end of the line or the
# closing backtick; a shell comment ends it
_USE = re.compile(r"(?:^|[`\s(])steer ([a-z]+)((?:[^`\n#|])*)", re.M)


def test_every_option_the_docs_give_a_command_is_the_commands():
    """A docs-CLI check: each `steer COMMAND --flag` written in README.md and docs/ names an
    option that COMMAND's parser has (a renamed or removed option would otherwise live on in
    the docs)."""
    options = _command_options()
    wrong = []
    for page in _pages():
        for m in _USE.finditer(open(page).read()):
            cmd, rest = m.group(1), m.group(2)
            if cmd not in options:
                continue   # "steer is ...", prose
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest):
                if flag not in options[cmd] and flag != "--help":
                    wrong.append(f"{os.path.relpath(page, ROOT)}: steer {cmd} {flag}")
    assert not wrong, sorted(set(wrong))


def test_every_command_has_a_section_with_its_generated_synopsis():
    """docs/commands.md: a section for each command of the parser, each opening
    with the synopsis bench.include generates from the parser (test_included_tables_are_the_
    current_results holds it to the parser's options), and the tracer's options likewise."""
    from steer.cli.main import build_parser
    from steer.cli.manual import commands
    text = open(os.path.join(ROOT, "docs/commands.md")).read()
    sections = re.findall(r"^## steer ([a-z]+)\n\n<!-- include: synopsis ([a-z]+) -->", text, re.M)
    assert all(heading == included for heading, included in sections), sections
    assert sorted(n for n, _ in sections) == sorted(commands(build_parser()))
    assert "<!-- include: synopsis tracer -->" in text


def test_the_docs_state_the_present():
    """No date, issue number or commit in the prose of README.md and docs/: history is in
    CHANGELOG.md, readings in bench/results/ (whose pages, included, say when and where they
    were measured). docs/kernels.md is generated whole by `make test-kernels`, its date with it."""
    dated = []
    for page in _pages():
        if page.endswith("docs/kernels.md"):
            continue
        text = include.BLOCK.sub("", open(page).read())
        for m in re.finditer(r"\b20\d\d-\d\d-\d\d\b|\bissues? #?\d+|\bcommit [0-9a-f]{7}\b", text):
            dated.append(f"{os.path.relpath(page, ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}")
    assert not dated, dated
