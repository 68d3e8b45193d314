"""The affinity sweep: the NDM'13 experiment as one command. For every (kernel CPU, app CPU) pair,
move the flow's kernel receive processing, pin the reader, run traffic, and record throughput, CPU
cost per GB on each side, LLC misses where a PMU exists, and the cell's class.

Two traffic sources:
- the lab (default): a fresh iperf3 flow between lab namespaces for every run; the kernel side is
  moved with RPS on the receiving veth (the lab's analogue of the NIC queue's IRQ affinity) or with
  XDP steering; throughput is iperf3's own receiver count.
- a real host (--dev IFACE --server-cmd CMD): CMD (the receiver, e.g. `iperf3 -s`) is started once
  and fed by a client on another machine; for each cell its threads are re-pinned and the kernel
  side is moved either as the papers did, by pointing the NIC's receive IRQs at the cell's kernel
  CPU (--method irq: the driver's NAPI poll runs where its IRQ lands), or by steering the flow with
  XDP; throughput is what the reader got, by the tracer. Each run also records where the flow's
  queue IRQ fired (/proc/interrupts), so that the arrival CPU is never a hidden third CPU.

--pause and --offloads add a dimension: the receiving device's setting (devsettings). Every cell
is measured under each setting, one setting after another (a change may reset the NIC); the device
is put back as found afterwards.

results.json is rewritten after every cell, so Ctrl-C keeps what is done and --resume continues.
"""
from __future__ import annotations

import json
import os
import platform
import shlex
import signal
import socket
import statistics
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field

from steer.model.classify import classify
from steer.experiment.devsettings import (SettingError, apply_state, recorded_state, setting_key, setting_label,
                                          setting_problems, settings_of, target_state)
from steer.model.flowspec import FlowSpec
from steer.model.flows import build_snapshot
from steer.model.topology import Topology, format_cpulist, nic_local, nic_sockets
from steer.trace.tracer import Tracer
from steer.experiment.hostconfig import counter_delta, irq_method_problems, receiver_tcp, tcp_retransmits
from steer.model.irqs import busiest_cpu, interrupt_counts, queue_irq
from steer.model.latency import WAIT_KEYS, since, summed, wait_figures
from steer.experiment.report import COUNTER_KEYS, PAPER_PRESET, paper_text
from steer.model.units import hit_ratio, per_gb
from steer.kernel.files import write_atomically, write_json

RESULTS_VERSION = 1
SETTLE_SECONDS = 0.5    # after a move, before measuring: the old placement's queues drain
# after a device setting changed on a host, before measuring: the sender's TCP recovers from what
# a NIC reset lost (its retransmission timeout is 200 ms at least, and backs off)
SETTING_SETTLE_SECONDS = 2.0
CLIENT_WAIT_SECONDS = 60.0   # host mode: for the other machine's client to connect


class SweepError(Exception):
    pass


class SweepStopped(Exception):
    """The user asked to stop (Ctrl-C, SIGTERM): raised at a safe point, never asynchronously."""


@dataclass
class SweepConfig:
    cpus: list[int]
    seconds: float
    repeat: int
    method: str            # rps (lab) | xdp | irq (host)
    mode: str              # lab | host
    dev: str | None = None
    netns: str | None = None
    server_cmd: str | None = None
    port: int = 5201
    # parallel flows per cell, all steered to the cell's kernel CPU and read on its app CPU (Cai
    # et al. measure 1, 8, 16 and 24 flows per core); flow i uses port + i
    flows: list[int] = field(default_factory=lambda: [1])
    profile: bool = False   # each cell also profiled by category (steer profile), at a cost
    # --paper: the papers' method where the lab can follow it (PAPER_PRESET)
    paper: bool = False
    sender_cpu: int | None = None   # lab: the iperf3 sender's CPU (None: left to the scheduler)
    # the receiving device's settings swept (devsettings): pause frames ['on', 'off'], and
    # offload settings [{'gro': 'on'}, {'gro': 'off'}]; None: left as found
    pause: list[str] | None = None
    offloads: list[dict] | None = None
    latency: bool = False   # each run's arrival-to-read delays too (the tracer's --latency)

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    def settings(self) -> list[dict]:
        return settings_of(self.pause, self.offloads)


def paper_sender_cpu(swept: list[int], usable: list[int]) -> int | None:
    """--paper in the lab: the sender's CPU, the last usable one the sweep does not measure
    (None: every usable CPU is swept, and the sender is left to the scheduler)."""
    spare = [c for c in usable if c not in swept]
    return spare[-1] if spare else None


def cells_of(cfg: SweepConfig) -> list[tuple[int, int, int, dict]]:
    """(kernel CPU, app CPU, flows, device setting) of every cell: setting after setting, and in
    each the one-flow matrix first."""
    return [(k, a, n, s) for s in cfg.settings() for n in cfg.flows
            for k in cfg.cpus for a in cfg.cpus]


