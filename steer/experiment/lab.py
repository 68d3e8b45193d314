"""The built-in lab: two network namespaces joined by a veth pair, addressed from 198.18.0.0/15
(the benchmarking range), with iperf3 flows whose sender and receiver CPUs are chosen.

Without XDP or GRO a veth has no NAPI: the sender's transmit enqueues to the receive backlog of
its own CPU, so the receiving kernel work of a lab flow runs on the sender's CPU (RPS or cpumap
steering move it elsewhere). The sender's CPU is therefore the lab's "flow affinity" knob and the
receiver's CPU its "application affinity" knob.

Everything is torn down on exit, on Ctrl-C and on exceptions; a lab left behind by a killed
process (its pid is in the namespace name) is removed by the next lab that starts.
"""
from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field, replace

from steer.kernel.namespaces import enter_netns
from steer.kernel.process import die_with_parent
from steer.steering.affinity import napi_threads, set_rps

PREFIX = "steerlab"
NETNS_DIR = "/run/netns"
SENDER_ADDR, RECEIVER_ADDR, PREFIXLEN = "198.18.0.1", "198.18.0.2", 30
SENDER_DEV, RECEIVER_DEV = "veth-tx", "veth-rx"   # each in its own namespace
IPV6_LOOPBACK = "::1"   # LabFlow.ipv6: the receiving namespace's own loopback
BASE_PORT = 5201
_instances = itertools.count(1)   # several labs of one process get names of their own
# Lab.rfs: the host's table of where each flow's reader last read is global (the initial
# namespace's sysctl); its value before a lab set it, and the lab's pid, wait here until that lab
# puts it back, or, if it was killed, the next lab
RFS_SYSCTL = "/proc/sys/net/core/rps_sock_flow_entries"
RFS_SAVED = "/run/steerlab-rps-sock-flow-entries"
RFS_ENTRIES = 4096


class LabError(Exception):
    pass


UDP_DATAGRAM = 1400   # iperf3 -l for UDP flows: a datagram that fits a 1500-byte MTU unfragmented


@dataclass(frozen=True)
class LabFlow:
    """One iperf3 flow: the sender's CPU (where the receive softirq runs unless RPS or XDP moves
    it; None leaves the sender to the scheduler) and the reader's. TCP, or with UDP_RATE (iperf3's
    -b: "300M") UDP datagrams of UDP_SIZE bytes (UDP_DATAGRAM) at that rate. IPV6: over IPv6,
    between two processes of the receiving namespace on its own loopback (::1): the benchmarking
    range the lab's veth is addressed from is IPv4's, and the loopback takes the skbs in on the
    sender's CPU as the veth does."""
    kernel_cpu: int | None
    app_cpu: int
    port: int = 0   # 0: assigned in order from BASE_PORT
    udp_rate: str | None = None
    ipv6: bool = False
    udp_size: int = UDP_DATAGRAM

    @property
    def proto(self) -> str:
        return "udp" if self.udp_rate else "tcp"

    @property
    def server_addr(self) -> str:
        return IPV6_LOOPBACK if self.ipv6 else RECEIVER_ADDR


@dataclass
class FlowResult:
    flow: LabFlow
    sender_port: int | None = None
    received_bytes: int | None = None
    receiver_pid: int | None = None
    error: str | None = None
    raw: dict | None = None


def traced_results(results: list[FlowResult], snap) -> list[dict]:
    """Each lab flow's iperf3 result beside what the tracer saw of it in SNAP (a flows.Snapshot):
    the flow with the sender's port and the flow's server port, None where it saw none."""
    out = []
    for r in results:
        match = next((f for f in snap.flows if f.flow.sport == r.sender_port
                      and f.flow.dport == r.flow.port and f.flow.proto == r.flow.proto), None)
        out.append({"lab_kernel_cpu": r.flow.kernel_cpu, "lab_app_cpu": r.flow.app_cpu,
                    "port": r.flow.port, "iperf3_received_bytes": r.received_bytes,
                    "error": r.error,
                    "traced": match.as_json(snap.capabilities) if match else None})
    return out


def usable_cpus() -> list[int]:
    """The CPUs this process may place lab processes on: taskset or a cgroup cpuset (a CI runner,
    a container) may allow fewer than are online, and not necessarily CPU 0."""
    return sorted(os.sched_getaffinity(0))


def default_flows() -> list[LabFlow]:
    """The lab's default: on the first usable CPU, a flow whose receive softirq shares the
    reader's core; where a second CPU is usable, a flow whose softirq runs on it (another core)."""
    cpus = usable_cpus()
    first = cpus[0]
    return [LabFlow(first, first)] + ([LabFlow(cpus[1], first)] if len(cpus) > 1 else [])


