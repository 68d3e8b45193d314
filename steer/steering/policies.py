"""Placement policies: given a flow snapshot and the topology, where should each flow's kernel
receive processing run?

A policy is any callable `place(snapshot, topology) -> list[Decision]`. User policies are Python
files defining such a `place` function; they are loaded only from files that no other user can
write. Built-ins:

- llc-peer: a different core of the reader's socket that shares its last-level cache, never the
  reader's own core or its SMT sibling (the placement the NDM'13 study found fastest); among
  those, the CPUs of the NIC's NUMA node first (a socket split into nodes, as sub-NUMA
  clustering does), where the packets' memory is.
- same-core: the reader's own CPU (what aRFS does), for comparison.
- spread: flows by rate onto the least loaded online CPUs.
- static: TOML rules, `[[rule]] flow = "proto=tcp,dport=5201"  cpu = 2`; a rule may name the
  reader's workload instead of, or beside, the flow: `pod = "shop/api-*"` (namespace/name),
  `container`, `unit` ("nginx.service"), `cgroup` (its path), each a shell pattern. Each flow
  that matches is steered on its own, exactly: XDP sees packets, not pods.
"""
from __future__ import annotations

import fnmatch
import os
import stat
import sys
import types
from dataclasses import dataclass
from typing import Callable

from steer.model.flowspec import WORKLOAD_KEYS, FlowSpec, FlowSpecError
from steer.model.reports import FlowReport, Snapshot
from steer.model.topology import Topology
from steer.model.samples import FlowId

DEFAULT_MIN_RATE = 1e6   # bit/s: below this a flow's placement does not matter (control traffic)


class PolicyError(Exception):
    """A policy that cannot be loaded or that asked for something impossible; one line."""


@dataclass(frozen=True)
class Decision:
    flow: FlowId
    cpu: int
    reason: str


Policy = Callable[[Snapshot, Topology], "list[Decision]"]


def _candidates(snap: Snapshot, min_rate: float) -> list[FlowReport]:
    """Flows worth placing: a known reader, and enough traffic."""
    return [f for f in snap.flows if f.app_cpu is not None and f.rate_bps >= min_rate]


def _load(snap: Snapshot) -> dict[int, float]:
    """Busy time per CPU in the snapshot: kernel receive work plus application receive work."""
    return {c.cpu: c.net_rx_seconds + c.kthread_seconds + c.app_seconds for c in snap.cpus}


def stack_cpu_of(f: FlowReport) -> int | None:
    """Where the flow's packets go up the stack: what a cpumap redirect moves. Its kernel CPU
    (most kernel time) may stay the arrival CPU after a move, which still runs the driver and
    XDP (and, with generic XDP, the skb's linearising): judged by that, a steered flow would look
    unplaced and be moved again and again."""
    return f.stack_cpu if f.stack_cpu is not None else f.kernel_cpu


def llc_peer(snap: Snapshot, topo: Topology, min_rate: float = DEFAULT_MIN_RATE) -> list[Decision]:
    load = _load(snap)
    out = []
    for f in _candidates(snap, min_rate):
        reader = topo.cpus.get(f.app_cpu)
        if reader is None:
            continue
        own_core = set(reader.siblings) | {reader.cpu}
        online = set(topo.online)
        same_socket = [c for c in topo.online if topo.cpus[c].socket == reader.socket
                       and c not in own_core]
        peers = [c for c in reader.llc_cpus if c in online and c not in own_core
                 and topo.cpus[c].socket == reader.socket]
        pool, why = (peers, f"shares the L{topo.llc_level or '?'} of reader CPU {reader.cpu}") \
            if peers else (same_socket, f"same socket as reader CPU {reader.cpu}, no LLC peer")
        if not pool:
            continue   # a one-core socket: nothing better to offer
        node = (f.rx_device or {}).get("numa_node")
        near = [c for c in pool if topo.cpus[c].numa == node] if node is not None else []
        if near and len(near) < len(pool):
            pool, why = near, f"{why}, on the NIC's NUMA node {node}"
        here = stack_cpu_of(f)
        if here in pool:
            out.append(Decision(f.flow, here, f"already {why}"))
            continue
        cpu = min(pool, key=lambda c: (load.get(c, 0.0), c))
        load[cpu] = load.get(cpu, 0.0) + f.kernel_seconds
        out.append(Decision(f.flow, cpu, f"least loaded CPU that {why}"))
    return out


