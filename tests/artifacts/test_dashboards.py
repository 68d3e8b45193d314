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


def test_moves_and_reverts_are_marked_on_the_overview():
    """steer auto's moves and its reverts as annotations, on the dashboard's own datasource and
    variables, and the verdicts beside the moves in the steering panel."""
    d = dict(dashboards())["steer-overview.json"]
    marks = {a["name"]: a for a in d["annotations"]["list"]}
    assert set(marks) == {"steer auto moves", "steer auto reverts"}
    for a in marks.values():
        assert a["datasource"]["uid"] == "${datasource}" and a["enable"]
        assert 'job=~"$job", instance=~"$instance"' in a["expr"]
    assert 'outcome="reverted"' in marks["steer auto reverts"]["expr"]
    (panel,) = [p for p in d["panels"] if p["title"] == "Steering actions"]
    assert any("steer_auto_move_verdicts_total" in t["expr"] for t in panel["targets"])


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
    and the docs; and not 9435, Cloudflare ebpf_exporter's default."""
    from steer.present.exporter import DEFAULT_LISTEN
    port = DEFAULT_LISTEN.rsplit(":", 1)[1]
    assert port != "9435"
    files = [f"{DASH}/fleet/{n}" for n in ("steer-exporter.service", "steer-exporter.default",
                                            "daemonset.yaml", "prometheus.yml")] \
        + [f"{DASH}/../docs/commands.md", f"{DASH}/../docs/guide/fleet.md", f"{DASH}/../Makefile"]
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


# the fleet files against the schemas of what reads them: Kubernetes (kubernetes-validate carries
# them), prometheus-operator's PodMonitor CRD (its module in the Go module proxy, pinned), and steer's
# own parser for every command line they start
PROMETHEUS_OPERATOR = "v0.85.0"


def _fleet_yaml(name):
    import yaml
    return yaml.safe_load(open(f"{DASH}/fleet/{name}"))


