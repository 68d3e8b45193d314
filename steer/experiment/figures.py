"""Sweep figures: bubble matrices like Figure 4 of NDM'13 (kernel CPU x app CPU, bubble area =
the value), and throughput by class. Each figure is written as PNG and SVG."""
from __future__ import annotations

import io
import os
import statistics

import matplotlib

matplotlib.use("Agg")   # files only: no display, no GUI toolkit
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from steer.model.classify import CLASSES  # noqa: E402
from steer.model.topology import Topology, nic_sockets  # noqa: E402
from steer.kernel.files import write_atomically  # noqa: E402

CLASS_COLOURS = {"same-core": "#d62728", "same-socket": "#2ca02c", "cross-socket": "#ff7f0e",
                 "unknown": "#7f7f7f"}
MAX_BUBBLE = 2200   # points^2 of the largest bubble: fills a cell of a 12x12 matrix without overlap


def bubble_matrix(cells: list[dict], key: str, title: str, unit: str, scale: float, path: str,
                  sockets: dict[int, int] | None = None, nic_sockets=None) -> list[str]:
    """One bubble per cell with a value for KEY; writes PATH.png and PATH.svg. SOCKETS (CPU ->
    socket) orders the axes by socket and draws the socket quadrants, as NDM'13's matrix reads;
    NIC_SOCKETS (the receiving NIC's sockets) shades the quadrant where both sides are NIC-local."""
    cs = [c for c in cells if c.get(key) is not None]
    sockets = sockets or {}
    cpus = sorted({c["kernel_cpu"] for c in cells} | {c["app_cpu"] for c in cells},
                  key=lambda c: (sockets.get(c, -1), c))
    n = max(len(cpus), 1)
    fig, ax = plt.subplots(figsize=(2.2 + 0.6 * n, 1.8 + 0.6 * n))
    top = max((c[key] for c in cs), default=0) or 1
    pos = {cpu: i for i, cpu in enumerate(cpus)}
    xs = [pos[c["app_cpu"]] for c in cs]
    ys = [pos[c["kernel_cpu"]] for c in cs]
    sizes = [MAX_BUBBLE * (c[key] / top) / max(1, n / 4) ** 2 for c in cs]
    colours = [CLASS_COLOURS.get(c["class"], "#7f7f7f") for c in cs]
    ax.scatter(xs, ys, s=sizes, c=colours, alpha=0.75, edgecolors="black", linewidths=0.5, gid="cells")
    for x, y, c in zip(xs, ys, cs):
        ax.annotate(f"{c[key] * scale:.3g}", (x, y), ha="center", va="center", fontsize=7)
    ax.set_xticks(range(n), [str(c) for c in cpus])
    ax.set_yticks(range(n), [str(c) for c in cpus])
    ax.set_xlim(-0.6, n - 0.4)
    ax.set_ylim(-0.6, n - 0.4)
    _socket_quadrants(ax, cpus, sockets, nic_sockets)
    ax.set_xlabel("application CPU (reader pinned)")
    ax.set_ylabel("kernel receive CPU (flow steered)")
    ax.set_title(f"{title} ({unit})", fontsize=10)
    ax.grid(True, linestyle=":", linewidth=0.5)
    handles = [plt.Line2D([], [], marker="o", linestyle="", color=CLASS_COLOURS[k], label=k)
               for k in CLASSES if any(c["class"] == k for c in cs)]
    if nic_sockets and sockets:
        handles.append(Patch(color="#1f77b4", alpha=0.25,
                             label=f"NIC's socket{'s' if len(nic_sockets) > 1 else ''} "
                                   f"({', '.join(map(str, nic_sockets))})"))
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=7)
    return _save(fig, path)


def _socket_quadrants(ax, cpus: list[int], sockets: dict[int, int], nic_sockets) -> None:
    """Lines between sockets on both axes, each socket's span named, the NIC's shaded."""
    spans: dict[int, list[int]] = {}
    for i, cpu in enumerate(cpus):
        if cpu in sockets:
            spans.setdefault(sockets[cpu], []).append(i)
    if len(spans) < 2 and not nic_sockets:
        return
    for s, idx in spans.items():
        lo, hi = min(idx) - 0.5, max(idx) + 0.5
        if lo > -0.5:
            ax.axvline(lo, color="black", linewidth=1.2, gid="socket-boundary")
            ax.axhline(lo, color="black", linewidth=1.2, gid="socket-boundary")
        ax.text((lo + hi) / 2, -0.55, f"socket {s}", ha="center", va="bottom", fontsize=7,
                color="dimgray")
        if nic_sockets and s in nic_sockets:
            ax.axvspan(lo, hi, ymin=0, ymax=1, color="#1f77b4", alpha=0.06, zorder=0, gid="nic-socket")
            ax.axhspan(lo, hi, color="#1f77b4", alpha=0.06, zorder=0)


