"""Sweep results -> results.csv and report.md. Pure functions of the results dictionary, so they are
tested on synthetic results."""
from __future__ import annotations

import csv
import io
import statistics

from steer.model.classify import CLASSES, CROSS_SOCKET, SAME_CORE, SAME_SOCKET, Placement
from steer.experiment.devsettings import setting_key, setting_label, settings_of
from steer.model.reports import CpuReport, FlowReport, Snapshot
from steer.steering.policies import llc_peer
from steer.experiment.hostconfig import PAPERS_PRECONDITIONS
from steer.model.topology import Topology, format_cpulist
from steer.model.capabilities import MISSING, Capabilities, Figure
from steer.model.samples import FlowId
from steer.model.latency import WAIT_KEYS
from steer.model.units import figure

# Two measurements of one 40 GbE TCP flow into a dual-socket 6-core Intel Sandy Bridge receiver, by
# the same group; their numbers, on their hardware, shown beside ours and never mixed. NDM'13 gives
# the worst case of each class (Figure 4 and its text); the follow-up measured again with another
# kernel and driver and iperf3 -Z (zero-copy send). They are two columns, not one range.
PAPERS = (
    {"name": "NDM'13",
     "source": "Hanford, Ahuja, Balman, Farrens, Ghosal, Pouyoul, Tierney: Characterizing the impact "
               "of end-system affinities on the end-to-end performance of high-speed flows (NDM'13)",
     "gbps": {SAME_CORE: 22, SAME_SOCKET: 35, CROSS_SOCKET: 26}},
    {"name": "follow-up",
     "source": "Hanford, Ahuja, Farrens, Ghosal, Balman, Pouyoul, Tierney: Analysis of the effect of "
               "core affinity on high-throughput flows (NDM'14): another kernel and driver, iperf3 -Z",
     "gbps": {SAME_CORE: 20, SAME_SOCKET: 39, CROSS_SOCKET: 28}},
)
PAPERS_HARDWARE = "40 GbE, one TCP flow, dual-socket 6-core Intel Sandy Bridge receiver"

# a run's and a cell's PMU figures (None where not counted): each side's LLC hit ratio and
# instructions and cycles per GB, of the flows' own receive work; then the same of everything the
# reader's core ran in the window (its SMT siblings too), as NDM'13 read the core with PCM
COUNTER_KEYS = ("llc_hit_ratio_kernel", "llc_hit_ratio_app", "instructions_kernel_per_gb",
                "instructions_app_per_gb", "cycles_kernel_per_gb", "cycles_app_per_gb",
                "app_core_llc_hit_ratio", "app_core_instructions_per_gb", "app_core_cycles_per_gb")

CSV_FIELDS = ["kernel_cpu", "app_cpu", "flows", "setting", "class", "shared_llc", "smt_sibling",
              "nic_local_kernel", "nic_local_app", "throughput_bps", "throughput_per_flow_bps",
              "kernel_seconds_per_gb", "app_seconds_per_gb", "llc_misses_kernel_per_gb",
              "llc_misses_app_per_gb", "packets_per_skb", "unattributed_seconds_per_gb",
              "measured_kernel_cpu", "measured_stack_cpu",
              "measured_app_cpu", "measured_irq_cpu", "measured_poll_cpu", *COUNTER_KEYS,
              # --latency: how long the data waited from the stack to its read, the reader's
              # wake-ups by it (medians of the runs' quantiles), and the samples they rest on
              *WAIT_KEYS, "wait_samples", "wakeups", "runs"]


