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
        assert names[:2] == ["datasource", "instance"], name
        assert d["schemaVersion"] >= 36
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids))
        for p in d["panels"]:
            assert p["datasource"]["uid"] == "${datasource}"
            for t in p["targets"]:
                assert t["datasource"]["uid"] == "${datasource}"
                assert 'instance=~"$instance"' in t["expr"], (name, p["title"])


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
    for expr in re.findall(r"^\s+expr: (steer:\S+ .*)$", text, re.M):
        assert re.fullmatch(r"steer:[\w:]+(\{[^}]*\})? [<>]=? [\d.e+-]+", expr), expr


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