def _strict(schema):
    """kubeconform's --strict for a CRD schema: an object with declared properties takes no
    others (a misspelt field is an error, not something the API server silently drops)."""
    if isinstance(schema, dict):
        if ("properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema = dict(schema, additionalProperties=False)
        return {k: _strict(v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def _podmonitor_schema():
    import urllib.request
    import zipfile
    import yaml
    cache = os.path.join(ROOT, "build", "test-cache", f"prometheus-operator-{PROMETHEUS_OPERATOR}.zip")
    if not os.path.exists(cache):
        url = ("https://proxy.golang.org/github.com/prometheus-operator/prometheus-operator/@v/"
               f"{PROMETHEUS_OPERATOR}.zip")
        with urllib.request.urlopen(url, timeout=120) as r:
            data = r.read()
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        with open(cache + ".tmp", "wb") as f:
            f.write(data)
        os.rename(cache + ".tmp", cache)
    with zipfile.ZipFile(cache) as z:
        crd = yaml.safe_load(z.read(
            f"github.com/prometheus-operator/prometheus-operator@{PROMETHEUS_OPERATOR}/example/"
            "prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml"))
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return _strict(v1["schema"]["openAPIV3Schema"])


@pytest.mark.parametrize("k8s", ["1.25.0", "latest"])
def test_the_daemonset_is_valid_kubernetes(k8s):
    import kubernetes_validate
    from kubernetes_validate.utils import ValidationError
    version = kubernetes_validate.latest_version() if k8s == "latest" else k8s
    ds = _fleet_yaml("daemonset.yaml")
    kubernetes_validate.validate(ds, version, strict=True)
    # and the schema is really applied: a misspelt field fails
    bad = json.loads(json.dumps(ds))
    bad["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesytem"] = True
    with pytest.raises(ValidationError):
        kubernetes_validate.validate(bad, version, strict=True)


@pytest.mark.parametrize("k8s", ["1.25.0", "latest"])
def test_the_daemonset_has_a_privileged_namespace_of_its_own(k8s):
    """The privileged Pod Security level goes to the exporter's namespace alone, and every fleet
    object of it lives there (Prometheus, elsewhere, is what the network policy admits)."""
    import kubernetes_validate
    version = kubernetes_validate.latest_version() if k8s == "latest" else k8s
    ns = _fleet_yaml("namespace.yaml")
    kubernetes_validate.validate(ns, version, strict=True)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    name = ns["metadata"]["name"]
    assert name not in ("default", "kube-system", "monitoring")
    for f in ("daemonset.yaml", "networkpolicy.yaml", "podmonitor.yaml"):
        assert _fleet_yaml(f)["metadata"]["namespace"] == name, f


@pytest.mark.parametrize("k8s", ["1.25.0", "latest"])
def test_the_network_policy_is_valid_and_admits_prometheus_to_the_metrics_port_alone(k8s):
    import kubernetes_validate
    version = kubernetes_validate.latest_version() if k8s == "latest" else k8s
    np = _fleet_yaml("networkpolicy.yaml")
    kubernetes_validate.validate(np, version, strict=True)
    ds = _fleet_yaml("daemonset.yaml")
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert np["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert np["metadata"]["namespace"] == ds["metadata"]["namespace"]
    (rule,) = np["spec"]["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    (peer,) = rule["from"]
    assert set(peer) == {"namespaceSelector", "podSelector"}   # one peer: both must match


def test_the_daemonset_keeps_its_hardening():
    pod = _fleet_yaml("daemonset.yaml")["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] and sc["allowPrivilegeEscalation"] is False
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    # SETUID/SETGID only to become --user, after which every capability is gone
    assert sc["capabilities"] == {"drop": ["ALL"],
                                  "add": ["BPF", "PERFMON", "SYSLOG", "SETUID", "SETGID"]}
    assert c["args"][c["args"].index("--user") + 1] == "nobody"
    assert not pod.get("hostPID") and not pod.get("hostNetwork")
    assert pod["priorityClassName"]
    assert {"startupProbe", "readinessProbe", "livenessProbe"} <= set(c)
    (bpffs,) = [m for m in c["volumeMounts"] if m["mountPath"] == "/sys/fs/bpf"]
    assert bpffs["mountPropagation"] == "HostToContainer" and bpffs["readOnly"] is True
    # /sys read-only too: the exporter writes nothing of the host's
    assert all(m.get("readOnly") for m in c["volumeMounts"]), c["volumeMounts"]
    # the kubelet's log directories name pods and containers: read, never written
    logs = {m["mountPath"]: m for m in c["volumeMounts"] if m["mountPath"].startswith("/var/log")}
    assert set(logs) == {"/var/log/pods", "/var/log/containers"}
    assert all(m["readOnly"] for m in logs.values())


def test_the_podmonitor_is_valid_for_prometheus_operator():
    import jsonschema
    schema = _podmonitor_schema()
    pm = _fleet_yaml("podmonitor.yaml")
    jsonschema.validate(pm, schema)
    bad = json.loads(json.dumps(pm))
    bad["spec"]["podMetricsEndpoints"][0]["prot"] = "metrics"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    # it selects the DaemonSet's pods by their port name
    ds = _fleet_yaml("daemonset.yaml")
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ports = {p["name"] for p in ds["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert {e["port"] for e in pm["spec"]["podMetricsEndpoints"]} <= ports


def _image_config() -> dict[str, list[str]]:
    """The ENTRYPOINT and CMD `make image` gives the image it imports."""
    make = open(f"{DASH}/../Makefile").read()
    return {k: json.loads(v) for k, v in re.findall(r"--change '(ENTRYPOINT|CMD) (\[.*?\])'", make)}


def test_every_command_line_of_the_fleet_files_parses():
    """The DaemonSet's args, the image's CMD and the unit's ExecStart (with its defaults file) are
    command lines steer's own parser accepts; the image is Debian 12 with the package of `make deb`."""
    from steer.cli.main import build_parser
    parser = build_parser()
    make = open(f"{DASH}/../Makefile").read()
    recipe = make[make.index("\nimage: "):]
    assert re.search(r"mmdebstrap .*\n(\t.*\n)*\t\tbookworm ", recipe)   # Debian 12, the package's
    assert "$(DIST)/steer_$(VERSION)_" in recipe   # the package of `make deb`
    config = _image_config()
    assert config["ENTRYPOINT"] == ["/usr/bin/steer"]
    cmd = config["CMD"]
    args = _fleet_yaml("daemonset.yaml")["spec"]["template"]["spec"]["containers"][0]["args"]
    unit = open(f"{DASH}/fleet/steer-exporter.service").read()
    env = dict(re.findall(r"^(\w+)=(.*)$", open(f"{DASH}/fleet/steer-exporter.default").read(), re.M))
    exec_start = re.search(r"^ExecStart=/usr/bin/steer (.*)$", unit, re.M).group(1)
    exec_start = exec_start.replace("${STEER_LISTEN}", env["STEER_LISTEN"]).replace(
        "$STEER_OPTIONS", env["STEER_OPTIONS"]).split()
    assert "EnvironmentFile=-/etc/default/steer-exporter" in unit
    for argv in (cmd, args, exec_start):
        ns = parser.parse_args(argv)
        assert ns.command == "export", argv
