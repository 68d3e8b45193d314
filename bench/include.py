"""Keeps the tables the benchmarks write (bench/results/*.md) current where the docs show them.

A page includes a results file between two markers, and the text between them is that file's,
copied here rather than retyped:

    <!-- include: bench/results/rr.md -->
    ...
    <!-- end include -->

or a command's synopsis, generated from steer's parser (steer.cli.manual.synopsis) as the man
page is, in a code block: `<!-- include: synopsis pin -->`.

    python -m bench.include            # rewrites every block from its file
    python -m bench.include --check    # exit 1 and name the stale blocks (tests/artifacts/test_docs.py)
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(<!-- include: (?P<path>[^ >]+|synopsis [a-z]+) -->\n)(?P<body>.*?)(<!-- end include -->)",
                   re.S)


def pages(root: Path = ROOT) -> list[Path]:
    """The pages that may include: README.md and everything under docs/."""
    return [root / "README.md"] + sorted((root / "docs").rglob("*.md"))


def blocks(text: str):
    """(path, body) of each include block of TEXT."""
    return [(m.group("path"), m.group("body")) for m in BLOCK.finditer(text)]


def refresh(text: str, root: Path = ROOT) -> str:
    """TEXT with each block's body replaced by its file's current text."""
    def fill(m):
        return m.group(1) + source(m.group("path"), root).rstrip("\n") + "\n" + m.group(4)
    return BLOCK.sub(fill, text)


def source(name: str, root: Path = ROOT) -> str:
    """What an include block named NAME holds: a file's text, or a command's synopsis."""
    if name.startswith("synopsis "):
        from steer.cli.main import build_parser
        from steer.cli.manual import synopsis
        return "```\n" + synopsis(build_parser(), name.split()[1]) + "\n```\n"
    return (root / name).read_text()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Copy bench/results tables into the docs that include them.")
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is stale")
    args = p.parse_args(argv)
    stale = []
    for page in pages():
        text = page.read_text()
        try:
            new = refresh(text)
        except FileNotFoundError as e:
            print(f"bench.include: {page.relative_to(ROOT)} includes a missing file: {e.filename}",
                  file=sys.stderr)
            return 1
        if new != text:
            stale.append(str(page.relative_to(ROOT)))
            if not args.check:
                page.write_text(new)
    if stale:
        print(("stale: " if args.check else "refreshed: ") + ", ".join(stale),
              file=sys.stderr if args.check else sys.stdout)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
