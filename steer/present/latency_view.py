"""--latency's delays as text, below the flows' table of `steer flows`."""
from __future__ import annotations


def delays_table(delays: dict, limit: int) -> str:
    """FlowId -> Delays (steer.model.latency) as a line a flow, the most sampled first."""
    rows = sorted(((str(fid), d) for fid, d in delays.items() if d.samples),
                  key=lambda r: -r[1].samples)[:limit]
    if not rows:
        return "arrival to read (--latency): no sampled skb of any flow was read in the window"
    width = max(len(name) for name, _ in rows)
    lines = [f"{'arrival to read (--latency)':<{width}}  {'p50':>9} {'p90':>9} {'p99':>9} "
             f"{'samples':>8} {'lost':>6}  {'to queue p50':>12} {'in queue p50':>12}"]
    for name, d in rows:
        q = [d.quantiles_ns[k] / 1e3 for k in sorted(d.quantiles_ns)]
        stages = (f"{d.stack_ns[0.5] / 1e3:10.1f}us {d.queue_ns[0.5] / 1e3:10.0f}us"
                  if d.staged else f"{'-':>12} {'-':>12}")
        lines.append(f"{name:<{width}}  {q[0]:7.0f}us {q[1]:7.0f}us {q[2]:7.0f}us "
                     f"{d.samples:8d} {d.lost:6d}  {stages}")
    return "\n".join(lines)
