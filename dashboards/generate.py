#!/usr/bin/env python3
"""Writes the Grafana dashboards of steer (steer-overview.json, steer-flows.json) beside this file.

The JSON files are committed, so Grafana needs nothing but them; this generator keeps the panels
consistent (one datasource variable, job and instance variables, the same rate interval, one
unit and a description on every panel), and a test
checks that the committed files are what it writes. Run it after editing the panels below.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DS = {"type": "prometheus", "uid": "${datasource}"}
INST = 'job=~"$job", instance=~"$instance"'
RATE = "$__rate_interval"


def target(expr, legend, ref, **extra):
    return {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": ref, **extra}


def timeseries(pid, title, targets, unit, x, y, w=12, h=8, description=""):
    return {"id": pid, "type": "timeseries", "title": title, "description": description,
            "datasource": DS, "gridPos": {"x": x, "y": y, "w": w, "h": h},
            "fieldConfig": {"defaults": {"unit": unit, "custom": {"fillOpacity": 10}},
                            "overrides": []},
            "options": {"legend": {"displayMode": "table", "placement": "bottom",
                                   "calcs": ["mean", "max"]},
                        "tooltip": {"mode": "multi", "sort": "desc"}},
            "targets": targets}


def variables(extra=()):
    return {"list": [
        {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
         "current": {}, "hide": 0},
        # job first, as the node-mixin does: two Prometheus jobs (or clusters) scraping steer
        {"name": "job", "label": "job", "type": "query", "datasource": DS,
         "query": {"query": "label_values(steer_tracer_flow_entries, job)", "refId": "job"},
         "definition": "label_values(steer_tracer_flow_entries, job)", "refresh": 2,
         "multi": True, "includeAll": True, "allValue": ".*", "current": {}, "hide": 0,
         "sort": 1},
        {"name": "instance", "label": "host", "type": "query", "datasource": DS,
         "query": {"query": 'label_values(steer_tracer_flow_entries{job=~"$job"}, instance)',
                   "refId": "inst"},
         "definition": 'label_values(steer_tracer_flow_entries{job=~"$job"}, instance)',
         "refresh": 2,
         "multi": True, "includeAll": True, "allValue": ".*", "current": {}, "hide": 0,
         "sort": 1},
        *extra]}


def dashboard(uid, title, description, panels, templating, links=(), annotations=()):
    return {"uid": uid, "title": title, "description": description, "tags": ["steer", "network"],
            "schemaVersion": 39, "version": 1, "editable": True, "graphTooltip": 1,
            "time": {"from": "now-30m", "to": "now"}, "refresh": "10s", "timezone": "",
            "templating": templating, "annotations": {"list": list(annotations)},
            "links": list(links), "panels": panels}


def annotation(name, expr, color, text):
    """A Prometheus annotation: a mark on every time panel wherever EXPR has a value."""
    return {"name": name, "datasource": DS, "enable": True, "iconColor": color, "expr": expr,
            "step": "10s", "titleFormat": name, "textFormat": text, "useValueForTime": False}


# steer auto's moves and their verdicts, marked on the overview's time panels
MOVE_ANNOTATIONS = (
    annotation("steer auto moves",
               f"sum by (instance, policy) (increase(steer_auto_moves_total{{{INST}}}[1m])) > 0",
               "blue", "{{instance}}: flows moved by {{policy}}"),
    annotation("steer auto reverts",
               f'sum by (instance, policy) (increase(steer_auto_move_verdicts_total{{{INST}, '
               f'outcome="reverted"}}[1m])) > 0',
               "red", "{{instance}}: moves put back by {{policy}} (they made things worse)"))


# a figure the kernel's refusals cost, not one an option turned off (steer.model.samples.lost_to_kernel)
LOST = 'state!="works", why=~".*(refused|this kernel).*"'


def degraded_table(pid, x, y):
    """The hosts whose kernel refused programs steer needs, each figure lost and why."""
    return {"id": pid, "type": "table", "title": "Hosts whose kernel limits steer",
            "datasource": DS,
            "description": "Each figure a host's kernel costs steer (degraded: partly measured; "
                           "missing: not at all) and why: the BPF programs it refused or lacks. "
                           "`steer check` on the host says what would change it. Empty: every "
                           "host measures everything.",
            "gridPos": {"x": x, "y": y, "w": 24, "h": 7},
            "targets": [target(f"steer_figure_info{{{INST}, {LOST}}}", "", "A", format="table",
                               instant=True)],
            "transformations": [{"id": "organize", "options": {
                "excludeByName": {"Time": True, "Value": True, "__name__": True, "job": True},
                "indexByName": {"instance": 0, "figure": 1, "state": 2, "why": 3}}}],
            "fieldConfig": {"defaults": {}, "overrides": []}, "options": {"showHeader": True}}


def overview():
    by_class_bytes = f"sum by (class) (rate(steer_class_rx_bytes_total{{{INST}}}[{RATE}]))"
    panels = [
        timeseries(1, "Receive throughput by affinity class", [
            target(f"{by_class_bytes} * 8", "{{class}}", "A")], "bps", 0, 0,
            description="Where the flows' kernel receive work runs relative to their reader: "
                        "same core, same socket, cross socket."),
        timeseries(2, "CPU-seconds per GB by class", [
            target(f"sum by (class) (rate(steer_class_kernel_seconds_total{{{INST}}}[{RATE}])) / "
                   f"({by_class_bytes} / 1e9)", "kernel {{class}}", "A"),
            target(f"sum by (class) (rate(steer_class_app_seconds_total{{{INST}}}[{RATE}])) / "
                   f"({by_class_bytes} / 1e9)", "app {{class}}", "B")], "s", 12, 0,
            description="Receive cost on each side; the papers found same-core the costliest."),
        timeseries(3, "Per-CPU kernel vs application receive time", [
            target(f"sum by (instance, cpu) (rate(steer_cpu_kernel_seconds_total{{{INST}}}[{RATE}]))",
                   "kernel {{instance}} cpu{{cpu}}", "A"),
            target(f"sum by (instance, cpu) (rate(steer_cpu_app_seconds_total{{{INST}}}[{RATE}]))",
                   "app {{instance}} cpu{{cpu}}", "B")], "percentunit", 0, 8,
            description="Share of each CPU spent in NET_RX softirq + cpumap kthread, and in "
                        "receive syscalls."),
        timeseries(4, "Steering actions", [
            target(f"sum by (instance, policy) (increase(steer_auto_moves_total{{{INST}}}[{RATE}]))",
                   "moves {{instance}} {{policy}}", "A"),
            target(f"sum by (instance, policy, outcome) (increase(steer_auto_move_verdicts_total"
                   f"{{{INST}}}[{RATE}]))", "{{outcome}} {{instance}} {{policy}}", "B")],
            "short", 12, 8, w=6,
            description="Flows moved by steer auto in each interval, by policy, and the moves "
                        "judged: kept, reverted (put back: they made things worse), "
                        "inconclusive, ended before their verdict."),
        timeseries(8, "Packets steered by each rule", [
            target(f"sum by (instance, dev, rule, cpu) (rate(steer_rule_packets_total{{{INST}}}[{RATE}]))",
                   "{{dev}} {{rule}} -> cpu{{cpu}}", "A")], "pps", 18, 8, w=6,
            description="Packets a second that each pinned XDP rule redirects to its CPU."),
        timeseries(5, "Flows by class", [
            target(f"sum by (class) (steer_class_flows{{{INST}}})", "{{class}}", "A")], "short", 0, 16,
            w=8, description="Flows with traffic in the last 10 s, by the class of their placement."),
        timeseries(6, "Unattributed NET_RX time", [
            target(f"sum by (instance) (rate(steer_cpu_net_rx_unattributed_seconds_total{{{INST}}}[{RATE}])) / "
                   f"sum by (instance) (rate(steer_cpu_kernel_seconds_total{{{INST}, context=\"softirq\"}}[{RATE}]))",
                   "{{instance}}", "A")], "percentunit", 8, 16, w=8,
            description="NET_RX time with no TCP/UDP packet to charge: other protocols, or "
                        "driver work without packets."),
        timeseries(7, "Flow map fill", [
            target(f"steer_tracer_flow_entries{{{INST}}} / steer_tracer_flow_entries_max{{{INST}}}",
                   "{{instance}}", "A")], "percentunit", 16, 16, w=4,
            description="Entries of the tracer's flow map in use, of --max-flows."),
        timeseries(9, "Evicted and lost", [
            target(f"rate(steer_tracer_evictions_total{{{INST}}}[{RATE}])",
                   "flow map evictions {{instance}}", "A"),
            target(f"sum by (instance, map) (rate(steer_tracer_map_full_total{{{INST}}}[{RATE}]))",
                   "{{map}} map full {{instance}}", "B"),
            target(f"sum by (instance, where) (rate(steer_cpu_cpumap_drops_total{{{INST}}}[{RATE}]))",
                   "cpumap drops at {{where}} {{instance}}", "C"),
            target(f"sum by (instance, structure) "
                   f"(rate(steer_exporter_evictions_total{{{INST}}}[{RATE}]))",
                   "exporter {{structure}} evicted {{instance}}", "D")],
            "ops", 20, 16, w=4,
            description="A second: flow map entries evicted because the map was full (raise "
                        "--max-flows when this stays above 0; alert SteerFlowMapEvicting); NAPI "
                        "polls and profile samples a full map could not count; frames a steering "
                        "cpumap dropped (its queue to the target CPU full, or in the target's "
                        "kthread: the target CPU cannot keep up); entries the exporter's bounded "
                        "memory forgot early."),
        timeseries(10, "LLC hit ratio per CPU (whole CPU)", [
            target(f"1 - sum by (instance, cpu) (rate(steer_cpu_events_total{{{INST}, "
                   f"event=\"llc_misses\"}}[{RATE}])) / sum by (instance, cpu) "
                   f"(rate(steer_cpu_events_total{{{INST}, event=\"llc_references\"}}[{RATE}]))",
                   "{{instance}} cpu{{cpu}}", "A")], "percentunit", 0, 24,
            description="1 - LLC misses / LLC references of everything each CPU ran, as Intel PCM "
                        "reads a core (NDM'13, Fig. 5). Needs a PMU: no data on most VMs."),
        timeseries(11, "Instructions per byte received, by class and side", [
            target(f"sum by (class, side) (rate(steer_class_instructions_total{{{INST}}}[{RATE}])) "
                   f"/ on (class) group_left {by_class_bytes}", "{{side}} {{class}}", "A")],
            "short", 12, 24,
            description="Instructions retired in each side's receive work per byte of payload "
                        "(the follow-up's instructions per Gbps). Needs a PMU and --timing "
                        "sampled."),
        degraded_table(12, 0, 32),
        timeseries(13, "Receive wait by class (p50, p99)", [
            target(f"histogram_quantile(0.5, sum by (class, le) (rate("
                   f"steer_class_receive_wait_seconds_bucket{{{INST}}}[{RATE}])))",
                   "p50 {{class}}", "A"),
            target(f"histogram_quantile(0.99, sum by (class, le) (rate("
                   f"steer_class_receive_wait_seconds_bucket{{{INST}}}[{RATE}])))",
                   "p99 {{class}}", "B")], "s", 0, 40, w=24,
            description="How long received data waits in the host, from its skb reaching the "
                        "stack to the read that takes it, by the placement class of its flow: "
                        "does the same-core placement cost latency as well as throughput? "
                        "Needs steer export --latency (a diagnostic: four programs more)."),
    ]
    return dashboard("steer-overview", "steer: receive placement overview",
                     "Per-class receive throughput and cost, per-CPU time, steering actions.",
                     panels, variables(),
                     links=[{"type": "dashboards", "tags": ["steer"], "title": "steer",
                             "asDropdown": False}],
                     annotations=MOVE_ANNOTATIONS)


# the series of a workload (--flow-labels workload) in the chosen namespaces; a unit's or a
# plain container's namespace is empty, which "All" (.*) takes
WSEL = f'{INST}, workload!="", namespace=~"$namespace"'


def flows():
    sel = f'{INST}, dport=~"$dport"'
    table = {"id": 1, "type": "table", "title": "Top flows: placement", "datasource": DS,
             "description": "The top-K flows by receive rate of each host: where their kernel "
                            "receive work runs most (kernel_cpu), where their packets go up the "
                            "protocol stack (stack_cpu), where their reader runs (app_cpu), and "
                            "the class of that placement (stack_cpu against app_cpu).",
             "gridPos": {"x": 0, "y": 0, "w": 24, "h": 9},
             "targets": [target(f"steer_flow_info{{{sel}}}", "", "A", format="table", instant=True)],
             "transformations": [{"id": "organize", "options": {
                 "excludeByName": {"Time": True, "Value": True, "__name__": True, "job": True},
                 "indexByName": {"instance": 0, "proto": 1, "src": 2, "sport": 3, "dst": 4,
                                 "dport": 5, "kernel_cpu": 6, "stack_cpu": 7, "app_cpu": 8,
                                 "class": 9, "shared_llc": 10, "smt_sibling": 11,
                                 "app_comm": 12}}}],
             "fieldConfig": {"defaults": {}, "overrides": []}, "options": {"showHeader": True}}
    legend = "{{src}}:{{sport}} -> {{dst}}:{{dport}}"
    panels = [
        table,
        timeseries(2, "Flow receive rate", [
            target(f"rate(steer_flow_receive_bytes_total{{{sel}}}[{RATE}]) * 8", legend, "A")],
            "bps", 0, 9, description="Receive rate of each top-K flow, from its byte counter."),
        timeseries(3, "Flow kernel and application CPU", [
            target(f"rate(steer_flow_kernel_seconds_total{{{sel}}}[{RATE}])", "kernel " + legend, "A"),
            target(f"rate(steer_flow_app_seconds_total{{{sel}}}[{RATE}])", "app " + legend, "B")],
            "percentunit", 12, 9,
            description="Share of a CPU each flow's kernel receive processing (NET_RX softirq "
                        "or cpumap kthread) and its reader's receive calls took."),
        timeseries(4, "Flow receive drops", [
            target(f"rate(steer_flow_receive_drops_total{{{sel}}}[{RATE}])", legend, "A")],
            "pps", 0, 17, w=24, h=7,
            description="Received packets of each top-K flow the kernel dropped a second (a "
                        "full socket buffer, a bad checksum, a netfilter rule...): a reader "
                        "starved of CPU, as on a busy shared core, loses packets here first. "
                        "steer flows --json names the kernel's reason."),
        # by workload: the series of `steer export --flow-labels workload` (the others have no
        # workload label, and no series of theirs matches)
        {"id": 5, "type": "table", "title": "Workloads: placement of their flows",
         "datasource": DS,
         "description": "With steer export --flow-labels workload: for each workload (a "
                        "Kubernetes pod's container, a container, a systemd unit) of each host, "
                        "how many of its top flows have each placement class. A pod whose flows "
                        "are same-core or cross-socket is the one to steer.",
         "gridPos": {"x": 0, "y": 24, "w": 24, "h": 8},
         "targets": [target(f"sum by (instance, namespace, pod, container, workload, class) "
                            f"(steer_flow_info{{{WSEL}}})", "", "A", format="table",
                            instant=True)],
         "transformations": [{"id": "organize", "options": {
             "excludeByName": {"Time": True},
             "indexByName": {"instance": 0, "namespace": 1, "pod": 2, "container": 3,
                             "workload": 4, "class": 5, "Value": 6},
             "renameByName": {"Value": "flows"}}}],
         "fieldConfig": {"defaults": {}, "overrides": []}, "options": {"showHeader": True}},
        timeseries(6, "Workload kernel and application CPU", [
            target(f"sum by (instance, workload) (rate(steer_flow_kernel_seconds_total{{{WSEL}}}"
                   f"[{RATE}]))", "kernel {{workload}} {{instance}}", "A"),
            target(f"sum by (instance, workload) (rate(steer_flow_app_seconds_total{{{WSEL}}}"
                   f"[{RATE}]))", "app {{workload}} {{instance}}", "B")],
            "percentunit", 0, 32, w=24,
            description="With steer export --flow-labels workload: the share of a CPU each "
                        "workload's kernel receive work and its readers' receive calls took."),
    ]
    dport = {"name": "dport", "label": "destination port", "type": "query", "datasource": DS,
             "query": {"query": f'label_values(steer_flow_info{{{INST}}}, dport)',
                       "refId": "dport"},
             "definition": f'label_values(steer_flow_info{{{INST}}}, dport)',
             "refresh": 2, "multi": True, "includeAll": True, "allValue": ".*", "current": {},
             "hide": 0, "sort": 3}
    namespace = {"name": "namespace", "label": "namespace", "type": "query", "datasource": DS,
                 "query": {"query": f'label_values(steer_flow_info{{{INST}, pod!=""}}, namespace)',
                           "refId": "namespace"},
                 "definition": f'label_values(steer_flow_info{{{INST}, pod!=""}}, namespace)',
                 "refresh": 2, "multi": True, "includeAll": True, "allValue": ".*",
                 "current": {}, "hide": 0, "sort": 1}
    return dashboard("steer-flows", "steer: flows", "The top-K flows of each host: placement, "
                     "rate and CPU, by destination port; and by workload (pod, container, "
                     "unit).", panels, variables([dport, namespace]))


DASHBOARDS = {"steer-overview.json": overview, "steer-flows.json": flows}


def render(fn) -> str:
    return json.dumps(fn(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    for name, fn in DASHBOARDS.items():
        with open(os.path.join(HERE, name), "w") as f:
            f.write(render(fn))
    sys.exit(0)