def _ns_path(name: str) -> str:
    return os.path.join(NETNS_DIR, name)


def _in_netns(name: str, cpu: int | None):
    """preexec_fn: enter the lab namespace (network only) and pin to CPU before exec."""
    path = _ns_path(name)
    parent = os.getpid()

    def enter():
        die_with_parent(parent)  # first: a lab killed with SIGKILL takes its iperf3 along
        enter_netns(path)
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        os.setpgid(0, 0)   # own process group: teardown kills it whole
    return enter


def listening(pid: int, port: int, ipv6: bool = False) -> bool:
    """Whether a TCP socket listens on PORT in the network namespace of process PID (its own
    view of /proc/net/tcp or tcp6)."""
    try:
        with open(f"/proc/{pid}/net/tcp6" if ipv6 else f"/proc/{pid}/net/tcp") as fh:
            return any(line.split()[1].endswith(f":{port:04X}") and line.split()[3] == "0A"
                       for line in fh.readlines()[1:])
    except OSError:
        return False


def _ip(*args: str) -> None:
    """One iproute2 command; it returns once the kernel has done it. (pyroute2's NetNS did the
    same through a helper process per namespace, and under CPU load the lab came up without its
    veth or its address about one time in five.)"""
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode:
        raise LabError(f"ip {' '.join(args)}: {r.stderr.strip() or 'failed'}")


def _ip_batch(commands: list[list[str]], netns: str | None = None) -> None:
    """COMMANDS in one iproute2 process (`ip [-n NETNS] -batch -`), in order, each done by the
    kernel before the next, the first that fails ending it. One process where a process a
    command took a tenth of a second each under the test guests' emulation (9 to bring a lab up)."""
    r = subprocess.run(["ip", *(["-n", netns] if netns else []), "-batch", "-"],
                       input="".join(" ".join(c) + "\n" for c in commands),
                       capture_output=True, text=True)
    if r.returncode:
        err = r.stderr.strip()
        m = re.search(r"Command failed -:(\d+)", err)
        n = int(m.group(1)) if m else 0
        what = " ".join(commands[n - 1]) if 0 < n <= len(commands) else "-batch"
        err = err.replace(m.group(0), "").strip() if m else err
        raise LabError(f"ip {what}: {err or 'failed'}")


def _in_lab_ns(ns: str, cmd: list[str], what: str) -> None:
    r = subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True)
    if r.returncode:
        raise LabError(f"{what}: {' '.join(cmd)}: {r.stderr.strip() or 'failed'}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lab_namespaces() -> list[str]:
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(PREFIX + "-"))
    except OSError:
        return []


def _restore_rfs(only_if_dead: bool) -> None:
    """Put the host's RFS table size back as a lab found it (ONLY_IF_DEAD: if that lab is gone)."""
    try:
        with open(RFS_SAVED) as f:
            pid, old = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        return
    if only_if_dead and _pid_alive(pid):
        return
    with open(RFS_SYSCTL, "w") as f:
        f.write(str(old))
    os.unlink(RFS_SAVED)


def remove_stale_labs() -> list[str]:
    """Remove lab namespaces whose creating process is gone (a kill -9 leaves them), and put
    back the host's RFS table size such a lab set."""
    removed = []
    _restore_rfs(only_if_dead=True)
    for name in lab_namespaces():
        parts = name.split("-")
        if len(parts) >= 3 and parts[1].isdigit() and not _pid_alive(int(parts[1])):
            _kill_ns_processes(name)
            _ip("netns", "del", name)
            removed.append(name)
    return removed


def _kill_ns_processes(name: str) -> None:
    """Kill every process whose network namespace is the lab's (iperf3 left by a killed lab)."""
    try:
        target = os.stat(_ns_path(name))
    except OSError:
        return
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            st = os.stat(f"/proc/{pid}/ns/net")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


