"""Affinity class of a flow: where its kernel receive processing runs relative to its reader.

The classes follow the NDM'13 study and its follow-up (one 40 Gbps flow: same core ~22 and ~20 Gbps,
same socket ~35 and ~39, cross socket ~26 and ~28; report.PAPERS has both): what matters is whether
the two sides share a core, share a last-level cache, or sit on different sockets.
"""
from __future__ import annotations

from dataclasses import dataclass

from steer.model.topology import Topology

SAME_CORE = "same-core"         # same CPU, or SMT siblings of one physical core (smt_sibling says which)
SAME_SOCKET = "same-socket"     # different cores of one socket (shared_llc tells the detail)
CROSS_SOCKET = "cross-socket"
UNKNOWN = "unknown"             # a side not seen yet, or a CPU the topology does not know
CLASSES = (SAME_CORE, SAME_SOCKET, CROSS_SOCKET, UNKNOWN)


@dataclass(frozen=True)
class Placement:
    cls: str
    shared_llc: bool | None     # None when unknown
    # the two sides on different hardware threads of one core: they share the core's L1/L2 but
    # not its pipeline turn by turn, a placement NDM'13 discusses as possibly the best; it stays
    # in the same-core class (one core does both) and is shown apart. None when unknown
    smt_sibling: bool | None = None


def classify(kernel_cpu: int | None, app_cpu: int | None, topo: Topology) -> Placement:
    if kernel_cpu is None or app_cpu is None:
        return Placement(UNKNOWN, None)
    k, a = topo.cpus.get(kernel_cpu), topo.cpus.get(app_cpu)
    if k is None or a is None:
        return Placement(UNKNOWN, None)
    shared_llc = None
    if k.llc is not None and a.llc is not None:
        shared_llc = k.llc == a.llc
    if kernel_cpu == app_cpu or app_cpu in k.siblings:
        return Placement(SAME_CORE, True if shared_llc is None else shared_llc,
                         smt_sibling=kernel_cpu != app_cpu)
    if k.socket is None or a.socket is None:
        return Placement(UNKNOWN, shared_llc)
    if k.socket == a.socket:
        return Placement(SAME_SOCKET, shared_llc, smt_sibling=False)
    return Placement(CROSS_SOCKET, shared_llc, smt_sibling=False)