def counters_md(cells: list[dict], caps: dict) -> list[str]:
    """The PMU table: LLC hit ratios and instructions and cycles per GB, per cell (none without
    a PMU event in any cell)."""
    if not any(c.get(k) is not None for c in cells for k in COUNTER_KEYS):
        return []
    stand_in = "software" in (caps.get("counters") or "")
    out = ["## PMU counters", "",
           "Each side's figures are of the flow's own receive work (LLC hit ratio = 1 - misses / "
           "references); the app core's are of everything the reader's core ran in the window, "
           "as NDM'13 read it with Intel PCM (their Fig. 5) and the follow-up counted "
           "instructions per Gbps.", ""]
    if stand_in:
        out += ["**Software stand-ins** (`--counters software`): every event is cpu-clock "
                "nanoseconds, so hit ratios read 0 and instructions and cycles are ns: a check "
                "of the path, not a measurement.", ""]
    out += ["| kernel CPU | app CPU | class | LLC hit kernel | LLC hit app | LLC hit app core | "
            "instr/GB kernel | instr/GB app | instr/GB app core | cycles/GB app core |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for c in sorted(cells, key=lambda c: (c["kernel_cpu"], c["app_cpu"])):
        ratio = [figure(c.get(k), "{:.1%}") for k in
                 ("llc_hit_ratio_kernel", "llc_hit_ratio_app", "app_core_llc_hit_ratio")]
        per = [figure(c.get(k), "{:.3g}") for k in
               ("instructions_kernel_per_gb", "instructions_app_per_gb",
                "app_core_instructions_per_gb", "app_core_cycles_per_gb")]
        out.append(f"| {c['kernel_cpu']} | {c['app_cpu']} | {c['class']} | {' | '.join(ratio)} | "
                   f"{' | '.join(per)} |")
    return out + [""]


def sweep_settings(results: dict) -> list[dict]:
    """The device settings of the sweep, in the order it ran them ([{}]: none swept)."""
    cfg = results["config"]
    return settings_of(cfg.get("pause"), cfg.get("offloads"))


def sweep_order(results: dict):
    """The key that sorts cells as the sweep runs them: setting, flows, kernel CPU, app CPU."""
    index = {setting_key(s): i for i, s in enumerate(sweep_settings(results))}
    return lambda c: (index.get(setting_key(c.get("setting")), len(index)), c.get("flows", 1),
                      c["kernel_cpu"], c["app_cpu"])


def to_csv(results: dict) -> str:
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for c in sorted(results["cells"], key=sweep_order(results)):
        row = {k: c.get(k) for k in CSV_FIELDS}
        row["flows"] = c.get("flows", 1)
        row["setting"] = setting_label(c.get("setting"))
        for side in ("kernel", "app"):
            row[f"nic_local_{side}"] = (c.get("nic_local") or {}).get(side)
        row["runs"] = len(c.get("runs", []))
        w.writerow({k: "" if v is None else v for k, v in row.items()})
    return out.getvalue()


def _gbps(bps) -> str:
    return "-" if bps is None else f"{bps / 1e9:.2f}"


def by_class(cells: list[dict]) -> dict[str, dict]:
    """Per class: number of cells, median/min/max throughput, median CPU-seconds per GB (kernel,
    app, unattributed) and packets per skb (None where no cell has them)."""
    out = {}
    for cls in CLASSES:
        cs = [c for c in cells if c["class"] == cls and c.get("throughput_bps") is not None]
        if not cs:
            continue
        t = [c["throughput_bps"] for c in cs]

        def med(key):
            vals = [c[key] for c in cs if c.get(key) is not None]
            return statistics.median(vals) if vals else None
        out[cls] = {"cells": len(cs), "median_bps": statistics.median(t), "min_bps": min(t),
                    "max_bps": max(t), "kernel_seconds_per_gb": med("kernel_seconds_per_gb"),
                    "app_seconds_per_gb": med("app_seconds_per_gb"),
                    "unattributed_seconds_per_gb": med("unattributed_seconds_per_gb"),
                    "packets_per_skb": med("packets_per_skb"),
                    **{k: med(k) for k in WAIT_KEYS},
                    "wait_samples": sum(c.get("wait_samples") or 0 for c in cs)}
    return out


def llc_peer_choice(app_cpu: int, topo: Topology) -> tuple[int | None, str]:
    """Where the llc-peer policy puts the kernel side of a flow read on APP_CPU (from a start on
    the reader's own core, with no other load)."""
    fid = FlowId("tcp", "198.18.0.1", 1, "198.18.0.2", 5201)
    flow = FlowReport(flow=fid, duration=1.0, rx_bytes=10**9, rx_packets=1, kernel_cpu=app_cpu,
                      kernel_cpu_share=1.0, kernel_seconds=1.0, kernel_kthread_seconds=0.0,
                      app_cpu=app_cpu, app_cpu_share=1.0, app_seconds=1.0, app_nested_seconds=0.0,
                      app_bytes=10**9, app_calls=1, app_pid=None, app_comm=None,
                      llc_misses_kernel=None, llc_misses_app=None,
                      placement=Placement(SAME_CORE, True), kernel_cpus={}, app_cpus={})
    caps = Capabilities(*[Figure(MISSING, "")] * 4)
    snap = Snapshot(1.0, [flow], [CpuReport(c, 0, 0, 0, 0, 0, None, None) for c in topo.online],
                    caps, 0, 0, 0, 0, 0)
    d = llc_peer(snap, topo, min_rate=0)
    return (d[0].cpu, d[0].reason) if d else (None, "no other core on the reader's socket")


def _setting(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return "?" if value is None else str(value)


def config_md(config: dict | None, swept: bool = False) -> list[str]:
    """The host's receive-side settings beside the ones the papers measured with (SWEPT: the
    sweep varied some of the device's, under Device settings)."""
    if not config:
        return ["The host's configuration was not recorded (results of an older steer).", ""]
    dev = config.get("device") or {}
    nic = dev.get("locality") or (
        f"NUMA node {dev['numa_node']}" if dev.get("numa_node") is not None else
        f"local CPUs {format_cpulist(dev['local_cpus'])}" if dev.get("local_cpus") else
        "no NUMA information")
    rows = [
        ("receiving device", f"{dev.get('name', '?')}" + (f" (netns {dev['netns']})" if dev.get("netns") else "")
         + (f": {dev['error']}" if dev.get("error") else ""), "40 GbE NIC"),
        ("NIC locality", nic, "one NIC-attached socket of 2; best with both sides on it"),
        ("irqbalance", config.get("irqbalance"), PAPERS_PRECONDITIONS["irqbalance"]),
        ("RPS", (dev.get("rps") or {}).get("state"), PAPERS_PRECONDITIONS["rps"]),
        ("RFS", (dev.get("rfs") or {}).get("state"), PAPERS_PRECONDITIONS["rfs"]),
        ("MTU", dev.get("mtu"), PAPERS_PRECONDITIONS["mtu"]),
        ("flow control (pause)", _setting(dev.get("pause")), PAPERS_PRECONDITIONS["pause"]),
        ("SMT", _setting(config.get("smt")), PAPERS_PRECONDITIONS["smt"]),
        ("congestion control", dev.get("congestion_control"), PAPERS_PRECONDITIONS["congestion_control"]),
        ("offloads", _setting(dev.get("offloads")), "not stated"),
        ("CPU frequency governor", config.get("governor"), "not stated"),
    ]
    lines = ["## The host's configuration", "",
             "Read before the first run, not changed by steer (except the kernel side's placement "
             "of each cell" + (", and the device settings it swept, put back after" if swept else "")
             + "). The papers' column is their stated setup.", "",
             "| setting | this host | the papers |", "|---|---|---|"]
    lines += [f"| {name} | {_setting(mine)} | {theirs} |" for name, mine, theirs in rows]
    return lines + [""]


def setting_cells(results: dict, setting: dict) -> list[dict]:
    """The measured cells of one device SETTING (every flows count)."""
    key = setting_key(setting)
    return [c for c in results["cells"] if c.get("throughput_bps") is not None
            and setting_key(c.get("setting")) == key]


def first_setting_cells(results: dict) -> list[dict]:
    """The measured cells of the sweep's first device setting (every flows count)."""
    return setting_cells(results, sweep_settings(results)[0])


def matrix_cells(results: dict) -> list[dict]:
    """The measured cells of the sweep's first device setting and first (smallest) flows-per-cell
    count: the matrix the class tables and the bubble figures show; the other counts and settings
    have sections of their own."""
    base = min(results["config"].get("flows") or [1])
    return [c for c in first_setting_cells(results) if c.get("flows", 1) == base]


def by_setting(results: dict) -> list[tuple[dict, dict[str, dict]]]:
    """(setting, class -> medians) for each device setting in sweep order, over the cells of the
    smallest flows count: throughput, costs per GB, and wire packets per skb (GRO's work)."""
    base = min(results["config"].get("flows") or [1])
    return [(s, by_class([c for c in setting_cells(results, s) if c.get("flows", 1) == base]))
            for s in sweep_settings(results)]


def settings_md(results: dict) -> list[str]:
    """The Device settings section: each setting's cells by class."""
    cfg = results["config"]
    lines = ["## Device settings", "",
             "Every cell was measured under each setting of the receiving device, in this order; "
             "features a setting does not name stayed as found, and the device was put back as "
             "found after. Packets per skb is what GRO or LRO aggregated (1: nothing). "
             "Unattributed is NET_RX time the tracer charged to no flow, host-wide, per GB of the "
             "cells' flows: where RPS or XDP sends skbs up the stack on the kernel CPU, the "
             "device's NAPI poll and GRO on the arrival CPU land there, so add it to the kernel "
             "side when settings change where that work runs."]
    if cfg["mode"] == "lab" and cfg.get("offloads"):
        lines[-1] += (" In the lab the sender's TSO was off in every cell, so that packets reached "
                      "the receiving veth wire-sized, as from a NIC: compare these cells with each "
                      "other, not with a sweep without --offloads.")
    lines += ["", "| setting | class | cells | median Gbit/s | min | max | kernel CPU-s/GB | "
              "app CPU-s/GB | unattributed CPU-s/GB | packets per skb |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for setting, rows in by_setting(results):
        for cls, r in rows.items():
            lines.append(f"| {setting_label(setting)} | {cls} | {r['cells']} | "
                         f"{_gbps(r['median_bps'])} | {_gbps(r['min_bps'])} | {_gbps(r['max_bps'])} | "
                         f"{figure(r['kernel_seconds_per_gb'])} | {figure(r['app_seconds_per_gb'])} | "
                         f"{figure(r['unattributed_seconds_per_gb'])} | "
                         f"{figure(r['packets_per_skb'], '{:.1f}')} |")
    return lines + [""]


def flows_per_core(cells: list[dict]) -> dict[int, dict[str, dict]]:
    """flows per cell -> class -> medians (cell throughput, per flow, costs, misses per GB)."""
    out: dict[int, dict[str, dict]] = {}
    for n in sorted({c.get("flows", 1) for c in cells}):
        for cls in CLASSES:
            cs = [c for c in cells if c.get("flows", 1) == n and c["class"] == cls
                  and c.get("throughput_bps") is not None]
            if not cs:
                continue

            def med(key):
                vals = [c[key] for c in cs if c.get(key) is not None]
                return statistics.median(vals) if vals else None
            out.setdefault(n, {})[cls] = {
                "cells": len(cs), "median_bps": med("throughput_bps"),
                "per_flow_bps": med("throughput_per_flow_bps"),
                "kernel_seconds_per_gb": med("kernel_seconds_per_gb"),
                "app_seconds_per_gb": med("app_seconds_per_gb"),
                "llc_misses_app_per_gb": med("llc_misses_app_per_gb")}
    return out


# The papers' method (NDM'13 and its follow-up; Cai et al. alike): one flow, a sender that copies
# nothing (iperf3 -Z, sendfile), the slow start left out of the figures (-O), long runs, repeated.
# Their sender was another host; in the lab it is pinned to a CPU outside the swept pair where
# there is one.
PAPER_PRESET = {"seconds": 30.0, "repeat": 3, "omit_seconds": 2, "iperf3": ("-Z",)}


def paper_text(cfg: dict) -> str:
    """What --paper did, in words, for the progress line and the report."""
    if cfg["mode"] != "lab":
        return ("--paper: the papers' run length and repeats; iperf3 -Z and -O are for the "
                "client on the other host to pass")
    cpu = cfg.get("sender_cpu")
    sender = (f"the sender pinned to CPU {cpu}" if cpu is not None else
              "the sender left to the scheduler (every usable CPU is swept)")
    return (f"--paper: iperf3 -Z (sendfile), the first {PAPER_PRESET['omit_seconds']} s left out "
            f"(-O, and by the tracer), {sender}")


def arrival_md(cells: list[dict], method: str) -> list[str]:
    """Where the flow's packets arrived in each cell: the CPU its queue IRQ fired on (host mode:
    the lab's veth has no IRQ) and the CPU its NAPI instance polled on (none where packets came
    through the backlog). With --method irq both are the cell's kernel CPU; otherwise they are
    wherever the NIC or the sender put them, a third CPU of the cell."""
    lines = []
    for key, what in (("measured_irq_cpu", "the flow's queue IRQ fired"),
                      ("measured_poll_cpu", "the flow's NAPI instance polled")):
        seen = [c for c in cells if c.get(key) is not None]
        if not seen:
            continue
        on_kernel = sum(c[key] == c["kernel_cpu"] for c in seen)
        cpus = ", ".join(str(c) for c in sorted({c[key] for c in seen}))
        line = (f"Arrival: {what} mostly on the cell's kernel CPU in {on_kernel} of {len(seen)} "
                f"cells (on CPU {cpus})")
        if method == "irq" and on_kernel < len(seen):
            line += ("; where it did not, something moved the IRQ back (irqbalance?), it is "
                     "managed, or threaded NAPI polls elsewhere")
        elif method != "irq":
            line += f"; {method} moves the receive processing, not the arrival"
        lines.append(line + ".")
    return lines + [""] if lines else []


def report_md(results: dict, topo: Topology) -> str:
    """The sweep's report: the setup, then a section per view of the cells."""
    cells = matrix_cells(results)
    cfg = results["config"]
    counts = cfg.get("flows") or [1]
    swept = bool(cfg.get("pause") or cfg.get("offloads"))
    lines = _setup_md(results, topo, cells)
    lines += arrival_md(cells, cfg["method"])
    lines += _by_class_md(cells) + _waits_md(cells) + _all_cells_md(cells)
    lines += counters_md(cells, results.get("capabilities") or {})
    if cells:
        lines += _placement_md(cells, topo)
    if swept:
        lines += settings_md(results)
    if len(counts) > 1:
        lines += _flows_per_core_md(results)
    lines += _profile_md(results, swept) + _papers_md(cells)
    return "\n".join(lines)


def _setup_md(results: dict, topo: Topology, cells: list[dict]) -> list[str]:
    """The host, the sweep's cells and method, and the host's receive settings."""
    cfg, host = results["config"], results.get("host", {})
    counts = cfg.get("flows") or [1]
    settings = sweep_settings(results)
    swept = bool(cfg.get("pause") or cfg.get("offloads"))
    lines = ["# steer sweep", ""]
    lines += [f"Host: {host.get('hostname', '?')}, kernel {host.get('kernel', '?')}, "
              f"{len(topo.online)} online CPUs, {len(topo.sockets)} socket(s), "
              f"LLC = L{topo.llc_level}.",
              f"Cells: {len(cells)} of {len(cfg['cpus']) ** 2} (CPUs {', '.join(map(str, cfg['cpus']))}), "
              f"{cfg['seconds']:g} s each, {cfg['repeat']} run(s) per cell; kernel side moved with "
              f"{cfg['method']}, traffic from {cfg['mode']}"
              + (f"; {counts[0]} flow(s) per cell here, {', '.join(map(str, counts[1:]))} under "
                 "Flows per core." if len(counts) > 1 else
                 (f"; {counts[0]} flows per cell." if counts[0] > 1 else "."))
              + (f" The device with {setting_label(settings[0])}"
                 + (", the other settings under Device settings." if len(settings) > 1 else ".")
                 if swept else ""), ""]
    if cfg.get("paper"):
        lines += [f"Method: {paper_text(cfg)}.", ""]
    if not results.get("complete", True):
        lines += ["**Incomplete**: the sweep was interrupted; `steer sweep --resume` continues it.", ""]
    lines += config_md(host.get("config"), swept)
    return lines


def _by_class_md(cells: list[dict]) -> list[str]:
    lines = ["## Throughput by class", "",
             "| class | cells | median Gbit/s | min | max | kernel CPU-s/GB | app CPU-s/GB |",
             "|---|---|---|---|---|---|---|"]
    for cls, s in by_class(cells).items():
        lines.append(f"| {cls} | {s['cells']} | {_gbps(s['median_bps'])} | {_gbps(s['min_bps'])} | "
                     f"{_gbps(s['max_bps'])} | {figure(s['kernel_seconds_per_gb'])} | "
                     f"{figure(s['app_seconds_per_gb'])} |")
    lines.append("")
    return lines


def _us(v) -> str:
    return figure(v, "{:,.1f}")


def _waits_md(cells: list[dict]) -> list[str]:
    """Latency by class (a sweep with --latency): how long each class's data waited from the
    stack to its read, and how its reader was woken; then per cell. None without the figures."""
    if not any(c.get("wait_samples") for c in cells):
        return []
    lines = ["## Receive wait by class", "",
             "How long the flow's data waited from its skb reaching the stack to the read that "
             "took it (sampled skbs; medians of each cell's p50 and p99, then of the cells), "
             "and the reader's wake-ups by the data: wake-up to running, and the share woken "
             "from another core than the one it ran on (`--latency`).", "",
             "| class | cells | samples | wait p50 us | wait p90 us | wait p99 us | "
             "wake-up p50 us | wake-up p99 us | cross-core wake-ups |",
             "|---|---|---|---|---|---|---|---|---|"]
    for cls, s in by_class(cells).items():
        lines.append(f"| {cls} | {s['cells']} | {s['wait_samples']:,} | {_us(s['wait_p50_us'])} | "
                     f"{_us(s['wait_p90_us'])} | {_us(s['wait_p99_us'])} | "
                     f"{_us(s['wakeup_p50_us'])} | {_us(s['wakeup_p99_us'])} | "
                     f"{figure(s['cross_core_wakeup_share'], '{:.0%}')} |")
    lines += ["", "| kernel CPU | app CPU | class | samples | wait p50 us | wait p99 us | "
                  "wake-ups | wake-up p50 us | cross-core |", "|---|---|---|---|---|---|---|---|---|"]
    for c in sorted(cells, key=lambda c: (c["kernel_cpu"], c["app_cpu"])):
        lines.append(f"| {c['kernel_cpu']} | {c['app_cpu']} | {c['class']} | "
                     f"{c.get('wait_samples') or 0:,} | {_us(c.get('wait_p50_us'))} | "
                     f"{_us(c.get('wait_p99_us'))} | {c.get('wakeups') or 0:,} | "
                     f"{_us(c.get('wakeup_p50_us'))} | "
                     f"{figure(c.get('cross_core_wakeup_share'), '{:.0%}')} |")
    return lines + [""]


def _all_cells_md(cells: list[dict]) -> list[str]:
    lines = ["## All cells", "", "| kernel CPU | app CPU | class | Gbit/s | kernel CPU-s/GB | "
             "app CPU-s/GB | LLC misses/GB kernel | LLC misses/GB app |", "|---|---|---|---|---|---|---|---|"]
    for c in sorted(cells, key=lambda c: (c["kernel_cpu"], c["app_cpu"])):
        lines.append(f"| {c['kernel_cpu']} | {c['app_cpu']} | {c['class']} | {_gbps(c['throughput_bps'])} | "
                     f"{figure(c.get('kernel_seconds_per_gb'))} | {figure(c.get('app_seconds_per_gb'))} | "
                     f"{figure(c.get('llc_misses_kernel_per_gb'), '{:,.0f}')} | "
                     f"{figure(c.get('llc_misses_app_per_gb'), '{:,.0f}')} |")
    lines.append("")
    return lines


def _placement_md(cells: list[dict], topo: Topology) -> list[str]:
    """The best cell, and where the llc-peer policy would have put each app CPU's flow."""
    best = max(cells, key=lambda c: c["throughput_bps"])
    lines = ["## Best placement", "",
             f"Kernel CPU {best['kernel_cpu']}, app CPU {best['app_cpu']} ({best['class']}): "
             f"{_gbps(best['throughput_bps'])} Gbit/s.", ""]
    lines += ["## Where llc-peer would place the flow", "",
              "| app CPU | llc-peer kernel CPU | that cell Gbit/s | best cell for this app CPU | "
              "llc-peer / best |", "|---|---|---|---|---|"]
    index = {(c["kernel_cpu"], c["app_cpu"]): c for c in cells}
    for a in sorted({c["app_cpu"] for c in cells}):
        k, _ = llc_peer_choice(a, topo)
        row_best = max((c for c in cells if c["app_cpu"] == a), key=lambda c: c["throughput_bps"])
        chosen = index.get((k, a)) if k is not None else None
        if chosen is None:
            why = "no candidate" if k is None else f"CPU {k} (not in the sweep)"
            lines.append(f"| {a} | {why} | - | {row_best['kernel_cpu']} "
                         f"({_gbps(row_best['throughput_bps'])}) | - |")
            continue
        ratio = chosen["throughput_bps"] / row_best["throughput_bps"]
        lines.append(f"| {a} | {k} | {_gbps(chosen['throughput_bps'])} | {row_best['kernel_cpu']} "
                     f"({_gbps(row_best['throughput_bps'])}) | {ratio:.2f} |")
    lines.append("")
    return lines


def _flows_per_core_md(results: dict) -> list[str]:
    measured = first_setting_cells(results)
    lines = ["## Flows per core", "",
             "All of a cell's flows steered to its kernel CPU and read on its app CPU (Cai "
             "et al., SIGCOMM'21, Fig. 6: throughput per core and L3 misses as flows per "
             "core grow). Medians over the cells of each class.", "",
             "| flows | class | cells | Gbit/s per core | per flow | kernel CPU-s/GB | "
             "app CPU-s/GB | LLC misses/GB app |", "|---|---|---|---|---|---|---|---|"]
    for n, by in flows_per_core(measured).items():
        for cls, s in by.items():
            lines.append(f"| {n} | {cls} | {s['cells']} | {_gbps(s['median_bps'])} | "
                         f"{_gbps(s['per_flow_bps'])} | {figure(s['kernel_seconds_per_gb'])} | "
                         f"{figure(s['app_seconds_per_gb'])} | "
                         f"{figure(s['llc_misses_app_per_gb'], '{:,.0f}')} |")
    lines.append("")
    return lines


def _profile_md(results: dict, swept: bool) -> list[str]:
    """Each profiled cell's CPU seconds by category, per side."""
    profiled = [c for c in results["cells"] if c.get("profile")]
    if not profiled:
        return []
    from steer.trace.profile import CATEGORIES
    lines = ["## Where the CPU went (steer profile)", "",
             "Each side's sampled CPU seconds by category (Cai et al., SIGCOMM'21), in "
             "percent, over the cell's runs. The profiler ran beside the tracer in these "
             "cells and cost some of their throughput.", "",
             "| kernel CPU | app CPU | flows | " + ("setting | " if swept else "")
             + "class | side | CPU s | samples | "
             + " | ".join(c.replace("_", " ") for c in CATEGORIES) + " |",
             "|---|---|---|---|---|---|---|" + "---|" * (len(CATEGORIES) + swept)]
    for c in sorted(profiled, key=sweep_order(results)):
        p = c["profile"]
        for side in ("kernel", "app"):
            shares = p.get(side) or {}
            cols = " | ".join("-" if shares.get(k) is None else f"{100 * shares[k]:.0f}%"
                              for k in CATEGORIES)
            lines.append(f"| {c['kernel_cpu']} | {c['app_cpu']} | {c.get('flows', 1)} | "
                         + (f"{setting_label(c.get('setting'))} | " if swept else "")
                         + f"{c['class']} | {side} | {p.get(f'{side}_seconds', 0):.3f} | "
                         f"{p['samples']} | {cols} |")
    lines.append("")
    return lines


def _papers_md(cells: list[dict]) -> list[str]:
    """The papers' figures beside ours, by class."""
    lines = ["## The papers' numbers (theirs, not measured here)", ""]
    lines += [f"- {p['name']}: {p['source']}." for p in PAPERS]
    lines += ["", f"Hardware: {PAPERS_HARDWARE}. Approximate Gbit/s, read from the papers.", "",
              "| class | " + " | ".join(f"{p['name']} Gbit/s" for p in PAPERS)
              + " | ours here, median Gbit/s |",
              "|---|" + "---|" * len(PAPERS) + "---|"]
    ours = by_class(cells)
    for cls in PAPERS[0]["gbps"]:
        mine = _gbps(ours[cls]["median_bps"]) if cls in ours else "not measured (topology)"
        lines.append(f"| {cls} | " + " | ".join(f"~{p['gbps'][cls]}" for p in PAPERS)
                     + f" | {mine} |")
    lines += ["", "A lab on a small VM shares cores between sender, softirq and reader, so its "
              "ordering of classes need not match a 40 GbE server's: steer measures, it does not "
              "assume.", ""]
    return lines
