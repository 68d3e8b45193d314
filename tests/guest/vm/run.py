"""Run steer's privileged tests inside a qemu guest with two sockets and Debian's 6.1 kernel.

This host has one socket and a kernel (6.18) with sock_recv_length, so the cross-socket class and
the tracer's fexit/kprobe fallback are never seen live on it. The guest is 4 vCPUs as 2 sockets x 2
cores (--cores N: 2 x N, the big-host tier's 8), one NUMA node per socket, under TCG (software emulation: this host's KVM cannot run a
stock guest). Its userspace is the host's own root, shared read-only over virtiofs with a tmpfs
overlay for writes, so the guest runs the same checkout, venv and tools as the host; its kernel and
modules come from Debian's linux-image-cloud-amd64 package, unpacked under build/vm/. Nothing but
the console leaves the guest: it prints the tests' exit status as a marker line, and this script
returns it (75 when the guest kernel locked up: the emulated machine's fault, not a test's).

The guest has one network device, for the IRQ method and NIC locality (the lab's veth has neither
interrupts nor a NUMA node): a virtio-net with NIC_QUEUES queue pairs, one MSI-X vector per queue,
behind a PCI expander bridge on the guest's NUMA node NIC_NUMA_NODE, fed by a multi-queue tap in a
namespace of the host that this script creates (NIC_NETNS, 198.18.100.0/30) and deletes. A feeder
there connects an iperf3 client (FEEDER_RATE) to the guest's FEEDER_PORT again and again, so a
receiver the guest starts on that port gets a flow from outside, as from another machine.

    tests/guest/vm/run.py [--timeout S] [--keep] [PYTEST ARGS...]

Default pytest arguments: tests/guest/test_vm_live.py. Needs root (virtiofsd shares /; the tap's
namespace), qemu-system-x86, kmod and iperf3 (`scripts/setup.sh --vm` installs them), and apt
access to download two packages once.
"""
from __future__ import annotations

import argparse
import ctypes
import fcntl
import gzip
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
WORK = ROOT / "build" / "vm"
KERNEL_META = "linux-image-cloud-amd64"
VIRTIOFSD = "/usr/lib/qemu/virtiofsd"
# stage 1 (the initramfs) loads these, in this order, to mount the shared root under an overlay
INITRD_MODULES = ["fuse", "virtio_ring", "virtio", "virtio_pci_modern_dev",
                  "virtio_pci_legacy_dev", "virtio_pci", "virtiofs", "overlay"]
# split out of virtio_pci in 5.12: absent from older kernels, built into trixie's
SPLIT_LATER = {"virtio_pci_modern_dev", "virtio_pci_legacy_dev"}
# what only this guest shows; the other live modules run too (VM_TESTS=...), slowly under TCG
DEFAULT_TESTS = ["tests/guest/test_vm_live.py"]
EXIT_MARKER = re.compile(rb"STEER_VM_EXIT=(\d+)")
# tests/live/test_kernel_smoke.py's `steer check --json` of the guest, one line on the console
CHECK_MARKER = re.compile(rb"STEER_VM_CHECK=(\{.*\})\r?$", re.M)
# a measurement of the guest, NAME and a JSON object: kept as build/vm/NAME.json
RESULT_MARKER = re.compile(rb"STEER_VM_RESULT=([\w.-]+) (\{.*\})\r?$", re.M)


def keep_check(log: Path, kernel: str) -> Path | None:
    """The guest's steer check report, from its console, as build/vm/check-KERNEL.json."""
    m = CHECK_MARKER.search(log.read_bytes())
    if not m:
        return None
    out = WORK / f"check-{kernel}.json"
    out.write_text(json.dumps(json.loads(m.group(1)), indent=2) + "\n")
    return out

