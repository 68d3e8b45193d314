"""Dashboards and rules as files: generated JSON is committed as generated, every panel uses the
datasource and instance variables, the rules pass promtool's checks and unit tests."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from helpers import ROOT

DASH = os.path.join(ROOT, "dashboards")
sys.path.insert(0, DASH)
import generate  # noqa: E402

promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                              reason="promtool not installed (Debian package prometheus)")


def dashboards():
    for name in generate.DASHBOARDS:
        with open(os.path.join(DASH, name)) as f:
            yield name, json.load(f)


def panel_exprs():
    """(dashboard, panel title, PromQL) of every target of every panel."""
    for name, d in dashboards():
        for p in d["panels"]:
            for t in p["targets"]:
                yield name, p["title"], t["expr"]


@pytest.mark.parametrize("name", sorted(generate.DASHBOARDS))
def test_committed_json_is_what_the_generator_writes(name):
    with open(os.path.join(DASH, name)) as f:
        assert f.read() == generate.render(generate.DASHBOARDS[name]), \
            "run dashboards/generate.py and commit the result"


def test_panels_use_the_variables():
    for name, d in dashboards():
        names = [v["name"] for v in d["templating"]["list"]]
        assert names[:3] == ["datasource", "job", "instance"], name
        assert d["schemaVersion"] >= 36
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids))
        for p in d["panels"]:
            assert p["datasource"]["uid"] == "${datasource}"
            for t in p["targets"]:
                assert t["datasource"]["uid"] == "${datasource}"
                assert 'job=~"$job", instance=~"$instance"' in t["expr"], (name, p["title"])


def test_every_panel_has_a_description_and_one_unit():
    for name, d in dashboards():
        for p in d["panels"]:
            assert len(p.get("description", "")) > 20, (name, p["title"])
            if p["type"] == "timeseries":
                assert p["fieldConfig"]["defaults"]["unit"], (name, p["title"])
                assert not [o for o in p["fieldConfig"]["overrides"]
                            if any(pr["id"] == "unit" for pr in o.get("properties", []))]


def test_overview_has_the_panels_the_issue_asks_for():
    titles = {p["title"] for p in dict(dashboards())["steer-overview.json"]["panels"]}
    for want in ("Receive throughput by affinity class", "CPU-seconds per GB by class",
                 "Per-CPU kernel vs application receive time", "Steering actions"):
        assert want in titles


@promtool
def test_rules_check_and_unit_tests():
    r = subprocess.run(["promtool", "check", "rules", "steer.rules.yml"], cwd=f"{DASH}/rules",
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(["promtool", "test", "rules", "steer.rules.test.yml"], cwd=f"{DASH}/rules",
                       capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


@promtool
def test_fleet_scrape_config_is_valid(tmp_path):
    cfg = open(f"{DASH}/fleet/prometheus.yml").read()
    cfg = cfg.replace("/etc/prometheus/rules/steer.rules.yml", f"{DASH}/rules/steer.rules.yml")
    (tmp_path / "p.yml").write_text(cfg)
    r = subprocess.run(["promtool", "check", "config", str(tmp_path / "p.yml")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_alerts_compare_one_recorded_series():
    """So that the live test can evaluate each alert's signal without its threshold."""
    text = open(f"{DASH}/rules/steer.rules.yml").read()
    exprs = re.findall(r"^\s+- alert: \S+\n(?:\s+#.*\n)*\s+expr: (.*)$", text, re.M)
    assert len(exprs) == text.count("- alert:")
    for expr in exprs:
        assert re.fullmatch(r"\w+:steer_\w+:\w+(\{[^}]*\})? [<>]=? [\d.e+-]+", expr), expr


def test_the_fleet_files_use_the_exporters_default_port():
    """One port everywhere: the exporter's default, the unit, the DaemonSet, the scrape config
    and the README; and not 9435, Cloudflare ebpf_exporter's default."""
    from steer.exporter import DEFAULT_LISTEN
    port = DEFAULT_LISTEN.rsplit(":", 1)[1]
    assert port != "9435"
    files = [f"{DASH}/fleet/{n}" for n in ("steer-exporter.service", "daemonset.yaml",
                                            "prometheus.yml")] + [f"{DASH}/../README.md"]
    for path in files:
        text = open(path).read()
        ports = set(re.findall(r"\b(9[0-9]{3})\b", text)) - {"9090"}   # 9090: Prometheus itself
        assert ports == {port}, (path, ports)


def _rule_groups():
    """The rules as dicts (record or alert, expr, annotations), read from the file's regular layout
    (one rule per `- record:`/`- alert:` item; PyYAML is not a dependency of the suite)."""
    text = open(f"{DASH}/rules/steer.rules.yml").read()
    rules = []
    for block in re.split(r"\n(?=\s+- (?:record|alert): )", text)[1:]:
        kind, name = re.match(r"\s+- (record|alert): (\S+)", block).groups()
        expr = re.search(r"expr: >?\s*((?:.|\n)*?)(?=\n\s+(?:for|labels|annotations):|\n\n|\Z)", block)
        expr = " ".join(l.strip() for l in expr.group(1).splitlines() if not l.strip().startswith("#"))
        ann = dict(re.findall(r'^\s+(summary|description|runbook_url): "(.*)"$', block, re.M))
        rules.append({kind: name, "expr": expr, "annotations": ann})
    return rules


def test_recorded_series_follow_the_naming_practice_and_keep_job():
    """level:metric:operations, and `job` in every aggregation, as the node-mixin does."""
    for rule in (r for r in _rule_groups() if "record" in r):
        level, metric, ops = rule["record"].split(":")
        assert level and metric.startswith("steer_") and ops, rule["record"]
        for by in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", rule["expr"]):
            assert "job" in [l.strip() for l in by.split(",")], (rule["record"], by)
            # the level names the labels kept (besides job)
            if re.search(r"\bby\b", rule["expr"]):
                kept = [l.strip() for l in by.split(",") if l.strip() != "job"]
                assert level.split("_")[0] == kept[0], (rule["record"], kept)


def test_every_alert_has_summary_description_with_its_value_and_a_runbook_section():
    runbook = open(f"{DASH}/../docs/runbook.md").read()
    anchors = {h.strip().lower().replace(" ", "-") for h in re.findall(r"^## (.+)$", runbook, re.M)}
    alerts = [r for r in _rule_groups() if "alert" in r]
    assert alerts
    for rule in alerts:
        ann = rule["annotations"]
        assert ann["summary"], rule["alert"]
        assert "$value" in ann["description"], rule["alert"]
        url, _, anchor = ann["runbook_url"].partition("#")
        assert url.endswith("/runbook.md") and anchor == rule["alert"].lower(), ann["runbook_url"]
        assert anchor in anchors, f"docs/runbook.md has no section {rule['alert']}"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_the_exporter_unit_is_hardened():
    """systemd's own exposure score for the unit, offline (no systemd needed as PID 1): below 4.0
    (OK), with only the capabilities the exporter uses."""
    r = subprocess.run(["systemd-analyze", "security", "--offline=yes",
                        f"{DASH}/fleet/steer-exporter.service"], capture_output=True, text=True)
    m = re.search(r"Overall exposure level for \S+: ([\d.]+)", r.stdout)
    assert m, r.stdout + r.stderr
    print(m.group(0))
    assert float(m.group(1)) < 4.0
    unit = open(f"{DASH}/fleet/steer-exporter.service").read()
    assert "CapabilityBoundingSet=CAP_BPF CAP_PERFMON CAP_SYSLOG\n" in unit
