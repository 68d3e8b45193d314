"""The affinity sweep: the NDM'13 experiment as one command. For every (kernel CPU, app CPU) pair,
move the flow's kernel receive processing, pin the reader, run traffic, and record throughput, CPU
cost per GB on each side, LLC misses where a PMU exists, and the cell's class.

Two traffic sources:
- the lab (default): a fresh iperf3 flow between lab namespaces for every run; the kernel side is
  moved with RPS on the receiving veth (the lab's analogue of the NIC queue's IRQ affinity) or with
  XDP steering; throughput is iperf3's own receiver count.
- a real host (--dev IFACE --server-cmd CMD): CMD (the receiver, e.g. `iperf3 -s`) is started once
  and fed by a client on another machine; for each cell its threads are re-pinned and the flow is
  steered with XDP; throughput is what the reader got, by the tracer.

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
from dataclasses import dataclass

from .classify import classify
from .flowspec import FlowSpec
from .flows import build_snapshot
from .topology import Topology, format_cpulist, nic_local, nic_sockets
from .tracer import Tracer
from .units import per_gb

RESULTS_VERSION = 1
SETTLE_SECONDS = 0.5    # after a move, before measuring: the old placement's queues drain


class SweepError(Exception):
    pass


class SweepStopped(Exception):
    """The user asked to stop (Ctrl-C, SIGTERM): raised at a safe point, never asynchronously."""


@dataclass
class SweepConfig:
    cpus: list[int]
    seconds: float
    repeat: int
    method: str            # rps | xdp
    mode: str              # lab | host
    dev: str | None = None
    netns: str | None = None
    server_cmd: str | None = None
    port: int = 5201

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def cells_of(cfg: SweepConfig) -> list[tuple[int, int]]:
    return [(k, a) for k in cfg.cpus for a in cfg.cpus]


def host_info(topo: Topology, cfg: SweepConfig | None = None) -> dict:
    """Who measured: the host, its topology, and its receive-side configuration (in the lab the
    receiving device's part is added by the first run, when the device exists)."""
    from .hostconfig import host_config
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
    if old.get("version") != RESULTS_VERSION or old.get("config") != cfg.as_dict():
        raise SweepError(f"--resume: {path} was made with other settings "
                         f"({old.get('config')}); use another --out or the same options")
    return old


def save_results(path: str, results: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f, indent=1)
    os.replace(tmp, path)


def _median(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def summarize(kernel_cpu: int, app_cpu: int, runs: list[dict], topo: Topology,
              nic: tuple[int, ...] | None = None) -> dict:
    """A cell: its class, its medians over RUNS, and whether each side sat on a socket of the
    receiving NIC (NIC: its sockets; None leaves nic_local unknown)."""
    p = classify(kernel_cpu, app_cpu, topo)
    cell = {"kernel_cpu": kernel_cpu, "app_cpu": app_cpu, "class": p.cls,
            "shared_llc": p.shared_llc, "smt_sibling": p.smt_sibling,
            "nic_local": {"kernel": nic_local(topo, nic, kernel_cpu),
                          "app": nic_local(topo, nic, app_cpu)},
            "runs": runs}
    for key in ("throughput_bps", "kernel_seconds_per_gb", "app_seconds_per_gb",
                "llc_misses_kernel_per_gb", "llc_misses_app_per_gb"):
        cell[key] = _median(r.get(key) for r in runs)
    for key in ("measured_kernel_cpu", "measured_stack_cpu", "measured_app_cpu"):
        seen = [r.get(key) for r in runs if r.get(key) is not None]
        cell[key] = max(set(seen), key=seen.count) if seen else None
    return cell


def measure_flow(tracer: Tracer, before, after, topo, match) -> dict:
    """The figures of the flow(s) MATCH selects between two tracer samples."""
    snap = build_snapshot(before, after, topo, tracer.capabilities)
    flows = [f for f in snap.flows if match(f)]
    if not flows:
        return {}
    f = max(flows, key=lambda f: f.rx_bytes + f.app_bytes)
    nbytes = f.rx_bytes or f.app_bytes
    return {"rx_bytes": f.rx_bytes, "app_bytes": f.app_bytes,
            "tracer_throughput_bps": f.app_bytes * 8 / snap.duration if snap.duration else None,
            "kernel_seconds_per_gb": per_gb(f.kernel_seconds, nbytes),
            "app_seconds_per_gb": per_gb(f.app_seconds, nbytes),
            "llc_misses_kernel_per_gb": per_gb(f.llc_misses_kernel, nbytes),
            "llc_misses_app_per_gb": per_gb(f.llc_misses_app, nbytes),
            "measured_kernel_cpu": f.kernel_cpu, "measured_kernel_share": f.kernel_cpu_share,
            "measured_stack_cpu": f.stack_cpu, "measured_stack_share": f.stack_cpu_share,
            "measured_app_cpu": f.app_cpu, "measured_app_share": f.app_cpu_share}


def _sleep(seconds: float, should_stop) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if should_stop():
            raise SweepStopped
        time.sleep(min(0.1, max(0.0, end - time.monotonic())))


class LabRunner:
    """One fresh iperf3 flow per run between lab namespaces."""

    def __init__(self, cfg: SweepConfig, tracer: Tracer, topo: Topology, should_stop):
        self.cfg, self.tracer, self.topo, self.should_stop = cfg, tracer, topo, should_stop
        self.device_config: dict | None = None   # the receiving veth's, read by the first run

    def run(self, kernel_cpu: int, app_cpu: int) -> dict:
        from .lab import Lab, LabFlow
        from .affinity import set_rps
        from .hostconfig import host_config
        from .steering import XdpSteering
        with Lab([LabFlow(None, app_cpu, self.cfg.port)], seconds=self.cfg.seconds) as lab:
            if self.device_config is None:   # as it is before this sweep changes its RPS
                self.device_config = host_config(lab.rx_dev, lab.rx_netns)["device"]
            steering = None
            try:
                if self.cfg.method == "rps":
                    set_rps(lab.rx_dev, [kernel_cpu], netns=lab.rx_netns, remember=False)
                else:
                    steering = XdpSteering(lab.rx_dev, lab.rx_netns, pinned=False).open()
                    steering.pin(FlowSpec(proto="tcp", dport=self.cfg.port), kernel_cpu)
                lab.start_servers()
                before = self.tracer.sample()
                lab.start_clients()
                while lab.running():
                    _sleep(0.1, self.should_stop)
                (res,) = lab.wait(timeout=30)
                after = self.tracer.sample()
            finally:
                if steering:
                    steering.close()
        if res.error:
            raise SweepError(f"iperf3 failed in cell {kernel_cpu}:{app_cpu}: {res.error}")
        run = measure_flow(self.tracer, before, after, self.topo,
                           lambda f: f.flow.sport == res.sender_port and f.flow.dport == self.cfg.port)
        end = res.raw["end"]
        run["throughput_bps"] = end["sum_received"]["bits_per_second"]
        run["iperf3_received_bytes"] = res.received_bytes
        run["retransmits"] = end["sum_sent"].get("retransmits")
        return run

    def close(self):
        pass


class HostRunner:
    """A receiver started once, fed from another machine; re-pinned and re-steered per cell."""

    def __init__(self, cfg: SweepConfig, tracer: Tracer, topo: Topology, should_stop):
        from .kernel import enter_netns
        from .steering import XdpSteering, netns_path
        self.cfg, self.tracer, self.topo, self.should_stop = cfg, tracer, topo, should_stop
        self.device_config = None   # host_info read it: the device is there from the start
        self.steering = XdpSteering(cfg.dev, cfg.netns, pinned=False).open()
        self.spec = FlowSpec(proto="tcp", dport=cfg.port)
        try:
            argv = shlex.split(cfg.server_cmd)
        except ValueError as e:
            raise SweepError(f"--server-cmd: {e}") from None
        ns = netns_path(cfg.netns)

        try:   # the receiver lives where its interface is
            self.server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                           start_new_session=True,
                                           preexec_fn=(lambda: enter_netns(ns)) if ns else None)
        except OSError as e:
            self.steering.close()
            raise SweepError(f"--server-cmd {argv[0]}: {e.strerror}") from None

    def run(self, kernel_cpu: int, app_cpu: int) -> dict:
        from .affinity import set_app_affinity
        if self.server.poll() is not None:
            err = self.server.stderr.read().decode(errors="replace").strip()
            raise SweepError(f"the server command exited ({self.server.returncode}): {err}")
        set_app_affinity(self.server.pid, {app_cpu})
        self.steering.pin(self.spec, kernel_cpu)
        _sleep(SETTLE_SECONDS, self.should_stop)
        before = self.tracer.sample()
        _sleep(self.cfg.seconds, self.should_stop)
        after = self.tracer.sample()
        run = measure_flow(self.tracer, before, after, self.topo,
                           lambda f: f.flow.dport == self.cfg.port and f.app_pid == self.server.pid)
        if not run:
            raise SweepError(f"no traffic to port {self.cfg.port} read by the server in cell "
                             f"{kernel_cpu}:{app_cpu}: is the client on the other host running?")
        run["throughput_bps"] = run.pop("tracer_throughput_bps")
        return run

    def close(self):
        self.steering.close()
        if self.server.poll() is None:
            os.killpg(self.server.pid, signal.SIGTERM)
            try:
                self.server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.server.pid, signal.SIGKILL)