def keep_results(log: Path) -> list[Path]:
    """What the guest measured (RESULT_MARKER lines: a name and a JSON object on the console),
    each as build/vm/NAME.json, where benchmarks take them (bench/scale_cpus.py)."""
    out = []
    for m in RESULT_MARKER.finditer(log.read_bytes()):
        name = m.group(1).decode()
        path = WORK / f"{name}.json"
        path.write_text(json.dumps(json.loads(m.group(2)), indent=2) + "\n")
        out.append(path)
    return out


NIC_NETNS = "steer-vm-nic"      # the host's end of the guest's NIC: a namespace of its own
NIC_TAP = "steervm0"
NIC_HOST_ADDR, NIC_GUEST_ADDR, NIC_PREFIXLEN = "198.18.100.1", "198.18.100.2", 30
CORES = 2                       # per socket, of the two (--cores: the big-host tier takes 8)
NIC_QUEUES = 4                  # one queue pair per guest vCPU, as virtio-net sets by default
NIC_NUMA_NODE = 1               # the NIC on the second socket: NIC-local is then not just CPU 0's
FEEDER_PORT = 5301              # not iperf3's default: no lab test inside the guest listens here


def fail(msg: str) -> None:
    sys.exit(f"test-vm: {msg}")


def run(cmd, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode:
        fail(f"{' '.join(map(str, cmd))} failed: {(r.stderr or r.stdout).strip()[-400:]}")
    return r


# the guest kernels: Debian's cloud kernel of each release, the host's own (bookworm, 6.1) by
# default; the others through an apt of their own (build/vm/apt-SUITE), its lists fetched once,
# signed by the host's Debian archive keyring
KERNELS = {"6.1": None, "5.10": "bullseye", "6.12": "trixie"}
DEFAULT_KERNEL = "6.1"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


def apt_options(suite: str | None) -> list[str]:
    """apt-get/apt-cache options for SUITE's own package lists (None: the host's)."""
    if suite is None:
        return []
    root = WORK / f"apt-{suite}"
    for d in ("lists/partial", "cache/archives/partial"):
        (root / d).mkdir(parents=True, exist_ok=True)
    sources = root / "sources.list"
    sources.write_text(f"deb [signed-by={KEYRING}] http://deb.debian.org/debian {suite} main\n")
    opts = ["-o", f"Dir::Etc::SourceList={sources}", "-o", "Dir::Etc::SourceParts=/dev/null",
            "-o", f"Dir::State::Lists={root / 'lists'}", "-o", f"Dir::Cache={root / 'cache'}"]
    if not any((root / "lists").glob("*_Packages")):
        run(["apt-get", *opts, "update", "-q"])
    return opts


def fetch_deb(package: str, suite: str | None = None) -> Path:
    """The package's .deb in build/vm/debs (downloaded once, by apt, as the host's own packages)."""
    debs = WORK / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    found = sorted(debs.glob(f"{package}_*.deb"))
    if found:
        return found[-1]
    # apt's sandbox user cannot write into a root-owned build tree; a 1777 scratch dir it can
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o1777)
        run(["apt-get", *apt_options(suite), "download", "-q", package], cwd=tmp)
        (deb,) = Path(tmp).glob(f"{package}_*.deb")
        return Path(shutil.move(str(deb), debs / deb.name))


def kernel_package(suite: str | None = None) -> str:
    """The versioned image package the metapackage points at (the release's newest cloud kernel)."""
    out = run(["apt-cache", *apt_options(suite), "depends", KERNEL_META]).stdout
    m = re.search(r"Depends: (linux-image-[\w.+-]+-cloud-amd64)", out)
    if not m:
        fail(f"apt-cache does not know {KERNEL_META} (run apt-get update)")
    return m.group(1)


