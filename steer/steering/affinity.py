"""The knobs of the papers other than XDP steering: where the application runs (its threads'
affinity), where a device's IRQs are handled, where RPS spreads its receive processing, and where
a threaded NAPI instance's kthread polls. The IRQ, RPS and threaded-NAPI settings steer changes are
remembered in STATE_DIR and put back by restore() (`steer reset`), so a tuning experiment leaves the
host as it found it."""
from __future__ import annotations

import json
import os
import re

from steer.model.irqs import DeviceIrq, device_irqs, queue_irq, rx_irqs
from steer.kernel.errors import KernelError
from steer.kernel.namespaces import call_with_netns_sysfs
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
    """The settings to put back: {"irq": {IRQ: cpulist}, "rps": {[netns, dev, queue]: mask},
    "napi": {[netns, dev, napi id or null for the device's]: {"threaded": was it, "pid": its
    kthread, "cpus": that kthread's CPUs}}}, the keys of the last two JSON lists (a namespace's
    name may hold any character but '/')."""
    empty = {"irq": {}, "rps": {}, "napi": {}}
    if not _state_dir(create=False):
        return empty
    try:
        with open(os.path.join(STATE_DIR, "restore.json")) as f:
            state = json.load(f)
    except (OSError, ValueError):
        return empty
    if not isinstance(state, dict) or not state.keys() <= empty.keys():
        return empty
    return {k: state.get(k) if isinstance(state.get(k), dict) else {} for k in empty}


def _keep(state: dict) -> None:
    """STATE written back, or the file removed when nothing is left to put back."""
    if any(state.values()):
        _save_state(state)
    else:
        _forget_state()


def _save_state(state: dict) -> None:
    _state_dir(create=True)
    write_json(os.path.join(STATE_DIR, "restore.json"), state)


def receive_irqs(dev: str, netns: str | None = None, queue: int | None = None) -> list[DeviceIrq]:
    """DEV's IRQs that serve receive (QUEUE's alone, if given); the device is looked up in NETNS,
    the IRQs are the host's. Raises SteerError when there are none to move."""
    irqs = with_sysfs_of(netns, _irqs_json, dev)
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
    _keep(state)
    return done


def changed() -> list[dict]:
    """What steer changed and `steer reset` puts back, each with the value it found: IRQs'
    CPUs, queues' RPS masks, NAPIs' threading (steer irq, rps, pin --method, auto, sweep)."""
    state, out = _state(), []
    for irq, cpus in sorted(state["irq"].items(), key=lambda kv: kv[0]):
        out.append({"kind": "irq", "irq": irq, "found": cpus})
    for key, mask in state["rps"].items():
        try:
            ns, dev, queue = json.loads(key)
        except (ValueError, TypeError):
            continue
        out.append({"kind": "rps", "netns": ns or None, "dev": dev, "queue": queue, "found": mask})
    for key, rec in state["napi"].items():
        try:
            ns, dev, napi_id = json.loads(key)
            found = f"threaded, on CPUs {format_cpulist(rec['cpus'])}" if rec["threaded"] \
                else "polled in softirq"
        except (ValueError, TypeError, KeyError):
            continue
        out.append({"kind": "napi", "netns": ns or None, "dev": dev, "napi_id": napi_id,
                    "found": found})
    return out


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
            remember: bool = True, queue: int | None = None) -> dict[str, str]:
    """Spread DEV's receive processing (of RX QUEUE alone, if given) over CPUS with RPS; the
    originals are kept for reset (unless REMEMBER is false: a lab device that goes away with its
    namespace). A device in another namespace is only visible to a sysfs mounted there (the
    steer.kernel.namespaces' call_with_netns_sysfs)."""
    mask = _cpu_mask(cpus)
    results = with_sysfs_of(netns, _write_rps, dev, mask, queue)
    if not remember:
        return results
    state = _state()
    for path, old in results.items():
        state["rps"].setdefault(json.dumps([netns or "", dev, path]), old)
    _save_state(state)
    return results