def run_sweep(cfg: SweepConfig, out_dir: str, tracer: Tracer, topo: Topology, *,
              resume: bool = False, progress=None, should_stop=lambda: False) -> dict:
    """Run every cell not done yet; returns the results (also in out_dir/results.json). When
    SHOULD_STOP turns true the run under way is abandoned, everything is torn down, and
    SweepStopped is raised with the finished cells saved."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "results.json")
    if resume:
        results = load_results(path, cfg)
    else:
        results = {"version": RESULTS_VERSION, "config": cfg.as_dict(), "host": host_info(topo, cfg),
                   "capabilities": tracer.capabilities.as_dict(), "cells": [], "complete": False}
    done = {(c["kernel_cpu"], c["app_cpu"]) for c in results["cells"]}
    todo = [c for c in cells_of(cfg) if c not in done]
    runner = (LabRunner if cfg.mode == "lab" else HostRunner)(cfg, tracer, topo, should_stop)
    task = progress.add_task("sweep", total=len(cells_of(cfg)), completed=len(done)) if progress else None
    try:
        for k, a in todo:
            if should_stop():
                raise SweepStopped
            if progress:
                progress.update(task, description=f"kernel CPU {k}, app CPU {a}")
            runs = [runner.run(k, a) for _ in range(cfg.repeat)]
            config = results["host"].setdefault("config", {})
            if runner.device_config is not None and "device" not in config:
                config["device"] = runner.device_config
            results["cells"].append(summarize(k, a, runs, topo, device_sockets(results, topo)))
            save_results(path, results)
            if progress:
                progress.advance(task)
        results["complete"] = True
        save_results(path, results)
    finally:
        runner.close()
    return results


def write_outputs(results: dict, out_dir: str, topo: Topology) -> list[str]:
    from .figures import write_figures
    from .report import report_md, to_csv
    files = [os.path.join(out_dir, "results.json")]
    with open(os.path.join(out_dir, "results.csv"), "w") as f:
        f.write(to_csv(results))
    files.append(os.path.join(out_dir, "results.csv"))
    files += write_figures(results, out_dir, topo)
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write(report_md(results, topo))
    files.append(os.path.join(out_dir, "report.md"))
    return files


def describe(cfg: SweepConfig) -> str:
    n = len(cells_of(cfg))
    return (f"{n} cells (CPUs {format_cpulist(cfg.cpus)}) x {cfg.repeat} run(s) x {cfg.seconds:g} s, "
            f"kernel side by {cfg.method}, traffic from {'the lab' if cfg.mode == 'lab' else cfg.dev}")