# A sweep without --cpus measures every pair of the usable CPUs up to this many (64 cells); on a
# bigger host, a selection whose pairs hold every placement there (covering_cpus): 192 CPUs would
# be 36,864 cells, where the papers measured 144.
DEFAULT_MAX_CPUS = 8
# what a cell costs beyond its traffic (set-up, the tracer's reads, teardown): 0.2-0.5 s in the
# lab on a 2-CPU VM (2026-11-26); a real host's IRQ moves settle longer. And once per sweep.
CELL_OVERHEAD_S = 1.0
SWEEP_OVERHEAD_S = 5.0


def covering_cpus(topo: Topology, usable: list[int]) -> list[int]:
    """A few CPUs of each socket whose pairs hold every placement the host has: a CPU, its SMT
    sibling, another core that shares its last-level cache, a core under another one of the
    socket's LLCs (chiplets, sub-NUMA clusters); the pairs across sockets give cross-socket.
    At most four a socket: 2 sockets, 64 cells."""
    by_socket: dict = {}
    for c in sorted(usable):
        by_socket.setdefault(topo.cpus[c].socket, []).append(c)
    out = []
    for cpus in by_socket.values():
        first = topo.cpus[cpus[0]]
        sibling = next((c for c in cpus if c != first.cpu and c in first.siblings), None)
        same_llc = next((c for c in cpus if c not in first.siblings
                         and topo.cpus[c].llc == first.llc), None)
        other_llc = next((c for c in cpus if topo.cpus[c].llc != first.llc), None)
        out += [c for c in (first.cpu, sibling, same_llc, other_llc) if c is not None]
    return sorted(out)


def default_cpus(topo: Topology, usable: list[int]) -> tuple[list[int], str]:
    """The CPUs a sweep takes without --cpus, and why those."""
    usable = [c for c in topo.online if c in set(usable)]
    if len(usable) <= DEFAULT_MAX_CPUS:
        return usable, "every usable CPU"
    return covering_cpus(topo, usable), (
        f"{len(usable)} usable CPUs: a CPU of each socket with its SMT sibling, a core sharing its "
        "LLC and one under another LLC, which hold every placement (--cpus all: every pair)")


def estimated_seconds(cfg: "SweepConfig") -> float:
    return SWEEP_OVERHEAD_S + len(cells_of(cfg)) * cfg.repeat * (cfg.seconds + CELL_OVERHEAD_S)


