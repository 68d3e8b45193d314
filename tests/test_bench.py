"""The benchmarks' smoke mode: each one runs end to end and writes its JSON and table. The
measurements themselves are `python -m bench.NAME` without --smoke (README, Performance)."""
import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT, live

pytestmark = live
BENCHES = ["overhead", "rr", "syscall_tax", "roundtrip", "event_cost", "steering_cost", "scale",
           "peer", "fuzz"]


@pytest.mark.parametrize("name", BENCHES)
def test_smoke(name, tmp_path):
    r = subprocess.run([sys.executable, "-m", f"bench.{name}", "--smoke", "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    data = json.load(open(tmp_path / f"{name}.json"))
    assert data["benchmark"] == name and data["smoke"] is True
    table = open(tmp_path / f"{name}.md").read()
    assert table.startswith("### ") and "|---" in table