def same_core(snap: Snapshot, topo: Topology, min_rate: float = DEFAULT_MIN_RATE) -> list[Decision]:
    return [Decision(f.flow, f.app_cpu, "reader's own CPU (as aRFS places it)")
            for f in _candidates(snap, min_rate) if f.app_cpu in topo.online]


def spread(snap: Snapshot, topo: Topology, min_rate: float = DEFAULT_MIN_RATE) -> list[Decision]:
    # the load without the kernel work of the flows being placed: counted where it runs now, a
    # flow alone on a CPU would find another CPU less loaded than its own at every interval and
    # go back and forth; on equal load a flow stays where it is
    load = _load(snap)
    flows = sorted(_candidates(snap, min_rate), key=lambda f: -f.rate_bps)
    for f in flows:
        for c, s in f.kernel_cpus.items():
            load[c] = max(0.0, load.get(c, 0.0) - s)
    out = []
    for f in flows:
        here = stack_cpu_of(f)
        cpu = min(topo.online, key=lambda c: (load.get(c, 0.0), c != here, c))
        load[cpu] = load.get(cpu, 0.0) + f.kernel_seconds + 1e-9
        out.append(Decision(f.flow, cpu, "least loaded online CPU"))
    return out


def static(path: str) -> Policy:
    """A policy from TOML rules; checked when loaded, so errors show before anything runs."""
    import tomllib
    try:
        doc = tomllib.loads(read_policy_file(path).decode())
    except UnicodeDecodeError:
        raise PolicyError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as e:
        raise PolicyError(f"{path}: not valid TOML: {e}") from None
    rules = doc.get("rule")
    if not isinstance(rules, list) or not rules:
        raise PolicyError(f"{path}: expected one or more [[rule]] tables with a selector "
                          f"({', '.join(RULE_SELECTORS)}) and cpu")
    parsed: list[tuple[Rule, int]] = []
    for i, r in enumerate(rules, 1):
        where = f"{path}: rule {i}"
        if not isinstance(r, dict) or set(r) - {*RULE_SELECTORS, "cpu"} or "cpu" not in r \
                or not set(r) & set(RULE_SELECTORS):
            raise PolicyError(f"{where}: needs cpu and one or more of {', '.join(RULE_SELECTORS)}, "
                              "no other key")
        for key in set(r) & set(RULE_SELECTORS):
            if not isinstance(r[key], str) or not r[key]:
                raise PolicyError(f"{where}: {key} must be a non-empty string such as "
                                  f"{SELECTOR_EXAMPLES[key]}")
        if not isinstance(r["cpu"], int) or isinstance(r["cpu"], bool) or r["cpu"] < 0:
            raise PolicyError(f"{where}: cpu must be a CPU number, not {r['cpu']!r}")
        try:
            spec = FlowSpec.parse(r["flow"]) if "flow" in r else None
        except FlowSpecError as e:
            raise PolicyError(f"{where}: {e}") from None
        parsed.append((Rule(spec, r.get("pod"), r.get("container"), r.get("unit"),
                            r.get("cgroup")), r["cpu"]))

    def place(snap: Snapshot, topo: Topology) -> list[Decision]:
        out = []
        for f in snap.flows:
            for rule, cpu in parsed:
                if rule.matches(f):
                    out.append(Decision(f.flow, cpu, f"static rule {rule}"))
                    break
        return out
    return place


# what a static rule may select flows by: the flow itself, or its reader's workload
RULE_SELECTORS = ("flow", *WORKLOAD_KEYS)
SELECTOR_EXAMPLES = {"flow": '"proto=tcp,dport=5201"', "pod": '"shop/api-*"',
                     "container": '"server"', "unit": '"nginx.service"',
                     "cgroup": '"/system.slice/nginx.service"'}


