"""What a sweep of the host expects of a move: by its cells where it measured them, else by its
class medians; logged beside the move by steer auto --expect-from."""
import json

import pytest

from steer.model.topology import read_topology
from steer.steering.auto import AutoSteer
from steer.steering.expectations import ExpectationError, SweepExpectations
from steer.steering.policies import Decision
from sysfs import xeon_2s_smt
from test_policies import flow, snap


def cell(k, a, gbps, **kw):
    return {"kernel_cpu": k, "app_cpu": a, "flows": 1, "setting": {}, "throughput_bps": gbps * 1e9,
            **kw}


@pytest.fixture
def topo(tmp_path):
    # 2 sockets x 12 cores, SMT: CPUs 0-11 and 24-35 on socket 0
    return read_topology(xeon_2s_smt(str(tmp_path / "sys")))


def test_cells_where_measured_else_class_medians(topo):
    results = {"host": {"hostname": "other"}, "cells": [
        cell(0, 0, 22.0), cell(1, 0, 35.0), cell(12, 0, 26.0), cell(2, 0, 33.0),
        # not the one-flow matrix under the device as found: left out
        cell(1, 0, 99.0, flows=8), cell(1, 0, 99.0, setting={"offloads": {"gro": "off"}})]}
    e = SweepExpectations(results, topo)
    assert e.other_host == "other"
    x = e.of(0, 1, 0)
    assert (x.basis, x.before_bps, x.after_bps) == ("cells", 22e9, 35e9)
    assert round(x.ratio, 3) == 1.591 and "cell 1:0 at 35.00 Gbit/s, cell 0:0 at 22.00" in x.text()
    # reader on CPU 3, never swept: its classes' medians (same-socket: 35 and 33)
    x = e.of(3, 4, 3)
    assert (x.basis, x.before, x.after) == ("classes", "class same-core", "class same-socket")
    assert (x.before_bps, x.after_bps) == (22e9, 34e9)
    assert x.fields() == {"expected_ratio": 1.545, "expected_basis": "classes",
                          "expected_before_bps": 22e9, "expected_after_bps": 34e9}
    assert e.of(None, 1, 0) is None and e.of(0, 1, None) is None


def test_a_class_the_sweep_never_measured_expects_nothing(topo):
    e = SweepExpectations({"cells": [cell(0, 0, 22.0)]}, topo)
    assert e.of(0, 12, 0) is None


@pytest.mark.parametrize("content, fragment", [
    ("{", "not a sweep's results.json"), ("[]", "not a sweep's results.json"),
    ('{"cells": []}', "no one-flow cell with a throughput"),
    ('{"cells": [{"kernel_cpu": "x", "app_cpu": 0, "throughput_bps": 1}]}', "no one-flow cell"),
])
def test_what_is_not_a_sweep_is_one_line(tmp_path, topo, content, fragment):
    (tmp_path / "results.json").write_text(content)
    with pytest.raises(ExpectationError, match=fragment) as e:
        SweepExpectations.load(str(tmp_path), topo)
    assert "\n" not in str(e.value)
    with pytest.raises(ExpectationError, match="No such file"):
        SweepExpectations.load(str(tmp_path / "none"), topo)


def test_auto_logs_the_expectation_beside_the_move(tmp_path, topo):
    (tmp_path / "results.json").write_text(json.dumps({"cells": [cell(0, 0, 22.0),
                                                                  cell(1, 0, 35.0)]}))
    expect = SweepExpectations.load(str(tmp_path), topo)
    f = flow(1, 0, 0).flow
    calls = []
    eng = AutoSteer(lambda s, t: [Decision(f, 1, "test")], None, topo, confirm=1,
                    log=lambda m, **fields: calls.append((m, fields)), expect=expect)
    eng.step(snap([flow(1, 0, 0)], ncpu=48), now=0.0)
    ((msg, fields),) = calls
    assert msg.endswith("(dry run); the sweep measured cell 1:0 at 35.00 Gbit/s, cell 0:0 at "
                        "22.00: x1.59"), msg
    assert fields["expected_ratio"] == 1.591 and fields["expected_basis"] == "cells"