def restore_rps(dev: str, queue: str, mask: str, netns: str | None = None) -> None:
    """Put QUEUE ("rx-0") of DEV back to MASK, as set_rps found it, and forget it for reset."""
    with_sysfs_of(netns, _restore_rps, dev, queue, mask)
    state = _state()
    key = json.dumps([netns or "", dev, queue])
    if state["rps"].get(key) == mask:
        del state["rps"][key]
        _keep(state)


def _write_rps(sysfs: str, dev: str, mask: str, queue: int | None = None) -> dict[str, str]:
    out = {}
    files = _rps_files(sysfs, dev)
    if queue is not None:
        files = [f for f in files if os.path.basename(os.path.dirname(f)) == f"rx-{queue}"]
        if not files:
            raise SteerError(f"{dev} has no RX queue {queue}")
    for path in files:
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


def thread_napi(dev: str, napi_id: int, cpu: int, netns: str | None = None,
                remember: bool = True) -> dict:
    """Poll NAPI instance NAPI_ID of DEV in a kthread of its own (threaded NAPI: that instance
    alone where the kernel can, 6.17+; else every NAPI of DEV) and pin that kthread to CPU.
    Returns {"scope": "napi" or "device", "was_threaded", "pid", "cpus_before"}; what it changed
    is kept for reset (REMEMBER)."""
    info = with_sysfs_of(netns, _thread_napi, dev, napi_id)
    pid = info["pid"]
    try:
        before = sorted(os.sched_getaffinity(pid))
        if remember:
            state = _state()
            key = json.dumps([netns or "", dev, napi_id if info["scope"] == "napi" else None])
            state["napi"].setdefault(key, {"threaded": info["was_threaded"], "pid": pid,
                                           "cpus": before})
            _save_state(state)
        os.sched_setaffinity(pid, {cpu})
    except ProcessLookupError:
        raise SteerError(f"the kthread of NAPI {napi_id} of {dev} (pid {pid}) ended as it was "
                         "moved: was its device's threading turned off meanwhile?") from None
    except OSError as e:
        raise SteerError(f"NAPI {napi_id} of {dev}: cannot pin its kthread (pid {pid}) to CPU "
                         f"{cpu}: {e.strerror}") from None
    return dict(info, cpus_before=before)


def unthread_napi(dev: str, napi_id: int, moved: dict, netns: str | None = None) -> None:
    """Undo thread_napi's MOVED (its return): stop the threading it started, or put the kthread
    back on its CPUs; and forget it for reset."""
    key = json.dumps([netns or "", dev, napi_id if moved["scope"] == "napi" else None])
    rec = {"threaded": moved["was_threaded"], "pid": moved["pid"], "cpus": moved["cpus_before"]}
    _restore_napi(key, rec)
    state = _state()
    if state["napi"].get(key) == rec:   # an older original (an earlier steer pin) stays
        del state["napi"][key]
        _keep(state)


def napi_kthread_name(dev: str, napi_id: int) -> str:
    """The name the kernel gives a threaded NAPI's kthread, as /proc shows it (15 bytes)."""
    return f"napi/{dev}-{napi_id}"[:15]


