"""steer profile's output: each flow's split of its receive CPU by category, as a table (rich)
and as Cai et al.'s stacked bars (SVG). The profile itself is built by steer.trace.profile."""
from __future__ import annotations

import io

from steer.kernel.files import write_atomically
from steer.trace.profile import CATEGORIES, Profile
from steer.present.view import short_flow


def _percent(share: float) -> str:
    return f"{100 * share:.0f}%" if share >= 0.005 else ("<1%" if share > 0 else "")


def render_table(profile: Profile, limit: int):
    """Each flow's split, kernel side and app side, as percentages of the side's seconds."""
    from rich.table import Table
    t = Table(title=f"Where the receive CPU went: {profile.duration:.1f} s at {profile.frequency} "
              "Hz per CPU (share of each side's sampled seconds)", title_justify="left")
    t.add_column("flow")
    t.add_column("side")
    t.add_column("CPU s", justify="right")
    t.add_column("samples", justify="right")
    for c in CATEGORIES:
        t.add_column(c.replace("_", " "), justify="right")
    rows = [(short_flow(f.flow, 44), f.kernel, f.app) for f in profile.flows[:limit]]
    if profile.unattributed.samples:
        rows.append(("(no flow: other receive work)", profile.unattributed, None))
    for label, kernel, app in rows:
        for side, split in (("kernel", kernel), ("app", app)):
            if split is None or not split.samples:
                continue
            shares = split.shares()
            t.add_row(label, side, f"{split.total:.3f}", str(split.samples),
                      *(_percent(shares[c]) for c in CATEGORIES))
            label = ""
    if not rows:
        t.caption = "no receive work was sampled: no TCP/UDP traffic in the window"
    elif len(profile.flows) > limit:
        t.caption = f"{len(profile.flows) - limit} more flows: --limit or --json"
    return t


# the categories' colours, the same in every chart
COLOURS = {"data_copy": "#4e79a7", "tcp_ip": "#f28e2b", "netdev": "#59a14f", "skb_mgmt": "#e15759",
           "memory": "#76b7b2", "lock": "#edc948", "scheduling": "#b07aa1", "other": "#bab0ac"}


def write_svg(profile: Profile, path: str, limit: int = 12) -> None:
    """Cai et al.'s stacked bars (their Fig 5b): one bar per flow and side, the side's sampled
    CPU seconds split by category."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    bars = []
    for f in profile.flows[:limit]:
        for side in ("kernel", "app"):
            split = getattr(f, side)
            if split.samples:
                bars.append((f"{short_flow(f.flow, 30)}\n{side}", split))
    fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(bars) + 2), 4.5))
    bottoms = [0.0] * len(bars)
    for c in CATEGORIES:
        values = [s.seconds.get(c, 0.0) for _, s in bars]
        ax.bar(range(len(bars)), values, bottom=bottoms, color=COLOURS[c],
               label=c.replace("_", " "))
        bottoms = [b + v for b, v in zip(bottoms, values)]
    ax.set_xticks(range(len(bars)), [label for label, _ in bars], fontsize=7)
    ax.set_ylabel("CPU seconds (sampled)")
    ax.set_title(f"Receive CPU by category, {profile.duration:.1f} s at {profile.frequency} Hz")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if not bars:
        ax.text(0.5, 0.5, "no receive work sampled", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="svg")
    plt.close(fig)
    # a new file renamed over PATH, as every file steer writes: a link planted there is replaced,
    # never written through
    write_atomically(path, out.getvalue())
