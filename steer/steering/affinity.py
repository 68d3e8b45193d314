"""The knobs of the papers other than XDP steering: where the application runs (its threads'
affinity), where a device's IRQs are handled, and where RPS spreads its receive processing. The
IRQ and RPS settings steer changes are remembered in STATE_DIR and put back by restore() (`steer
reset`), so a tuning experiment leaves the host as it found it."""
from __future__ import annotations

import json
import os
import re

from steer.model.irqs import DeviceIrq, device_irqs, queue_irq, rx_irqs
from steer.kernel.gateway import KernelError, call_with_netns_sysfs
from steer.kernel.files import UnsafePath, trusted_dir, write_json
from steer.steering.xdp import SteerError, check_names, netns_path
from steer.model.topology import format_cpulist

STATE_DIR = "/run/steer"           # original IRQ/RPS settings, restored by `steer reset`


def set_app_affinity(pid: int, cpus: set[int]) -> dict[int, list[int]]:
    """Pin every thread of PID to CPUS; returns each thread's previous CPUs."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        raise SteerError(f"no process {pid}") from None
    before = {}
    for tid in tids:
        try:
            before[tid] = sorted(os.sched_getaffinity(tid))
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:
            continue   # the thread ended meanwhile
        except PermissionError:
            raise SteerError(f"not allowed to set the affinity of {pid} (needs CAP_SYS_NICE "
                             "or the same user)") from None
    return before


def _state_dir(create: bool) -> bool:
    try:
        return trusted_dir(STATE_DIR, create)
    except UnsafePath as e:
        raise SteerError(f"refusing the state directory: {e}") from None


def _state() -> dict:
    """The settings to put back: {"irq": {IRQ: cpulist}, "rps": {[netns, dev, queue]: mask}},
    the RPS keys JSON lists (a namespace's name may hold any character but '/')."""
    empty = {"irq": {}, "rps": {}}
    if not _state_dir(create=False):
        return empty
    try:
        with open(os.path.join(STATE_DIR, "restore.json")) as f:
            state = json.load(f)
    except (OSError, ValueError):
        return empty
    return state if isinstance(state, dict) and state.keys() == empty.keys() else empty


def _save_state(state: dict) -> None:
    _state_dir(create=True)
    write_json(os.path.join(STATE_DIR, "restore.json"), state)


def receive_irqs(dev: str, netns: str | None = None, queue: int | None = None) -> list[DeviceIrq]:
    """DEV's IRQs that serve receive (QUEUE's alone, if given); the device is looked up in NETNS,
    the IRQs are the host's. Raises SteerError when there are none to move."""
    irqs = _with_sysfs_of(netns, _irqs_json, dev)
    if irqs is None:
        raise SteerError(f"no interface {dev!r}")
    irqs = [DeviceIrq(**i) for i in irqs]
    if not irqs:
        raise SteerError(f"{dev} has no IRQs of its own (a virtual device?): use `steer pin` (XDP) "
                         "or `steer rps`")
    rx = rx_irqs(irqs)
    if queue is not None:
        one = queue_irq(irqs, queue)
        if one is None:
            known = sorted(i.queue for i in rx if i.queue is not None)
            raise SteerError(f"{dev} has no IRQ for RX queue {queue} (its receive IRQs serve "
                             f"queues {format_cpulist(known) if known else 'not told by their names'})")
        return [one]
    if not rx:
        raise SteerError(f"{dev}: none of its IRQs ({', '.join(i.name or str(i.irq) for i in irqs)}) "
                         "serves receive")
    return rx


def _irqs_json(sysfs: str, dev: str) -> list[dict] | None:
    if not os.path.isdir(os.path.join(sysfs, "class/net", dev)):
        return None
    return [i.as_dict() for i in device_irqs(dev, sysfs)]


def set_irq_affinity(irqs: list[DeviceIrq], cpus: list[int], remember: bool = True) -> dict[int, str]:
    """Point IRQS at CPUS (smp_affinity_list); returns each one's CPU list before. The first
    originals are kept for `steer reset` (REMEMBER), so that a crash between this and
    restore_irqs() still leaves a way back."""
    state = _state()
    before = {}
    for i in irqs:
        path = f"/proc/irq/{i.irq}/smp_affinity_list"
        try:
            with open(path) as f:
                before[i.irq] = f.read().strip()
            if remember:
                state["irq"].setdefault(str(i.irq), before[i.irq])
                _save_state(state)
            with open(path, "w") as f:
                f.write(format_cpulist(cpus))
        except OSError as e:
            # EIO: a managed IRQ, whose affinity the kernel sets; EINVAL: no CPU of the list
            # can take it
            raise SteerError(f"IRQ {i.irq} ({i.name or 'no name'}): cannot set its affinity to "
                             f"CPU {format_cpulist(cpus)}: {e.strerror}") from None
    return before


def restore_irqs(before: dict[int, str]) -> list[str]:
    """Put IRQs back where set_irq_affinity found them, and forget them for `steer reset`
    unless reset holds an older original (an earlier `steer irq`): that one stays."""
    done = []
    state = _state()
    for irq, cpus in before.items():
        try:
            with open(f"/proc/irq/{irq}/smp_affinity_list", "w") as f:
                f.write(cpus)
            done.append(f"restored IRQ {irq} affinity to {cpus}")
        except OSError:
            pass   # the IRQ went with its device
        if state["irq"].get(str(irq)) == cpus:
            del state["irq"][str(irq)]
    if state["irq"] or state["rps"]:
        _save_state(state)
    else:
        _forget_state()
    return done


def _rps_files(sysfs: str, dev: str) -> list[str]:
    qdir = os.path.join(sysfs, "class/net", dev, "queues")
    try:
        return sorted(os.path.join(qdir, q, "rps_cpus") for q in os.listdir(qdir) if q.startswith("rx-"))
    except OSError:
        raise SteerError(f"no interface {dev!r} (no {qdir})") from None


def _cpu_mask(cpus: list[int]) -> str:
    """CPU list -> the comma-separated 32-bit hex words of a sysfs cpumask."""
    bits = sum(1 << c for c in cpus)
    words = []
    while True:
        words.append(f"{bits & 0xFFFFFFFF:08x}")
        bits >>= 32
        if not bits:
            break
    return ",".join(reversed(words))


def set_rps(dev: str, cpus: list[int], netns: str | None = None,
            remember: bool = True) -> dict[str, str]:
    """Spread DEV's receive processing over CPUS with RPS; the originals are kept for reset
    (unless REMEMBER is false: a lab device that goes away with its namespace).
    A device in another namespace is only visible to a sysfs mounted there (the gateway's
    call_with_netns_sysfs)."""
    mask = _cpu_mask(cpus)
    results = _with_sysfs_of(netns, _write_rps, dev, mask)
    if not remember:
        return results
    state = _state()
    for path, old in results.items():
        state["rps"].setdefault(json.dumps([netns or "", dev, path]), old)
    _save_state(state)
    return results


def _write_rps(sysfs: str, dev: str, mask: str) -> dict[str, str]:
    out = {}
    for path in _rps_files(sysfs, dev):
        with open(path) as f:
            out[os.path.basename(os.path.dirname(path))] = f.read().strip()
        with open(path, "w") as f:
            f.write(mask)
    return out


def _restore_rps(sysfs: str, dev: str, queue: str, mask: str) -> dict:
    path = os.path.join(sysfs, "class/net", dev, "queues", queue, "rps_cpus")
    if os.path.exists(path):
        with open(path, "w") as f:
            f.write(mask)
    return {}


def _with_sysfs_of(netns: str | None, fn, dev: str, *args):
    check_names(dev, netns)   # DEV becomes a path under sysfs
    try:
        return call_with_netns_sysfs(netns_path(netns), fn, dev, *args)
    except KernelError as e:
        raise SteerError(str(e)) from None


def restore() -> list[str]:
    """Put back the IRQ affinities and RPS masks steer changed; what was done, one line each. A
    device that is gone meanwhile is skipped: its setting went with it."""
    done = []
    state = _state()
    for irq, cpus in state["irq"].items():
        if not irq.isascii() or not irq.isdigit():
            continue
        try:
            with open(f"/proc/irq/{irq}/smp_affinity_list", "w") as f:
                f.write(cpus)
            done.append(f"restored IRQ {irq} affinity to {cpus}")
        except OSError:
            pass
    for key, mask in state["rps"].items():
        try:
            ns, dev, queue = json.loads(key)
        except (ValueError, TypeError):
            continue
        if not re.fullmatch(r"rx-\d+", str(queue)):
            continue
        try:
            _with_sysfs_of(ns or None, _restore_rps, dev, queue, mask)
            done.append(f"restored RPS of {dev} {queue} to {mask}")
        except SteerError:
            pass
    _forget_state()
    return done


def _forget_state() -> None:
    try:
        os.unlink(os.path.join(STATE_DIR, "restore.json"))
    except FileNotFoundError:
        pass