def duration_text(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def plan(cfg: "SweepConfig", topo: Topology, why: str = "") -> dict:
    """What a sweep of CFG would measure, run nothing: its cells with their classes, how many of
    each class, and about how long it takes."""
    cells = []
    for k, a, n, setting in cells_of(cfg):
        p = classify(k, a, topo)
        cells.append({"kernel_cpu": k, "app_cpu": a, "flows": n, "setting": setting or None,
                      "class": p.cls, "shared_llc": p.shared_llc, "smt_sibling": p.smt_sibling})
    return {"cpus": format_cpulist(cfg.cpus), "why": why, "cells": len(cells),
            "classes": dict(Counter(c["class"] for c in cells)),
            "estimated_seconds": round(estimated_seconds(cfg)),
            "seconds": cfg.seconds, "repeat": cfg.repeat, "plan": cells}


def _key(kernel_cpu: int, app_cpu: int, flows: int, setting: dict | None) -> tuple[int, int, int, str]:
    return kernel_cpu, app_cpu, flows, setting_key(setting)


def cell_key(cell: dict) -> tuple[int, int, int, str]:
    return _key(cell["kernel_cpu"], cell["app_cpu"], cell.get("flows", 1), cell.get("setting"))


def host_info(topo: Topology, cfg: SweepConfig | None = None) -> dict:
    """Who measured: the host, its topology, and its receive-side configuration (in the lab the
    receiving device's part is added by the first run, when the device exists)."""
    from steer.experiment.hostconfig import host_config
    dev = cfg.dev if cfg and cfg.mode == "host" else None
    return {"hostname": socket.gethostname(), "kernel": platform.release(),
            "machine": platform.machine(), "topology": topo.as_dict(),
            "config": host_config(dev, cfg.netns if dev else None)}


def device_sockets(results: dict, topo: Topology) -> tuple[int, ...] | None:
    """The sockets of the sweep's receiving NIC, from results' host.config; None: no NIC (the
    lab's veth) or no locality known."""
    dev = results.get("host", {}).get("config", {}).get("device") or {}
    return nic_sockets(topo, dev.get("numa_node"), dev.get("local_cpus"))


def load_results(path: str, cfg: SweepConfig) -> dict:
    """Earlier results to resume; refuses results of a different configuration."""
    try:
        with open(path) as f:
            old = json.load(f)
    except FileNotFoundError:
        raise SweepError(f"--resume: no {path} to resume") from None
    except ValueError as e:
        raise SweepError(f"--resume: {path} is not valid JSON: {e}") from None
    old_cfg = dict(old.get("config") or {})
    old_cfg.setdefault("flows", [1])   # results of a steer before --flows
    old_cfg.setdefault("profile", False)   # and before --profile
    old_cfg.setdefault("paper", False)     # and before --paper
    old_cfg.setdefault("sender_cpu", None)
    old_cfg.setdefault("pause", None)      # and before --pause and --offloads
    old_cfg.setdefault("offloads", None)
    old_cfg.setdefault("latency", False)   # and before --latency
    if old.get("version") != RESULTS_VERSION or old_cfg != cfg.as_dict():
        raise SweepError(f"--resume: {path} was made with other settings "
                         f"({old.get('config')}); use another --out or the same options")
    return old


def save_results(path: str, results: dict) -> None:
    write_json(path, results)


def _median(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def summarize(kernel_cpu: int, app_cpu: int, runs: list[dict], topo: Topology,
              nic: tuple[int, ...] | None = None, flows: int = 1, setting: dict | None = None) -> dict:
    """A cell of FLOWS parallel flows under the device SETTING: its class, its medians over RUNS,
    and whether each side sat on a socket of the receiving NIC (NIC: its sockets; None leaves
    nic_local unknown)."""
    p = classify(kernel_cpu, app_cpu, topo)
    cell = {"kernel_cpu": kernel_cpu, "app_cpu": app_cpu, "flows": flows,
            "setting": setting or {}, "class": p.cls,
            "shared_llc": p.shared_llc, "smt_sibling": p.smt_sibling,
            "nic_local": {"kernel": nic_local(topo, nic, kernel_cpu),
                          "app": nic_local(topo, nic, app_cpu)},
            "runs": runs}
    for key in ("throughput_bps", "kernel_seconds_per_gb", "app_seconds_per_gb",
                "llc_misses_kernel_per_gb", "llc_misses_app_per_gb", "packets_per_skb",
                "unattributed_seconds_per_gb", *COUNTER_KEYS):
        cell[key] = _median(r.get(key) for r in runs)
    cell["throughput_per_flow_bps"] = cell["throughput_bps"] / flows \
        if cell["throughput_bps"] is not None else None
    tcp = [r["receiver_tcp"] for r in runs if r.get("receiver_tcp")]
    if tcp:
        cell["receiver_tcp"] = {k: _median(t.get(k) for t in tcp) for k in tcp[0]}
    profiled = [r["profile"] for r in runs if r.get("profile")]
    if profiled:
        cell["profile"] = combine_profiles(profiled)
    if any("wait_samples" in r for r in runs):
        cell.update(cell_waits(runs))
    for key in ("measured_kernel_cpu", "measured_stack_cpu", "measured_app_cpu",
                "measured_irq_cpu", "measured_poll_cpu"):
        seen = [r.get(key) for r in runs if r.get(key) is not None]
        cell[key] = max(set(seen), key=seen.count) if seen else None
    return cell


def cell_waits(runs: list[dict]) -> dict:
    """A cell's latency figures from its runs': the medians of each run's quantiles, the samples
    they rest on, and the share of the reader's wake-ups by the data that came from another
    core, over all runs."""
    wakes = sum(r.get("wakeups") or 0 for r in runs)
    out = {k: _median(r.get(k) for r in runs) for k in WAIT_KEYS
           if k != "cross_core_wakeup_share"}
    out["wait_samples"] = sum(r.get("wait_samples") or 0 for r in runs)
    out["wakeups"] = wakes
    out["cross_core_wakeup_share"] = \
        sum(r.get("cross_core_wakeups") or 0 for r in runs) / wakes if wakes else None
    return out


def run_profile_of(prof, match) -> dict:
    """A run's profile, of the flows MATCH selects: each side's seconds by category, summed."""
    from steer.trace.profile import CATEGORIES
    out = {"kernel": dict.fromkeys(CATEGORIES, 0.0), "app": dict.fromkeys(CATEGORIES, 0.0),
           "samples": 0}
    for f in prof.flows:
        if match(f):
            for side in ("kernel", "app"):
                for c, v in getattr(f, side).seconds.items():
                    out[side][c] += v
            out["samples"] += f.samples
    return out


def combine_profiles(profiles: list[dict]) -> dict:
    """A cell's profile from its runs': each side's share of its seconds by category, over all
    runs (the shares of the sum, not a median of shares: a run with few samples weighs less)."""
    out = {"samples": sum(p["samples"] for p in profiles)}
    for side in ("kernel", "app"):
        total = {c: sum(p[side].get(c, 0.0) for p in profiles) for c in profiles[0][side]}
        s = sum(total.values())
        out[side] = {c: (v / s if s else None) for c, v in total.items()}
        out[f"{side}_seconds"] = s
    return out


def _total(values) -> int | float | None:
    values = list(values)
    return None if any(v is None for v in values) else sum(values)


def _dominant_of(flows, cpu, share) -> tuple[int | None, float | None]:
    """The CPU most of the flows' bytes had on one side, and its mean share (one flow: its own)."""
    weights: Counter = Counter()
    for f in flows:
        if getattr(f, cpu) is not None:
            weights[getattr(f, cpu)] += f.rx_bytes or f.app_bytes or 1
    if not weights:
        return None, None
    top = weights.most_common(1)[0][0]
    shares = [getattr(f, share) for f in flows if getattr(f, cpu) == top and getattr(f, share) is not None]
    return top, (sum(shares) / len(shares) if shares else None)


def core_events(before, after, cpus) -> dict[str, int]:
    """The PMU counts of CPUS (one core's) between two tracer samples, summed per event."""
    out: dict[str, int] = {}
    for cpu in cpus:
        b = before.cpu_events.get(cpu, {})
        for event, n in after.cpu_events.get(cpu, {}).items():
            out[event] = out.get(event, 0) + n - b.get(event, 0)
    return out


def counter_figures(flows, before, after, topo: Topology, app_cpu: int | None,
                    nbytes: int) -> dict:
    """COUNTER_KEYS of FLOWS (FlowReports) and of APP_CPU's core, per GB of NBYTES."""
    out: dict = {}
    for side in ("kernel", "app"):
        refs = _total(getattr(f, f"llc_references_{side}") for f in flows)
        out[f"llc_hit_ratio_{side}"] = hit_ratio(_total(getattr(f, f"llc_misses_{side}")
                                                        for f in flows), refs)
        for event in ("instructions", "cycles"):
            out[f"{event}_{side}_per_gb"] = per_gb(
                _total(getattr(f, f"{event}_{side}") for f in flows), nbytes)
    core = core_events(before, after, topo.cpu(app_cpu).siblings) \
        if app_cpu is not None and app_cpu in topo.cpus else {}
    out["app_core_llc_hit_ratio"] = hit_ratio(core.get("llc_misses"), core.get("llc_references"))
    out["app_core_instructions_per_gb"] = per_gb(core.get("instructions"), nbytes)
    out["app_core_cycles_per_gb"] = per_gb(core.get("cycles"), nbytes)
    return out


def measure_flow(tracer: Tracer, before, after, topo, match, app_cpu: int | None = None,
                 waits: tuple[dict, dict] | None = None) -> dict:
    """The figures of the flows MATCH selects between two tracer samples, added up (bytes, CPU
    time, misses; the costs per GB are of the sum); each side's CPU is the one that most of the
    bytes had. APP_CPU: the reader's CPU, whose whole core's PMU counts the run gets. WAITS: the
    tracer's latency totals at BEFORE and AFTER (--latency), whose delays of the same flows
    become one distribution (wait_figures)."""
    snap = build_snapshot(before, after, topo, tracer.capabilities)
    flows = [f for f in snap.flows if match(f)]
    if not flows:
        return {}
    latency = {}
    if waits is not None:
        lat0, lat1 = waits
        latency = wait_figures(summed([since(lat1[f.flow], lat0.get(f.flow))
                                       for f in flows if f.flow in lat1]))
    rx, app = sum(f.rx_bytes for f in flows), sum(f.app_bytes for f in flows)
    nbytes = rx or app
    packets, skbs = sum(f.rx_packets for f in flows), sum(f.rx_skbs for f in flows)
    out = {"rx_bytes": rx, "app_bytes": app, "traced_flows": len(flows),
           "rx_packets": packets, "rx_skbs": skbs,
           # wire packets per skb up the stack: what GRO or LRO aggregated (1: nothing)
           "packets_per_skb": packets / skbs if skbs else None,
           "tracer_throughput_bps": app * 8 / snap.duration if snap.duration else None,
           "kernel_seconds_per_gb": per_gb(sum(f.kernel_seconds for f in flows), nbytes),
           "app_seconds_per_gb": per_gb(sum(f.app_seconds for f in flows), nbytes),
           "llc_misses_kernel_per_gb": per_gb(_total(f.llc_misses_kernel for f in flows), nbytes),
           "llc_misses_app_per_gb": per_gb(_total(f.llc_misses_app for f in flows), nbytes),
           # NET_RX time charged to no flow, host-wide: where a device's NAPI and GRO run on an
           # arrival CPU and RPS sends the skbs up the stack elsewhere, their time is here
           "unattributed_seconds_per_gb": per_gb(sum(c.net_rx_unattributed_seconds
                                                     for c in snap.cpus), nbytes),
           **counter_figures(flows, before, after, topo, app_cpu, nbytes), **latency}
    for side in ("kernel", "stack", "app"):
        out[f"measured_{side}_cpu"], out[f"measured_{side}_share"] = _dominant_of(
            flows, f"{side}_cpu", f"{side}_cpu_share")
    polls: Counter = Counter()
    for f in flows:
        polls.update(f.rx_poll_cpus or {})
    # the arrival CPU where no IRQ shows it (a veth's NAPI, threaded NAPI, busy polling)
    out["measured_poll_cpu"] = polls.most_common(1)[0][0] if polls else None
    queues = Counter(f.rx_path.queue for f in flows if f.rx_path and f.rx_path.queue is not None)
    out["rx_queue"] = queues.most_common(1)[0][0] if queues else None
    return out


def irq_figures(irqs, before: dict, after: dict, queue: int | None) -> dict:
    """Where the device's receive IRQS (DeviceIrqs) fired between two interrupt_counts(): the
    flow's QUEUE's IRQ where it is known, else all of them together."""
    one = queue_irq(irqs, queue)
    watched = [one] if one else list(irqs)
    cpu, n = busiest_cpu(before, after, [i.irq for i in watched])
    return {"irq": one.irq if one else None, "measured_irq_cpu": cpu, "irq_count": n}


def device_found(cfg: SweepConfig, device: dict | None, name: str) -> dict:
    """The receiving device as host.config recorded it (DEVICE) before the sweep's first run:
    what its settings start from and what is put back. SweepError where it was not read or
    cannot take cfg's settings."""
    found = recorded_state(device)
    if found is None:
        why = (device or {}).get("error") or (device or {}).get("offloads") or "not recorded"
        raise SweepError(f"{name}: its offloads were not read ({why})")
    problems = setting_problems(name, found, cfg.settings())
    if problems:
        raise SweepError("; ".join(problems))
    return found


def set_device(cfg: SweepConfig, dev: str, netns: str | None, setting: dict, found: dict,
               should_stop) -> dict:
    """DEV (in the namespace at path NETNS) under SETTING, from FOUND: its state, read back."""
    try:
        return apply_state(dev, netns, target_state(setting, found, cfg.settings()), should_stop)
    except SettingError as e:
        raise SweepError(f"{setting_label(setting)}: {e}") from None


def _sleep(seconds: float, should_stop) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if should_stop():
            raise SweepStopped
        time.sleep(min(0.1, max(0.0, end - time.monotonic())))


class LabRunner:
    """One fresh iperf3 flow per run between lab namespaces."""

    def __init__(self, cfg: SweepConfig, tracer: Tracer, topo: Topology, should_stop,
                 profiler: Tracer | None = None):
        self.cfg, self.tracer, self.topo, self.should_stop = cfg, tracer, topo, should_stop
        self.profiler = profiler
        self.device_config: dict | None = None   # the receiving veth's, read by the first run
        self.found: dict | None = None   # its settings as a fresh lab has them (with --offloads)

    def run(self, kernel_cpu: int, app_cpu: int, flows: int = 1, setting: dict | None = None) -> dict:
        from steer.experiment.lab import Lab, LabFlow
        from steer.steering.affinity import set_rps
        from steer.experiment.hostconfig import host_config
        from steer.steering.xdp import XdpSteering
        ports = [self.cfg.port + i for i in range(flows)]
        omit = PAPER_PRESET["omit_seconds"] if self.cfg.paper else 0
        extra = (*PAPER_PRESET["iperf3"], "-O", str(omit)) if self.cfg.paper else ()
        # with --offloads the sender's packets come wire-sized, as a NIC receives them, so that
        # the receiving veth's GRO has something to aggregate
        with Lab([LabFlow(self.cfg.sender_cpu, app_cpu, p) for p in ports],
                 seconds=self.cfg.seconds + omit, client_args=extra,
                 wire_sized=bool(self.cfg.offloads)) as lab:
            if self.device_config is None:   # as it is before this sweep changes its RPS
                self.device_config = host_config(lab.rx_dev, lab.rx_netns)["device"]
            state = None
            if setting:   # a fresh lab's veth is as found
                self.found = self.found or device_found(self.cfg, self.device_config,
                                                        f"the lab's {lab.rx_dev}")
                state = set_device(self.cfg, lab.rx_dev, lab.rx_netns, setting, self.found,
                                   self.should_stop)
            steering = None
            try:
                if self.cfg.method == "rps":
                    set_rps(lab.rx_dev, [kernel_cpu], netns=lab.rx_netns, remember=False)
                else:
                    steering = XdpSteering(lab.rx_dev, lab.rx_netns, pinned=False).open()
                    for p in ports:
                        steering.pin(FlowSpec(proto="tcp", dport=p), kernel_cpu)
                lab.start_servers()
                window: dict = {}

                tcp0, sent0 = receiver_tcp(lab.rx_netns), tcp_retransmits(lab.tx_netns)

                def traffic():
                    if omit:
                        # iperf3 leaves its first OMIT seconds out of its count: so does the tracer
                        lab.start_clients()
                        _sleep(omit, self.should_stop)
                        window["before"] = self._sample()
                    else:
                        window["before"] = self._sample()
                        lab.start_clients()
                    while lab.running():
                        _sleep(0.1, self.should_stop)
                    window["results"] = lab.wait(timeout=30)
                    window["after"] = self._sample()
                prof = _profiled(self.profiler, traffic)
                before, after, results = window["before"], window["after"], window["results"]
                tcp1 = receiver_tcp(lab.rx_netns)   # while the lab's namespace is still there
                # after the receiver's: each duplicate it counted was sent again before
                sent1 = tcp_retransmits(lab.tx_netns)
            finally:
                if steering:
                    steering.close()
        failed = [r for r in results if r.error]
        if failed:
            raise SweepError(f"iperf3 failed in cell {kernel_cpu}:{app_cpu}"
                             f"{f' ({flows} flows)' if flows > 1 else ''}: {failed[0].error}")
        mine = {(r.sender_port, r.flow.port) for r in results}
        run = measure_flow(self.tracer, before[0], after[0], self.topo,
                           lambda f: (f.flow.sport, f.flow.dport) in mine, app_cpu,
                           waits_of(before, after))
        if prof:
            run["profile"] = run_profile_of(prof, lambda f: (f.flow.sport, f.flow.dport) in mine)
        ends = [r.raw["end"] for r in results]
        run["throughput_bps"] = sum(e["sum_received"]["bits_per_second"] for e in ends)
        run["iperf3_received_bytes"] = sum(r.received_bytes for r in results)
        run["retransmits"] = _total(e["sum_sent"].get("retransmits") for e in ends)
        run["receiver_tcp"] = counter_delta(tcp0, tcp1)
        # iperf3's count ends at its last reading of the data sockets: a tail loss probe after it,
        # or a segment of its control connection sent again, is in the namespace's count only
        run["sender_retransmits"] = None if None in (sent0, sent1) else sent1 - sent0
        if flows > 1:
            run["throughput_per_flow_bps"] = [e["sum_received"]["bits_per_second"] for e in ends]
        if state:
            run["device_state"] = state
        return run

    def _sample(self):
        return sample_with_waits(self.tracer, self.cfg)

    def close(self):
        pass


class HostRunner:
    """A receiver started once, fed from another machine; re-pinned and re-steered per cell."""

    def __init__(self, cfg: SweepConfig, tracer: Tracer, topo: Topology, should_stop,
                 profiler: Tracer | None = None, device: dict | None = None):
        """DEVICE: the device's part of host.config, as the sweep's first start recorded it."""
        from steer.experiment.hostconfig import host_config
        from steer.kernel.namespaces import enter_netns
        from steer.kernel.process import die_with_parent
        from steer.steering.xdp import SteerError, XdpSteering, netns_path
        self.cfg, self.tracer, self.topo, self.should_stop = cfg, tracer, topo, should_stop
        self.profiler = profiler
        self.device_config = None   # host_info read it: the device is there from the start
        self.client_seen = False
        self.steering = None
        self.irq_before: dict[int, str] = {}   # the receive IRQs' affinity before the sweep
        self.found: dict | None = None     # the device's settings before the sweep's first run
        self.state: dict | None = None     # as the current setting left them
        self.setting: str | None = None    # that setting's key
        self.touched = False               # the sweep asked for a change: put it back after
        # the device's receive IRQs, to see where the flow's fired (any method) and to move
        # them (irq); none for a virtual device
        from steer.steering.affinity import receive_irqs
        try:
            self.irqs = receive_irqs(cfg.dev, cfg.netns)
        except SteerError:
            self.irqs = []
        if cfg.method == "irq":
            problems = irq_method_problems(host_config(cfg.dev, cfg.netns))
            if problems:
                raise SweepError("--method irq: " + "; ".join(problems))
        if cfg.pause or cfg.offloads:
            # a resumed sweep may find the device as a killed one left it: put back the first
            self.found = device_found(cfg, device, cfg.dev)
        try:
            argv = shlex.split(cfg.server_cmd)
        except ValueError as e:
            raise SweepError(f"--server-cmd: {e}") from None
        ns = netns_path(cfg.netns)
        if cfg.method != "irq":
            self.steering = XdpSteering(cfg.dev, cfg.netns, pinned=False).open()
        self.spec = FlowSpec(proto="tcp", dport=cfg.port)

        parent = os.getpid()

        def enter():
            die_with_parent(parent)   # a sweep killed with SIGKILL takes its receiver along
            if ns:   # the receiver lives where its interface is
                enter_netns(ns)
        try:
            self.server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                           start_new_session=True, preexec_fn=enter)
        except OSError as e:
            if self.steering:
                self.steering.close()
            raise SweepError(f"--server-cmd {argv[0]}: {e.strerror}") from None

    def wait_for_client(self, timeout: float = CLIENT_WAIT_SECONDS) -> None:
        """Until a connection to the receiver's port is established: the first cell would
        otherwise measure the client's start, or nothing."""
        end = time.monotonic() + timeout
        while self.cfg.port not in established_ports(self.server.pid):
            self._check_server()
            if time.monotonic() > end:
                raise SweepError(f"no client connected to port {self.cfg.port} within "
                                 f"{timeout:.0f} s: start the sender on the other host (e.g. "
                                 f"iperf3 -c ADDRESS -p {self.cfg.port} -t 3600)")
            _sleep(0.2, self.should_stop)
        self.client_seen = True

    def _check_server(self) -> None:
        if self.server.poll() is not None:
            err = self.server.stderr.read().decode(errors="replace").strip()
            raise SweepError(f"the server command exited ({self.server.returncode}): {err}")

    def _set_device(self, setting: dict) -> None:
        """The device under SETTING, once per setting: a change may reset the NIC and drop what
        was in flight, so the sender is given time and must still be connected."""
        if not setting or setting_key(setting) == self.setting:
            return
        from steer.steering.xdp import netns_path
        self.touched, self.setting = True, None
        self.state = set_device(self.cfg, self.cfg.dev, netns_path(self.cfg.netns), setting,
                                self.found, self.should_stop)
        self.setting = setting_key(setting)
        _sleep(SETTING_SETTLE_SECONDS, self.should_stop)
        self.client_seen = False

    def run(self, kernel_cpu: int, app_cpu: int, flows: int = 1, setting: dict | None = None) -> dict:
        from steer.steering.affinity import set_app_affinity
        self._set_device(setting)
        if not self.client_seen:
            self.wait_for_client()
        self._check_server()
        set_app_affinity(self.server.pid, {app_cpu})
        if self.steering:
            self.steering.pin(self.spec, kernel_cpu)
        else:
            from steer.steering.affinity import set_irq_affinity
            from steer.steering.xdp import SteerError
            try:
                before = set_irq_affinity(self.irqs, [kernel_cpu])
            except SteerError as e:
                raise SweepError(f"cell {kernel_cpu}:{app_cpu}: {e}") from None
            for irq, cpus in before.items():
                self.irq_before.setdefault(irq, cpus)
        _sleep(SETTLE_SECONDS, self.should_stop)
        window: dict = {}

        def traffic():
            window["irqs_before"] = interrupt_counts()
            window["before"] = sample_with_waits(self.tracer, self.cfg)
            _sleep(self.cfg.seconds, self.should_stop)
            window["after"] = sample_with_waits(self.tracer, self.cfg)
            window["irqs_after"] = interrupt_counts()
        tcp0 = receiver_tcp(self.cfg.netns)
        prof = _profiled(self.profiler, traffic)
        tcp1 = receiver_tcp(self.cfg.netns)
        w0, w1 = window["before"], window["after"]
        run = measure_flow(self.tracer, w0[0], w1[0], self.topo,
                           lambda f: f.flow.dport == self.cfg.port and f.app_pid == self.server.pid,
                           app_cpu, waits_of(w0, w1))
        if prof and run:
            # the profile has no reader pid: the port alone picks the flow
            run["profile"] = run_profile_of(prof, lambda f: f.flow.dport == self.cfg.port)
        if not run:
            raise SweepError(f"no traffic to port {self.cfg.port} read by the server in cell "
                             f"{kernel_cpu}:{app_cpu}: is the client on the other host running?")
        run["throughput_bps"] = run.pop("tracer_throughput_bps")
        if self.irqs:
            run.update(irq_figures(self.irqs, window["irqs_before"], window["irqs_after"],
                                   run.get("rx_queue")))
        # the sender is another host: its retransmits are seen here only as the receiver sees
        # them, namespace-wide (receiver_tcp)
        run["receiver_tcp"] = counter_delta(tcp0, tcp1)
        if setting:
            run["device_state"] = self.state
        return run

    def close(self):
        if self.steering:
            self.steering.close()
        if self.irq_before:
            from steer.steering.affinity import restore_irqs
            restore_irqs(self.irq_before)
        if self.touched:
            self._restore_device()
        if self.server.poll() is None:
            os.killpg(self.server.pid, signal.SIGTERM)
            try:
                self.server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.server.pid, signal.SIGKILL)


    def _restore_device(self) -> None:
        from steer.steering.xdp import SteerError, netns_path
        want = target_state({}, self.found, self.cfg.settings())   # everything swept, as found
        try:
            apply_state(self.cfg.dev, netns_path(self.cfg.netns), want)
        except (SettingError, SteerError) as e:
            raise SweepError(f"{self.cfg.dev} could not be put back as found "
                             f"({setting_label(want)}): {e}") from None
        self.touched = False