@dataclass(frozen=True)
class Rule:
    """A static rule's selectors, all of which a flow must match; the workload's are shell
    patterns, matched against what steer.model.workloads named the reader's cgroup (a flow
    whose reader was not seen matches none of them)."""
    flow: FlowSpec | None = None
    pod: str | None = None          # "namespace/name"
    container: str | None = None
    unit: str | None = None
    cgroup: str | None = None

    def matches(self, f: FlowReport) -> bool:
        fl, w = f.flow, f.app_workload
        if self.flow and not self.flow.matches(fl.proto, fl.src, fl.sport, fl.dst, fl.dport):
            return False
        wanted = ((self.pod, w and w.pod and f"{w.namespace}/{w.pod}"),
                  (self.container, w and w.container), (self.unit, w and w.unit),
                  (self.cgroup, f.app_cgroup))
        return all(pattern is None or (value and fnmatch.fnmatchcase(value, pattern))
                   for pattern, value in wanted)

    def __str__(self) -> str:
        return ",".join(f"{k}={v}" for k, v in (("flow", self.flow), ("pod", self.pod),
                                                   ("container", self.container),
                                                   ("unit", self.unit), ("cgroup", self.cgroup))
                        if v is not None)


BUILTIN = {"llc-peer": llc_peer, "same-core": same_core, "spread": spread}


def read_policy_file(path: str) -> bytes:
    """The bytes of policy file PATH, refused unless nobody but root or this user could have
    written it or any directory above it (sshd's StrictModes): a policy runs as root. The file
    is checked through the descriptor it is read from, so it cannot be swapped in between."""
    real = os.path.realpath(path)
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        raise PolicyError(f"policy file {path}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PolicyError(f"policy file {path} is not a regular file")
        _check_owner(path, "policy file", st)
        d = real
        while d != "/":
            d = os.path.dirname(d)
            _check_owner(path, f"its directory {d}", os.lstat(d))
        return f.read()


def _check_owner(path: str, what: str, st: os.stat_result) -> None:
    if st.st_uid not in (0, os.geteuid()):
        raise PolicyError(f"policy file {path}: {what} belongs to uid {st.st_uid}, neither root "
                          "nor you, who could make it run anything as root")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PolicyError(f"policy file {path}: {what} is writable by group or others "
                          f"(mode {stat.S_IMODE(st.st_mode):04o}), who could make it run anything "
                          "as root: chmod go-w it, or keep policies in a directory only root writes")


def load_policy(spec: str, min_rate: float = DEFAULT_MIN_RATE) -> tuple[str, Policy]:
    """NAME of a built-in, static:FILE or FILE.toml (rules), or FILE.py (a `place` function)."""
    if spec in BUILTIN:
        fn = BUILTIN[spec]
        return spec, lambda snap, topo: fn(snap, topo, min_rate)
    if spec.startswith("static:") or spec.endswith(".toml"):
        path = spec.split(":", 1)[1] if spec.startswith("static:") else spec
        return f"static {path}", static(path)
    if spec.endswith(".py"):
        source = read_policy_file(spec)
        # compiled from the bytes just checked: no bytecode is read (a planted __pycache__/*.pyc
        # would run instead) or written next to it
        mod = types.ModuleType("steer_user_policy")
        mod.__file__ = spec
        sys.modules[mod.__name__] = mod   # what dataclasses and pickle look a module up by
        try:
            exec(compile(source, spec, "exec"), mod.__dict__)   # noqa: S102 - the user's policy
        except Exception as e:  # noqa: BLE001 - any error in the user's file is one line
            raise PolicyError(f"policy file {spec} failed to load: {type(e).__name__}: {e}") from None
        place = getattr(mod, "place", None)
        if not callable(place):
            raise PolicyError(f"policy file {spec} defines no place(snapshot, topology) function")
        return spec, place
    raise PolicyError(f"unknown policy {spec!r}: choose from {', '.join(BUILTIN)}, static:FILE, "
                      "FILE.toml or FILE.py")