def unpack(deb: Path, dest: Path) -> Path:
    if not dest.exists():
        tmp = dest.with_suffix(".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        run(["dpkg-deb", "-x", str(deb), str(tmp)])
        tmp.rename(dest)
    return dest


def prepare_kernel(kernel: str = DEFAULT_KERNEL) -> tuple[Path, Path, str]:
    """(vmlinuz, the modules tree the guest mounts at /lib/modules, version)."""
    suite = KERNELS[kernel]
    pkg = kernel_package(suite)
    tree = unpack(fetch_deb(pkg, suite), WORK / pkg)
    base = tree / "usr" if (tree / "usr/lib/modules").is_dir() else tree   # trixie: /usr/lib
    (version,) = [p.name for p in (base / "lib/modules").iterdir()]
    if not (base / "lib/modules" / version / "modules.dep").exists():
        depmod = shutil.which("depmod") or "/usr/sbin/depmod"
        if not os.path.exists(depmod):
            fail("depmod not found (apt-get install kmod, or scripts/setup.sh --vm)")
        run([depmod, "-b", str(base), version])
    return tree / "boot" / f"vmlinuz-{version}", base / "lib/modules", version


def module_bytes(path: Path) -> bytes:
    """A module's ELF: trixie's kernels ship them xz-compressed, which busybox insmod cannot load."""
    import lzma
    return lzma.decompress(path.read_bytes()) if path.suffix == ".xz" else path.read_bytes()


def cpio_newc(files: list[tuple[str, int, bytes]]) -> bytes:
    """An initramfs archive: (path, mode, data) entries, directories with empty data."""
    out = io.BytesIO()

    def entry(name: str, mode: int, data: bytes, ino: int) -> None:
        name_b = name.encode() + b"\0"
        hdr = "070701" + "".join(f"{v:08x}" for v in (
            ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name_b), 0))
        out.write(hdr.encode() + name_b)
        out.write(b"\0" * (-(110 + len(name_b)) % 4))
        out.write(data)
        out.write(b"\0" * (-len(data) % 4))

    for ino, (name, mode, data) in enumerate(files, 1):
        entry(name, mode, data, ino)
    entry("TRAILER!!!", 0, b"", 0)
    return out.getvalue()


def build_initramfs(modules: Path, version: str) -> Path:
    busybox = unpack(fetch_deb("busybox-static"), WORK / "busybox-static") / "bin/busybox"
    dep = {}
    for line in (modules / version / "modules.dep").read_text().splitlines():
        name, _, _ = line.partition(":")
        dep[re.sub(r"\.ko(\.xz)?$", "", Path(name).name)] = modules / version / name
    builtin = {re.sub(r"\.ko$", "", Path(n).name) for n in
               (modules / version / "modules.builtin").read_text().split()}
    files = [(d, 0o40755, b"") for d in ("bin", "dev", "proc", "sys", "lower", "rw", "newroot",
                                        "modules")]
    files.append(("bin/busybox", 0o100755, busybox.read_bytes()))
    files.append(("init", 0o100755, (HERE / "init").read_bytes()))
    order = []
    for m in INITRD_MODULES:
        if m in builtin or (m in SPLIT_LATER and m not in dep):
            continue
        if m not in dep:
            fail(f"the guest kernel has no module {m}")
        files.append((f"modules/{m}.ko", 0o100644, module_bytes(dep[m])))
        order.append(m)
    files.append(("modules/order", 0o100644, "\n".join(order).encode() + b"\n"))
    path = WORK / f"initramfs-{version}.gz"
    # in place by a rename: a guest booting at the same time keeps reading the one it opened
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(gzip.compress(cpio_newc(files), compresslevel=1))
    tmp.replace(path)
    return path


BOOTED_MARKER = b"test-vm guest: kernel"   # guest.sh's first line: the guest reached its tests
CONSOLE_TAIL = 40
# The emulated machine's own fault: under TCG the 6.1 guest has once (in ~14 runs of the tier)
# locked up with one vCPU waiting forever in smp_call_function_many_cond for an idle vCPU to
# answer the IPI of a tracepoint's text poke. Nothing the tests do can hold an idle CPU's IPI,
# so this is told apart from a failing test, at once rather than at --timeout.
LOCKUP_MARKER = re.compile(rb"watchdog: BUG: soft lockup - CPU#\d+ stuck for \d+s!")
EXIT_GUEST_LOCKUP = 75   # EX_TEMPFAIL: a code pytest never returns