def by_class_chart(cells: list[dict], path: str) -> list[str]:
    groups = [(k, [c["throughput_bps"] / 1e9 for c in cells
                   if c["class"] == k and c.get("throughput_bps") is not None]) for k in CLASSES]
    groups = [(k, v) for k, v in groups if v]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for i, (k, vals) in enumerate(groups):
        ax.scatter([i] * len(vals), vals, color=CLASS_COLOURS[k], alpha=0.8, zorder=3)
        ax.hlines(statistics.median(vals), i - 0.3, i + 0.3, color="black", zorder=4)
    ax.set_xticks(range(len(groups)), [k for k, _ in groups])
    ax.set_ylabel("throughput (Gbit/s)")
    ax.set_title("Throughput by class (bar: median)", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.grid(True, axis="y", linestyle=":", linewidth=0.5)
    return _save(fig, path)


def waits_chart(cells: list[dict], path: str) -> list[str]:
    """Each cell's wait from the stack to the read, p50 and p99, by class (--latency): does a
    placement that costs throughput cost latency too?"""
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    groups = [k for k in CLASSES if any(c["class"] == k and c.get("wait_p50_us") is not None
                                        for c in cells)]
    for i, k in enumerate(groups):
        for key, marker, dx in (("wait_p50_us", "o", -0.12), ("wait_p99_us", "^", 0.12)):
            vals = [c[key] for c in cells if c["class"] == k and c.get(key) is not None]
            ax.scatter([i + dx] * len(vals), vals, color=CLASS_COLOURS[k], marker=marker,
                       alpha=0.8, zorder=3, gid=f"waits-{k}-{key}")
            if vals:
                ax.hlines(statistics.median(vals), i + dx - 0.1, i + dx + 0.1, color="black",
                          zorder=4)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_yscale("log")
    ax.set_ylabel("stack to read (us, log)")
    ax.legend(handles=[plt.Line2D([], [], marker=m, linestyle="", color="gray", label=l)
                       for m, l in (("o", "p50"), ("^", "p99"))], fontsize=7)
    ax.set_title("Receive wait by class (bar: median of the cells)", fontsize=10)
    ax.grid(True, axis="y", linestyle=":", linewidth=0.5)
    return _save(fig, path)


def flows_chart(by_flows: dict[int, dict[str, dict]], path: str) -> list[str]:
    """Throughput per core and LLC misses per GB against flows per core, one line per class
    (Cai et al., Fig. 6); the misses panel only where a PMU counted them."""
    with_llc = any(s.get("llc_misses_app_per_gb") is not None
                   for by in by_flows.values() for s in by.values())
    fig, axes = plt.subplots(1, 2 if with_llc else 1, figsize=(9 if with_llc else 5, 3.4),
                             squeeze=False)
    counts = sorted(by_flows)
    panels = [("median_bps", 1e-9, "throughput per core (Gbit/s)")]
    if with_llc:
        panels.append(("llc_misses_app_per_gb", 1.0, "LLC misses per GB, application"))
    for ax, (key, scale, label) in zip(axes[0], panels):
        for cls in CLASSES:
            pts = [(n, by_flows[n][cls][key] * scale) for n in counts
                   if cls in by_flows[n] and by_flows[n][cls].get(key) is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=cls,
                        color=CLASS_COLOURS[cls], gid=f"flows-{cls}")
        ax.set_xticks(counts)
        ax.set_xlabel("flows per core")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(True, linestyle=":", linewidth=0.5)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Flows per core (medians over each class's cells)", fontsize=10)
    return _save(fig, path)


def run_values(cells: list[dict], key: str) -> dict[str, list[float]]:
    """KEY of every run of CELLS (not the cells' medians: the papers' histograms are of every
    measurement), by class."""
    out: dict[str, list[float]] = {}
    for c in cells:
        for r in c.get("runs") or []:
            if r.get(key) is not None:
                out.setdefault(c["class"], []).append(r[key])
    return out


def histograms(cells: list[dict], path: str) -> list[str]:
    """Histograms of every run's throughput and, where a PMU counted them, of its application-side
    LLC misses per GB, stacked by class: NDM'13 found the first bimodal and its L3 hit ratios
    trimodal across placements (their Figs 6 and 7); the classes say which placements make
    which mode."""
    panels = [("throughput_bps", 1e-9, "throughput (Gbit/s)")]
    if run_values(cells, "llc_misses_app_per_gb"):
        panels.append(("llc_misses_app_per_gb", 1.0, "LLC misses per GB, application"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.2), squeeze=False)
    for ax, (key, scale, label) in zip(axes[0], panels):
        by = run_values(cells, key)
        classes = [k for k in CLASSES if k in by]
        values = [[v * scale for v in by[k]] for k in classes]
        if values:
            ax.hist(values, bins=min(20, max(5, sum(map(len, values)) // 2)), stacked=True,
                    color=[CLASS_COLOURS[k] for k in classes], label=classes)
            ax.legend(fontsize=7)
        ax.set_xlabel(label)
        ax.set_ylabel("runs")
        ax.grid(True, axis="y", linestyle=":", linewidth=0.5)
    fig.suptitle("Every run, by class (NDM'13 Figs 6-7)", fontsize=10)
    return _save(fig, path)


def _save(fig, path: str) -> list[str]:
    fig.tight_layout()
    out = []
    for ext in ("png", "svg"):
        buf = io.BytesIO()
        fig.savefig(buf, format=ext, dpi=120)
        write_atomically(f"{path}.{ext}", buf.getvalue())
        out.append(f"{path}.{ext}")
    plt.close(fig)
    return out


def write_figures(results: dict, out_dir: str, topo: Topology | None = None) -> list[str]:
    """The figures of a sweep; TOPO (the measuring host's) draws the socket quadrants. The
    matrices show the first device setting and flows-per-cell count; more counts get
    flows_per_core (of the first setting)."""
    from steer.experiment.report import first_setting_cells, flows_per_core, matrix_cells
    cells = matrix_cells(results)
    where: dict = {}
    if topo is not None:
        dev = results.get("host", {}).get("config", {}).get("device") or {}
        where = {"sockets": {n: c.socket for n, c in topo.cpus.items() if c.socket is not None},
                 "nic_sockets": nic_sockets(topo, dev.get("numa_node"), dev.get("local_cpus"))}
    files = bubble_matrix(cells, "throughput_bps", "Throughput", "Gbit/s", 1e-9,
                          os.path.join(out_dir, "throughput"), **where)
    for c in cells:
        k, a = c.get("kernel_seconds_per_gb"), c.get("app_seconds_per_gb")
        c["_cpu_per_gb"] = None if k is None or a is None else k + a
    files += bubble_matrix(cells, "_cpu_per_gb", "CPU-seconds per GB, kernel + application", "s/GB",
                           1.0, os.path.join(out_dir, "cpu_per_gb"), **where)
    if any(c.get("llc_misses_app_per_gb") is not None for c in cells):
        for c in cells:
            k, a = c.get("llc_misses_kernel_per_gb"), c.get("llc_misses_app_per_gb")
            c["_llc_per_gb"] = None if k is None or a is None else k + a
        files += bubble_matrix(cells, "_llc_per_gb", "LLC misses per GB, kernel + application",
                               "misses/GB", 1.0, os.path.join(out_dir, "llc_per_gb"), **where)
    for key, title, unit, name in (
            ("app_core_llc_hit_ratio", "LLC hit ratio of the reader's core (whole core)", "hit %",
             "app_core_llc_hit"),
            ("app_core_instructions_per_gb", "Instructions per GB, reader's core (whole core)",
             "Ginstr/GB", "app_core_instructions_per_gb")):
        if any(c.get(key) is not None for c in cells):
            files += bubble_matrix(cells, key, title, unit, 100.0 if "ratio" in key else 1e-9,
                                   os.path.join(out_dir, name), **where)
    files += by_class_chart(cells, os.path.join(out_dir, "throughput_by_class"))
    files += histograms(cells, os.path.join(out_dir, "histograms"))
    if any(c.get("wait_p50_us") is not None for c in cells):
        files += waits_chart(cells, os.path.join(out_dir, "waits_by_class"))
    if len(results["config"].get("flows") or [1]) > 1:
        files += flows_chart(flows_per_core(first_setting_cells(results)),
                             os.path.join(out_dir, "flows_per_core"))
    for c in cells:
        c.pop("_cpu_per_gb", None)
        c.pop("_llc_per_gb", None)
    return files
