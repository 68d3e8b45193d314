"""The rules of an interval (steer.model.interval) have one home: the object path (build_snapshot)
and the two array paths (the exporter's ledger, the auto loop's busy flows) take each rule from
there, and its two forms, on one entry and on columns of many, agree. That the three paths give
the same figures is tests/unit/test_ledger.py's and test_busyflows.py's."""
import ast
import random
import re
from pathlib import Path

import pytest

from helpers import ROOT
from steer.model import interval
from steer.model.flowarrays import FlowArrays, flow_fields, flows_of
from steer.model.numeric import np
from steer.model.samples import FlowCpuSample, FlowId

RULE_NAMES = {name: set(getattr(interval, name)) for name in
              ("COUNTERS", "ACTIVITY", "RESTART_EACH", "KERNEL_TIME", "WILDCARD_DROPS")}


def test_no_module_but_the_rules_spells_a_rule_out():
    """No tuple or list of counter names equal to one of the rules' own, no wildcard test and no
    kernel_ns + kthread_ns anywhere in steer/ but steer/model/interval.py. Checked once against
    the tree before the rules had a home: 13 places, flows.py's ACTIVITY, COUNTERS, restart and
    wildcard tests and kernel-time sums, busyflows' restart fields, restart and wildcard tests,
    the ledger's wildcard test and FlowTotal's sum."""
    found = []
    for path in sorted((Path(ROOT) / "steer").rglob("*.py")):
        if path.name == "interval.py" and path.parent.name == "model":
            continue
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Tuple, ast.List)) and node.elts and all(
                    isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
                names = {e.value for e in node.elts}
                found += [f"{path.name}:{node.lineno} {rule}" for rule, rule_names in RULE_NAMES.items()
                          if names == rule_names]
        for m in re.finditer(r"sport\"?\]?\s*==\s*0|kernel_ns\"?\]?\s*\+\s*\w*[.\[]\"?kthread_ns", text):
            found.append(f"{path.name}:{text.count(chr(10), 0, m.start()) + 1} {m.group(0)}")
    assert not found, found


def _entries(seed, n=400):
    rng = random.Random(seed)
    names = interval.COUNTERS
    flow = FlowId("tcp", "198.18.0.1", 40000, "198.18.0.2", 5201)
    for i in range(n):
        was = FlowCpuSample(flow, i % 4, **{c: rng.randint(0, 5) for c in names})
        now = FlowCpuSample(flow, i % 4, **{c: max(0, getattr(was, c) + rng.choice([-1, 0, 0, 1, 2]))
                                            for c in names})
        yield was, now


@pytest.mark.parametrize("seed", range(3))
def test_a_restart_is_the_same_on_one_entry_and_on_columns(seed):
    pairs = list(_entries(seed))
    was = FlowArrays.of_entries({(w.flow._replace(sport=i), 0): w for i, (w, _) in enumerate(pairs)})
    now = FlowArrays.of_entries({(n.flow._replace(sport=i), 0): n for i, (_, n) in enumerate(pairs)})
    one = [interval.restarted(n.__getattribute__, w.__getattribute__) for w, n in pairs]
    cols = interval.restarted(now.values.__getitem__, was.values.__getitem__)
    assert list(cols) == one
    assert 0 < sum(one) < len(one)   # both answers occur


def test_a_wildcard_is_the_same_as_a_flow_id_and_as_a_key():
    flows = [FlowId("udp", "0.0.0.0", 0, "198.18.0.2", 9000), FlowId("udp", "::", 0, "fd00::2", 9000),
             FlowId("udp", "198.18.0.1", 0, "198.18.0.2", 9000),
             FlowId("udp", "0.0.0.0", 5, "198.18.0.2", 9000),
             FlowId("tcp", "198.18.0.1", 40000, "198.18.0.2", 5201)]
    arrays = FlowArrays.of_entries({(f, 0): FlowCpuSample(f, 0) for f in flows})
    rows = interval.wildcard_rows(flow_fields(flows_of(arrays.keys)))
    assert list(rows) == [interval.is_wildcard(f.src, f.sport) for f in flows] == \
        [True, True, False, False, False]


@pytest.mark.parametrize("seed", range(3))
def test_each_sides_cpu_is_the_same_by_dicts_and_by_rows(seed):
    """interval_cpus over random weights (zeros, ties and missing sides included), with
    dominant() on dicts and dominant_rows() on rows of (flow, CPU)."""
    rng = random.Random(seed)
    weights = ("kernel_time", "rx_skbs", "kthread_ns", "app_ns", "app_calls")
    flows = [{w: {c: rng.choice([0, 0, 1, 2, 2, 3.5]) for c in rng.sample(range(6), rng.randint(1, 4))}
              for w in weights} for _ in range(300)]
    by_dicts = [tuple(cpu for cpu, _ in interval.interval_cpus(
        lambda w, f=f: interval.dominant(f[w]), interval.first_named)) for f in flows]
    cpus = sorted({c for f in flows for w in weights for c in f[w]})
    group = np.repeat(np.arange(len(flows)), len(cpus))
    cpu = np.tile(np.array(cpus), len(flows))
    col = {w: np.array([f[w].get(c, 0.0) for f in flows for c in cpus]) for w in weights}
    by_rows = interval.interval_cpus(lambda w: interval.dominant_rows(group, cpu, col[w], len(flows)),
                                     interval.first_named_rows)
    as_rows = [tuple(None if int(r[i]) < 0 else int(r[i]) for r in by_rows) for i in range(len(flows))]
    assert as_rows == by_dicts
    assert any(None in t for t in by_dicts) and any(None not in t for t in by_dicts)
