"""Keeps the tables the benchmarks write (bench/results/*.md) current where the docs show them.

A page includes a results file between two markers, and the text between them is that file's,
copied here rather than retyped:

    <!-- include: bench/results/rr.md -->
    ...
    <!-- end include -->

    python -m bench.include            # rewrites every block from its file
    python -m bench.include --check    # exit 1 and name the stale blocks (tests/artifacts/test_docs.py)
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(<!-- include: (?P<path>[^ ]+) -->\n)(?P<body>.*?)(<!-- end include -->)", re.S)


def pages(root: Path = ROOT) -> list[Path]:
    """The pages that may include: README.md and everything under docs/."""
    return [root / "README.md"] + sorted((root / "docs").rglob("*.md"))


def blocks(text: str):
    """(path, body) of each include block of TEXT."""
    return [(m.group("path"), m.group("body")) for m in BLOCK.finditer(text)]


def refresh(text: str, root: Path = ROOT) -> str:
    """TEXT with each block's body replaced by its file's current text."""
    def fill(m):
        body = (root / m.group("path")).read_text()
        return m.group(1) + body.rstrip("\n") + "\n" + m.group(4)
    return BLOCK.sub(fill, text)


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