@dataclass
class Lab:
    flows: list[LabFlow]
    seconds: float = 10.0
    client_args: tuple[str, ...] = ()   # more iperf3 client options (the sweep's --paper: -Z, -O)
    # the receiving veth polled by NAPI (GRO on, TSO off on the sender) in a kthread of its own,
    # napi/veth-rx-<id>, as drivers can with /sys/class/net/DEV/threaded, pinned to the first
    # flow's kernel CPU
    threaded_napi: bool = False
    # the sender's TSO off: its packets reach the receiving veth MSS-sized, as a NIC takes them
    # off the wire, rather than as 64 KB TSO skbs that no receive offload could aggregate further
    # (and that a veth hands past its NAPI: veth_skb_is_eligible_for_gro)
    wire_sized: bool = False
    # RPS with flow steering (RFS) on the receiving veth: each flow's receive processing goes up
    # the stack on the CPU where its reader last read (the CPUs of the lab's flows), through the
    # backlog of that CPU, as RFS does for a NIC's queue; the sender's CPU raises a NET_RX
    # softirq only to send the IPI. It sets the host's table of flows (rps_sock_flow_entries,
    # global) while the lab is up
    rfs: bool = False
    tag: str = field(default_factory=lambda: f"{os.getpid()}-{next(_instances)}")

    def __post_init__(self):
        self.tx = f"{PREFIX}-{self.tag}-tx"
        self.rx = f"{PREFIX}-{self.tag}-rx"
        self._procs: list[subprocess.Popen] = []
        self._servers: dict[int, subprocess.Popen] = {}
        self._clients: dict[int, subprocess.Popen] = {}
        self._up = False
        self._rfs_saved = False   # RFS_SAVED is this lab's to put back
        self.napi_pids: list[int] = []   # with threaded_napi: the receiving veth's pollers
        self.flows = [f if f.port else replace(f, port=BASE_PORT + i)
                      for i, f in enumerate(self.flows)]

    # -- network -----------------------------------------------------------------------------
    def up(self) -> "Lab":
        if not shutil.which("iperf3"):
            raise LabError("iperf3 not found: apt-get install iperf3")
        usable = usable_cpus()
        for f in self.flows:
            for c in (f.kernel_cpu, f.app_cpu):
                if c is not None and c not in usable:
                    from steer.model.topology import format_cpulist
                    raise LabError(f"lab CPU {c} is not usable by this process: it may run on CPUs "
                                   f"{format_cpulist(usable)} (taskset or cgroup cpuset)")
        remove_stale_labs()
        self._up = True
        try:
            _ip_batch([["netns", "add", self.tx], ["netns", "add", self.rx]])
            self._link()
        except BaseException as e:
            # Ctrl-C in the middle of the set-up too: __exit__ never runs when __enter__ raises
            self.down()
            if isinstance(e, Exception):
                raise LabError(f"lab network setup failed: {e}") from None
            raise
        return self

    def _link(self) -> None:
        for ns, dev, addr in ((self.tx, SENDER_DEV, SENDER_ADDR),
                              (self.rx, RECEIVER_DEV, RECEIVER_ADDR)):
            first = [["link", "add", SENDER_DEV, "type", "veth", "peer", "name", RECEIVER_DEV,
                      "netns", self.rx]] if ns == self.tx else []
            _ip_batch([*first, ["addr", "add", f"{addr}/{PREFIXLEN}", "dev", dev],
                       ["link", "set", dev, "up"], ["link", "set", "lo", "up"]], netns=ns)
        if self.wire_sized or self.threaded_napi:
            _in_lab_ns(self.tx, ["ethtool", "-K", SENDER_DEV, "tso", "off"],
                       f"wire-sized packets from {SENDER_DEV}")
        if self.threaded_napi:
            self._thread_napi()
        if self.rfs:
            self._flow_steering()

    def _flow_steering(self) -> None:
        if os.path.exists(RFS_SAVED):
            raise LabError("RFS: another lab holds the host's flow table (rps_sock_flow_entries)")
        with open(RFS_SYSCTL) as f:
            old = int(f.read())
        with open(RFS_SAVED, "w") as f:
            f.write(f"{os.getpid()} {old}\n")
        self._rfs_saved = True
        with open(RFS_SYSCTL, "w") as f:
            f.write(str(max(old, RFS_ENTRIES)))
        set_rps(RECEIVER_DEV, sorted({c for f in self.flows for c in (f.kernel_cpu, f.app_cpu)
                                      if c is not None}), netns=self.rx_netns, remember=False)
        _in_lab_ns(self.rx, ["sh", "-c", f"echo {RFS_ENTRIES} > "
                                         f"/sys/class/net/{RECEIVER_DEV}/queues/rx-0/rps_flow_cnt"],
                   f"RFS on {RECEIVER_DEV}")

    def _thread_napi(self) -> None:
        before = set(napi_threads())
        # a veth takes an skb through its peer's NAPI only when that can aggregate it: GRO on, and
        # (_link) the sender's packets not already large
        for cmd in (["ethtool", "-K", RECEIVER_DEV, "gro", "on"],
                    ["sh", "-c", f"echo 1 > /sys/class/net/{RECEIVER_DEV}/threaded"]):
            _in_lab_ns(self.rx, cmd, f"threaded NAPI on {RECEIVER_DEV}")
        self.napi_pids = sorted(set(napi_threads()) - before)
        if not self.napi_pids:
            raise LabError(f"threaded NAPI on {RECEIVER_DEV}: no napi/ kthread appeared")
        cpu = self.flows[0].kernel_cpu
        for pid in self.napi_pids:
            if cpu is not None:
                os.sched_setaffinity(pid, {cpu})

    @property
    def rx_dev(self) -> str:
        """The receiving device, where steering attaches (in the namespace rx_netns)."""
        return RECEIVER_DEV

    @property
    def rx_netns(self) -> str:
        """The receiving namespace's path, as steering and RPS take it."""
        return _ns_path(self.rx)

    @property
    def tx_netns(self) -> str:
        """The sending namespace's path."""
        return _ns_path(self.tx)

    def recreate_link(self, namespace: bool = False) -> None:
        """Remove the veth pair, and with NAMESPACE the receiving namespace, and create them again
        under the same names: what a driver reload (a new ifindex) or a container restart does."""
        if namespace:
            _ip("netns", "del", self.rx)
            _ip("netns", "add", self.rx)
        else:
            _ip("-n", self.rx, "link", "del", RECEIVER_DEV)
        self._link()

    # -- traffic -----------------------------------------------------------------------------
    def start_servers(self) -> None:
        for f in self.flows:
            p = subprocess.Popen(["iperf3", "-s", "-1", "-B", f.server_addr, "-p", str(f.port)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 preexec_fn=_in_netns(self.rx, f.app_cpu))
            self._procs.append(p)
            self._servers[f.port] = p
        deadline = time.monotonic() + 5
        for f in self.flows:   # wait until each server listens, so no client is refused
            while not self._listening(f.port, f.ipv6):
                if self._servers[f.port].poll() is not None or time.monotonic() > deadline:
                    err = self._servers[f.port].stderr.read().decode().strip()
                    raise LabError(f"iperf3 server on port {f.port} did not start: {err}")
                time.sleep(0.02)

    def _listening(self, port: int, ipv6: bool = False) -> bool:
        return listening(self._servers[port].pid, port, ipv6)

    def start_clients(self, seconds: float | None = None) -> None:
        secs = max(1, round(seconds or self.seconds))
        for f in self.flows:
            udp = ["-u", "-b", f.udp_rate, "-l", str(f.udp_size)] if f.udp_rate else []
            p = subprocess.Popen(["iperf3", "-c", f.server_addr, "-p", str(f.port), "-t",
                                  str(secs), *udp, *self.client_args, "--json"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 preexec_fn=_in_netns(self.rx if f.ipv6 else self.tx,
                                                      f.kernel_cpu))
            self._procs.append(p)
            self._clients[f.port] = p

    def start(self, seconds: float | None = None) -> None:
        self.start_servers()
        self.start_clients(seconds)

    def receiver_pid(self, port: int) -> int:
        return self._servers[port].pid

    def running(self) -> bool:
        return any(p.poll() is None for p in self._clients.values())

    def wait(self, timeout: float | None = None) -> list[FlowResult]:
        out = []
        for f in self.flows:
            c = self._clients.get(f.port)
            r = FlowResult(f, receiver_pid=self._servers[f.port].pid if f.port in self._servers else None)
            if c is None:
                r.error = "not started"
                out.append(r)
                continue
            try:
                stdout, stderr = c.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                r.error = "iperf3 client did not finish"
                out.append(r)
                continue
            try:
                j = json.loads(stdout)
            except ValueError:
                r.error = (stderr.decode().strip() or "iperf3 printed no JSON")
                out.append(r)
                continue
            r.raw = j
            if "error" in j:
                r.error = j["error"]
            else:
                r.sender_port = j["start"]["connected"][0]["local_port"]
                r.received_bytes = j["end"]["sum_received"]["bytes"]
            out.append(r)
        return out

    # -- teardown ----------------------------------------------------------------------------
    def stop_traffic(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for p in self._procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            for s in (p.stdout, p.stderr):
                if s:
                    s.close()
        self._procs.clear()

    def down(self) -> None:
        self.stop_traffic()
        if not self._up:
            return
        for name in (self.tx, self.rx):
            _kill_ns_processes(name)
            if os.path.exists(_ns_path(name)):
                try:
                    _ip("netns", "del", name)
                except LabError:
                    pass
        if self._rfs_saved:
            _restore_rfs(only_if_dead=False)
            self._rfs_saved = False
        self._up = False

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()
