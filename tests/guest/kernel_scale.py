"""#32 item 5, the kernel's part: a real tracer's read and an exporter scrape, timed in each guest
of the tier (4 and 16 vCPUs), where a per-CPU map's lookup copies a value per possible CPU. The
row goes to the console, where tests/guest/vm/run.py keeps it for bench/scale_cpus.py's table."""
import os

import pytest

from bench.scale_cpus import console_line, kernel_row
from steer.model.topology import read_topology

in_a_guest = pytest.mark.skipif(not os.environ.get("STEER_IN_TEST_GUEST"),
                                reason="measures the guests of tests/guest/vm/run.py")


def measure_and_check() -> dict:
    row = kernel_row(flows=1000, repeat=9)
    with open("/dev/console", "w") as console:   # past pytest's capture, to run.py
        console.write(console_line(row))
    print(row)
    assert row["per_cpu_values"] == row["possible_cpus"] >= row["cpus"] == len(read_topology().online)
    # under TCG a read takes tens of ms where this host takes a few; a second is a broken read
    assert 0 < row["cpu_totals_s"] < row["read_s"] < 2 and 0 < row["scrape_s"] < 5
    return row