def napi_threads() -> dict[int, str]:
    """The threaded NAPI kthreads (napi/<dev>-<napi id>) of the host, by pid."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().rstrip("\n")
        except OSError:
            continue
        if comm.startswith("napi/"):
            out[int(pid)] = comm
    return out


def _thread_napi(sysfs: str, dev: str, napi_id: int) -> dict:
    """In DEV's namespace: thread NAPI_ID (alone where the kernel can), and find its kthread."""
    import time
    from steer.kernel import netdev
    base = os.path.join(sysfs, "class/net", dev)
    try:
        with open(os.path.join(base, "ifindex")) as f:
            ifindex = int(f.read())
    except OSError:
        raise SteerError(f"no interface {dev!r}") from None
    try:
        napis = netdev.rx_queues_and_napis(ifindex)[1]
    except netdev.NoFamily:
        napis = None
    if napis is not None and napi_id not in napis:
        raise SteerError(f"{dev} has no NAPI instance {napi_id} (it has "
                         f"{', '.join(map(str, sorted(napis))) or 'none'})")
    napi = napis[napi_id] if napis else None
    if napi is not None and napi.threaded is not None:
        scope, was = "napi", napi.threaded
        if not was:
            netdev.set_napi_threaded(napi_id, True)
    else:
        scope, path = "device", os.path.join(base, "threaded")
        try:
            with open(path) as f:
                was = f.read().strip() not in ("0", "")
            if not was:
                with open(path, "w") as f:
                    f.write("1")
        except OSError as e:
            raise SteerError(f"{dev}: cannot thread its NAPI ({path}: {e.strerror})") from None
    # the kthread: named by the netdev family (6.9+), else by its name, which the kernel cuts
    # to 15 bytes: two devices whose cut names agree cannot be told apart that way
    for _ in range(50):
        if napis is not None:
            pid = netdev.rx_queues_and_napis(ifindex)[1].get(napi_id, napi).pid
            if pid:
                return {"scope": scope, "was_threaded": was, "pid": pid}
        found = [p for p, comm in napi_threads().items()
                 if comm == napi_kthread_name(dev, napi_id)]
        if len(found) == 1 and (napis is None or napis[napi_id].pid is None):
            return {"scope": scope, "was_threaded": was, "pid": found[0]}
        if len(found) > 1:
            raise SteerError(f"{len(found)} kthreads are named {napi_kthread_name(dev, napi_id)}: "
                             "which polls this NAPI needs the netdev netlink family (Linux 6.9+)")
        time.sleep(0.02)
    raise SteerError(f"{dev}: NAPI {napi_id} is threaded but no kthread of it appeared")


def _unthread_napi(sysfs: str, dev: str, napi_id: int | None) -> dict:
    """In DEV's namespace: stop threading NAPI_ID (None: every NAPI of DEV)."""
    if napi_id is None:
        path = os.path.join(sysfs, "class/net", dev, "threaded")
        if os.path.exists(path):
            with open(path, "w") as f:
                f.write("0")
    else:
        from steer.kernel import netdev
        netdev.set_napi_threaded(napi_id, False)
    return {}


def _restore_napi(key: str, rec: dict) -> str | None:
    try:
        ns, dev, napi_id = json.loads(key)
        if not isinstance(rec, dict) or not isinstance(dev, str):
            return None
        if not rec.get("threaded"):
            with_sysfs_of(ns or None, _unthread_napi, dev, napi_id)
            return f"stopped threaded NAPI {napi_id if napi_id is not None else '(all)'} of {dev}"
        pid, cpus = int(rec["pid"]), [int(c) for c in rec["cpus"]]
        with open(f"/proc/{pid}/comm") as f:
            if not f.read().startswith("napi/"):
                return None   # the kthread is gone, and its pid taken by another task
        os.sched_setaffinity(pid, cpus)
        return f"restored the CPUs of NAPI kthread {pid} of {dev} to {format_cpulist(cpus)}"
    except (ValueError, TypeError, KeyError, OSError, SteerError, KernelError):
        return None   # the device, or the kthread, went meanwhile


def with_sysfs_of(netns: str | None, fn, dev: str, *args):
    """FN(sysfs root, DEV, *ARGS) where that sysfs shows the devices of namespace NETNS (None:
    this one), DEV's name checked first; the kernel's errors as SteerError."""
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
            with_sysfs_of(ns or None, _restore_rps, dev, queue, mask)
            done.append(f"restored RPS of {dev} {queue} to {mask}")
        except SteerError:
            pass
    for key, rec in state["napi"].items():
        if (line := _restore_napi(key, rec)) is not None:
            done.append(line)
    _forget_state()
    return done


def _forget_state() -> None:
    try:
        os.unlink(os.path.join(STATE_DIR, "restore.json"))
    except FileNotFoundError:
        pass