def console_tail(log: Path, lines: int = CONSOLE_TAIL) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no console log)"


_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """In the child before exec: killed when run.py dies, however it dies (a test's timeout
    SIGKILLs it), so no qemu or virtiofsd outlives it to hold the next run's socket."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _ip(*args: str) -> None:
    run(["ip", *args])


def instance_of(kernel: str, cores: int) -> str:
    """A run's name, in its files and its NIC's namespace: two runs of other kernels or sizes
    can boot at once (tests/guest/test_guest_live.py boots both tiers' guests together)."""
    return kernel if cores == CORES else f"{kernel}-{2 * cores}cpu"


def nic_netns(instance: str) -> str:
    return NIC_NETNS if instance == DEFAULT_KERNEL else f"{NIC_NETNS}-{instance}"


def nic_up(netns: str) -> None:
    """The tap of the guest's NIC, in NETNS (made anew: a killed run's is deleted first)."""
    if os.path.exists(f"/run/netns/{netns}"):
        _ip("netns", "del", netns)
    _ip("netns", "add", netns)
    _ip("-n", netns, "tuntap", "add", "dev", NIC_TAP, "mode", "tap", "multi_queue")
    _ip("-n", netns, "addr", "add", f"{NIC_HOST_ADDR}/{NIC_PREFIXLEN}", "dev", NIC_TAP)
    _ip("-n", netns, "link", "set", NIC_TAP, "up")
    _ip("-n", netns, "link", "set", "lo", "up")


def nic_down(netns: str) -> None:
    subprocess.run(["ip", "netns", "del", netns], capture_output=True)


# The feeder: an iperf3 client to the guest's FEEDER_PORT, started again whenever one ends (nobody
# listening yet, a receiver stopped); each client dies with it, and it dies with run.py. Its rate
# is capped: unpaced, it kept a guest vCPU in NET_RX for most of its time (~3 Gbit/s under TCG),
# and the one lockup of the emulated machine seen with it (a vCPU in handle_softirqs, by the
# tracepoint a tracer attached to) came with that load
FEEDER_RATE = "400M"
FEEDER = f"""
import ctypes, signal, subprocess, sys, time
libc = ctypes.CDLL(None)
libc.prctl(1, signal.SIGKILL)
while True:
    subprocess.run(["iperf3", "-c", "{NIC_GUEST_ADDR}", "-p", "{FEEDER_PORT}", "-t", "86400",
                    "-b", "{FEEDER_RATE}", "--connect-timeout", "1000"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, preexec_fn=lambda: libc.prctl(1, signal.SIGKILL))
    time.sleep(0.3)
"""


def nic_qemu_args() -> list[str]:
    vectors = 2 * NIC_QUEUES + 2     # a vector per queue, one for config, one for the control queue
    return ["-device", f"pxb-pcie,id=pxb1,bus_nr=128,numa_node={NIC_NUMA_NODE},bus=pcie.0",
            "-device", "pcie-root-port,id=rp1,bus=pxb1,chassis=1,slot=1",
            "-netdev", f"tap,id=nic0,ifname={NIC_TAP},script=no,downscript=no,"
                       f"queues={NIC_QUEUES},vhost=off",
            "-device", f"virtio-net-pci,netdev=nic0,bus=rp1,mq=on,vectors={vectors}"]


def to_idle_priority(pid: int) -> None:
    """Every thread of PID at SCHED_IDLE (threads it starts later inherit it): it runs only when
    no other task of the host wants the CPU."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return   # it ended (the guest's exit is read on)
    for tid in tids:
        try:
            os.sched_setscheduler(int(tid), os.SCHED_IDLE, os.sched_param(0))
        except ProcessLookupError:
            pass   # a thread that ended meanwhile


def qmp_command(path: str, command: str, timeout: float = 10.0) -> dict:
    """COMMAND (`stop`, `cont`) sent to a guest's QMP socket at PATH (--qmp); the reply's
    `return`. `stop` halts the vCPUs and the guest's clocks with them: the guest sees no time
    pass while it is stopped, so its timeouts and watchdogs do not count it."""
    import socket
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(path)
        f = s.makefile("rw")
        json.loads(f.readline())   # the greeting
        for cmd in ("qmp_capabilities", command):
            f.write(json.dumps({"execute": cmd}) + "\n")
            f.flush()
            while "return" not in (reply := json.loads(f.readline())):   # events come between
                if "error" in reply:
                    raise RuntimeError(f"qmp {cmd}: {reply['error'].get('desc', reply)}")
    return reply["return"]


@dataclass
class Machine:
    """How a guest runs beyond its kernel and tests: its size, its NIC (the tap's namespace, or
    None for no NIC), and whether it runs in the background (SCHED_IDLE once booted, with a QMP
    socket to pause it by)."""
    cores: int = CORES
    netns: str | None = NIC_NETNS
    background: bool = False
    qmp: str | None = None


def boot(vmlinuz: Path, initrd: Path, modules: Path, pytest_args: list[str], timeout: float,
         log: Path, boot_timeout: float = 120.0, machine: Machine = Machine()) -> int:
    cores, netns = machine.cores, machine.netns
    # a socket of this run's own: one a killed earlier run left behind cannot be in the way
    sock = Path(tempfile.mkdtemp(prefix="vfs-", dir=WORK)) / "virtiofsd.sock"
    vfs_log = log.with_suffix(".virtiofsd.log")   # console-6.1.virtiofsd.log: a run's own
    # the host root, read-only to the guest (its overlay takes the writes); chroot sandboxing
    # because the namespace sandbox needs a pivot_root this host's root may refuse
    vfs = subprocess.Popen([VIRTIOFSD, f"--socket-path={sock}", "-o", "source=/",
                            "-o", "cache=always", "-o", "sandbox=chroot"],
                           stdout=subprocess.DEVNULL, stderr=open(vfs_log, "w"),
                           preexec_fn=_die_with_parent)
    for _ in range(100):
        if sock.exists():
            break
        time.sleep(0.05)
    else:
        vfs.kill()
        fail(f"virtiofsd did not start (see {vfs_log})")
    args = ",".join(pytest_args)
    if any(c in args for c in ' "'):
        fail("pytest arguments cannot hold spaces or quotes (they travel on the kernel command line)")
    # idle=halt: a plain HLT when idle. qemu64 reports an AMD CPU, for which the guest picks
    # amd_e400_idle (HLT inside the tick-broadcast dance of the E400 erratum); the one soft lockup
    # seen in ~20 runs of this tier had a vCPU spinning in smp_call_function_many_cond for an IPI
    # that a vCPU idle there never answered
    cmdline = (f"console=ttyS0 panic=-1 idle=halt STEER_VM_REPO={ROOT} STEER_VM_MODULES={modules} "
               f"STEER_VM_PYTEST={args} STEER_VM_NIC_ADDR={NIC_GUEST_ADDR}/{NIC_PREFIXLEN} "
               f"STEER_VM_NIC_PEER={NIC_HOST_ADDR} STEER_VM_FEEDER_PORT={FEEDER_PORT} "
               f"STEER_VM_NIC_NODE={NIC_NUMA_NODE}")
    if machine.background:
        # a guest in the background is starved while the host is busy, and its clock runs on
        # meanwhile: its watchdogs would take a starved half minute for a lockup (the soft
        # lockup's 20 s: twice watchdog_thresh, which is at most 60)
        cmdline += " watchdog_thresh=60 rcupdate.rcu_cpu_stall_timeout=300"
    mem = "2G"
    # a plain CPU model: with `-cpu max` the 6.1 guest stalled on every vCPU (soft lockups) in
    # two runs out of six; the SSE4 flags are what the host's numpy and Python builds expect
    # qemu in the tap's namespace: it attaches to the tap by name there
    # one host thread runs every vCPU in turn (thread=single): with a thread per vCPU
    # (multi-threaded TCG, the default), 4 vCPU threads on this host's 2 CPUs, a halted vCPU
    # missed the wake-up of an IPI now and then and slept on, and the vCPU that sent it waited in
    # smp_call_function_many_cond until the guest's watchdog saw a soft lockup (twice in a row on
    # a fresh VM). In turn, a halted vCPU's pending interrupt is seen at its next turn
    qemu = [*(["ip", "netns", "exec", netns] if netns else []), "qemu-system-x86_64", "-machine", "q35",
            "-accel", "tcg,thread=single",
            "-cpu", "qemu64,+ssse3,+sse4.1,+sse4.2,+popcnt",
            "-smp", f"{2 * cores},sockets=2,cores={cores},threads=1", "-m", "4G",
            "-object", f"memory-backend-memfd,id=m0,size={mem},share=on",
            "-object", f"memory-backend-memfd,id=m1,size={mem},share=on",
            "-numa", f"node,nodeid=0,cpus=0-{cores - 1},memdev=m0",
            "-numa", f"node,nodeid=1,cpus={cores}-{2 * cores - 1},memdev=m1",
            "-chardev", f"socket,id=vfs,path={sock}",
            "-device", "vhost-user-fs-pci,chardev=vfs,tag=hostroot,queue-size=1024",
            "-kernel", str(vmlinuz), "-initrd", str(initrd), "-append", cmdline,
            *(nic_qemu_args() if netns else []),
            *(["-qmp", f"unix:{machine.qmp},server=on,wait=off"] if machine.qmp else []),
            "-nographic", "-no-reboot", "-serial", "mon:stdio"]
    status, seen, booted, why = None, b"", False, None
    started = time.monotonic()
    vm = subprocess.Popen(qemu, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, start_new_session=True,
                          preexec_fn=_die_with_parent)
    feeder = netns and subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, "-c",
                                         FEEDER], start_new_session=True,
                                        preexec_fn=_die_with_parent)
    try:
        with open(log, "wb") as out:
            os.set_blocking(vm.stdout.fileno(), False)
            while True:
                chunk = vm.stdout.read()
                if chunk:
                    out.write(chunk)
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.flush()
                    seen = seen[-64:] + chunk     # a marker may straddle two reads
                    if not booted and BOOTED_MARKER in seen:
                        booted = True
                        if machine.background:   # booted at the host's pace, then yields
                            for p in (vm, feeder, vfs):
                                p and to_idle_priority(p.pid)
                    m = EXIT_MARKER.search(seen)
                    if m:
                        status = int(m.group(1))
                    lockup = LOCKUP_MARKER.search(seen)
                    if lockup and status is None:
                        why = (f"the guest kernel locked up ({lockup.group(0).decode()}), a fault of "
                               "the emulated machine, not of a test")
                        break
                elif vm.poll() is not None:
                    break
                else:
                    time.sleep(0.1)
                elapsed = time.monotonic() - started
                if not booted and elapsed > boot_timeout:
                    why = f"the guest did not reach its tests within {boot_timeout:.0f} s"
                    break
                if elapsed > timeout:
                    why = f"timed out after {timeout:.0f} s"
                    break
    finally:
        for p in filter(None, (vm, feeder, vfs)):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL) if p is not vfs else p.kill()
            p.wait()
        shutil.rmtree(sock.parent, ignore_errors=True)
    print(f"test-vm: guest ran {time.monotonic() - started:.0f} s; console in {log}")
    if status is None:
        print(f"test-vm: {why or 'the guest printed no exit status'}; the console's last "
              f"{CONSOLE_TAIL} lines:\n{console_tail(log)}", file=sys.stderr)
        return EXIT_GUEST_LOCKUP if why and "locked up" in why else 1
    return status


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="Everything after the options goes to pytest in the guest.")
    p.add_argument("--timeout", type=float, default=1500.0,
                   help="seconds before the guest is killed (default: %(default)s)")
    p.add_argument("--boot-timeout", type=float, default=120.0,
                   help="seconds for the guest to boot and start its tests, else it is killed "
                        "(default: %(default)s; a boot takes ~10 s here)")
    p.add_argument("--kernel", choices=list(KERNELS), default=DEFAULT_KERNEL,
                   help="the guest's kernel: Debian's cloud kernel of bookworm (6.1), bullseye "
                        "(5.10) or trixie (6.12) (default: %(default)s)")
    p.add_argument("--cores", type=int, default=CORES,
                   help="cores per socket, of the guest's two (default: %(default)s; "
                        "tests/guest/test_big_host_live.py takes 8)")
    p.add_argument("--no-nic", action="store_true",
                   help="no NIC, no tap and no feeder (tests/guest/test_big_host_live.py uses none)")
    p.add_argument("--background", action="store_true",
                   help="once booted, qemu, virtiofsd and the feeder run at SCHED_IDLE: the guest "
                        "takes only the CPU time no other task of the host wants (the suite runs "
                        "the big-host guest beside its live tier so)")
    p.add_argument("--qmp", metavar="PATH",
                   help="a QMP socket at PATH, through which another process may stop the guest "
                        "(its clocks with it) and let it go on: qmp_command(PATH, 'stop')")
    args, rest = p.parse_known_args(argv)
    if not 1 <= args.cores <= 64:
        fail(f"--cores: from 1 to 64, not {args.cores}")
    if os.geteuid() != 0:
        fail("needs root (virtiofsd shares / with the guest; the tests inside need it too)")
    for tool, package in (("qemu-system-x86_64", "qemu-system-x86"), (VIRTIOFSD, "qemu-system-x86"),
                          ("iperf3", "iperf3")):
        if not shutil.which(tool) and not os.path.exists(tool):
            fail(f"{tool} not found (apt-get install {package}, or scripts/setup.sh --vm)")
    if not (ROOT / "build" / "flowtrace.bpf.o").exists():
        fail("BPF objects not built (make)")
    WORK.mkdir(parents=True, exist_ok=True)
    # one run at a time downloads, unpacks and builds what the guests share; a second one waits
    # here, then finds it made
    with open(WORK / "prepare.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        vmlinuz, modules, version = prepare_kernel(args.kernel)
        initrd = build_initramfs(modules, version)
    instance = instance_of(args.kernel, args.cores)
    netns = None if args.no_nic else nic_netns(instance)
    nic = (f"a {NIC_QUEUES}-queue virtio-net on node {NIC_NUMA_NODE}, its tap in the host's "
           f"namespace {netns}" if netns else "no NIC")
    print(f"test-vm: booting {version} ({2 * args.cores} vCPUs as 2 sockets x {args.cores} cores, "
          f"TCG; {nic}{'; in the background' if args.background else ''})", flush=True)
    if netns:
        nic_up(netns)
    log = WORK / f"console-{instance}.log"
    try:
        status = boot(vmlinuz, initrd, modules, rest or DEFAULT_TESTS, args.timeout, log,
                      args.boot_timeout, Machine(args.cores, netns, args.background, args.qmp))
    finally:
        if netns:
            nic_down(netns)
    if (kept := keep_check(log, args.kernel)) is not None:
        print(f"test-vm: the guest's steer check is in {kept}")
    for kept in keep_results(log):
        print(f"test-vm: a measurement of the guest is in {kept}")
    return status


if __name__ == "__main__":
    sys.exit(main())