def established_ports(pid: int) -> set[int]:
    """The local ports of the TCP connections established in the network namespace of PID (its
    /proc/PID/net/tcp and tcp6: that namespace's, whoever owns them)."""
    ports = set()
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                next(f, None)
                for line in f:
                    w = line.split()
                    if len(w) > 3 and w[3] == "01":   # TCP_ESTABLISHED
                        ports.add(int(w[1].rsplit(":", 1)[1], 16))
        except OSError:
            pass
    return ports


def sample_with_waits(tracer: Tracer, cfg: SweepConfig) -> tuple:
    """(the tracer's sample, its latency totals with cfg.latency, else None), read one after
    the other at a window's edge."""
    return tracer.sample(), tracer.latency_totals() if cfg.latency else None


def waits_of(before: tuple, after: tuple) -> tuple[dict, dict] | None:
    """measure_flow's WAITS from two sample_with_waits() reads (None: --latency off)."""
    return None if before[1] is None else (before[1], after[1])


def _profiled(profiler: Tracer | None, traffic):
    """TRAFFIC() run, and its profile where there is a PROFILER (else None)."""
    if profiler is None:
        traffic()
        return None
    from steer.trace.profile import run_profile
    return run_profile(profiler, traffic)


def run_sweep(cfg: SweepConfig, out_dir: str, tracer: Tracer, topo: Topology, *,
              resume: bool = False, progress=None, should_stop=lambda: False,
              profiler: Tracer | None = None) -> dict:
    """Run every cell not done yet; returns the results (also in out_dir/results.json). When
    SHOULD_STOP turns true the run under way is abandoned, everything is torn down, and
    SweepStopped is raised with the finished cells saved. PROFILER: a tracer started with
    profile=True, for cfg.profile."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "results.json")
    if resume:
        results = load_results(path, cfg)
    else:
        results = {"version": RESULTS_VERSION, "config": cfg.as_dict(), "host": host_info(topo, cfg),
                   "capabilities": tracer.capabilities.as_dict(), "cells": [], "complete": False}
    done = {cell_key(c) for c in results["cells"]}
    todo = [c for c in cells_of(cfg) if _key(*c) not in done]
    if cfg.mode == "lab":
        runner = LabRunner(cfg, tracer, topo, should_stop, profiler)
    else:
        runner = HostRunner(cfg, tracer, topo, should_stop, profiler,
                            device=results["host"].get("config", {}).get("device"))
    task = progress.add_task("sweep", total=len(cells_of(cfg)), completed=len(done)) if progress else None
    try:
        for k, a, n, s in todo:
            if should_stop():
                raise SweepStopped
            if progress:
                progress.update(task, description=f"kernel CPU {k}, app CPU {a}"
                                + (f", {n} flows" if len(cfg.flows) > 1 else "")
                                + (f", {setting_label(s)}" if s else ""))
            runs = [runner.run(k, a, n, s) for _ in range(cfg.repeat)]
            config = results["host"].setdefault("config", {})
            if runner.device_config is not None and "device" not in config:
                config["device"] = runner.device_config
            results["cells"].append(summarize(k, a, runs, topo, device_sockets(results, topo), n, s))
            save_results(path, results)
            if progress:
                progress.advance(task)
        results["complete"] = True
        save_results(path, results)
    finally:
        runner.close()
    return results


def write_outputs(results: dict, out_dir: str, topo: Topology, figures: bool = True) -> list[str]:
    """results.csv, report.md and (FIGURES) the PNG and SVG figures beside results.json."""
    from steer.experiment.report import report_md, to_csv
    files = [os.path.join(out_dir, "results.json")]
    write_atomically(os.path.join(out_dir, "results.csv"), to_csv(results))
    files.append(os.path.join(out_dir, "results.csv"))
    if figures:   # matplotlib: most of a short sweep's time (its import alone 0.8 s here)
        from steer.experiment.figures import write_figures
        files += write_figures(results, out_dir, topo)
    write_atomically(os.path.join(out_dir, "report.md"), report_md(results, topo))
    files.append(os.path.join(out_dir, "report.md"))
    return files


def describe(cfg: SweepConfig) -> str:
    n = len(cells_of(cfg))
    return (f"{n} cells (CPUs {format_cpulist(cfg.cpus)}) x {cfg.repeat} run(s) x {cfg.seconds:g} s, "
            f"about {duration_text(estimated_seconds(cfg))}, "
            f"kernel side by {cfg.method}, traffic from {'the lab' if cfg.mode == 'lab' else cfg.dev}"
            + (f"; device settings: {' / '.join(map(setting_label, cfg.settings()))}"
               if cfg.pause or cfg.offloads else "")
            + (f"; {paper_text(cfg.as_dict())}" if cfg.paper else "")
            + ("; with how long the data waits (--latency)" if cfg.latency else ""))

