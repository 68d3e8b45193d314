"""XDP steering: move a flow's receive processing to a chosen CPU (an XDP program redirects its
packets through a cpumap). The papers' other knobs (application, IRQ and RPS affinity) are in
affinity.py.

XDP steering of one device is either *pinned* (`steer pin`: the link and maps live under
/sys/fs/bpf/steer/<dev>[@<netns>], a directory only root may write, and outlive the command until
`steer unpin` or `steer reset`) or *owned* by a process (`steer auto`: a plain BPF link that the
kernel drops when the process dies).

Where a group named steer exists (the package and scripts/setup.sh make it, with a user of that
name), the pin directories and the maps are that group's to read, so that an exporter running as
that user reads the rules' counters; the links stay root's alone (whoever may open a link may
detach it). bpffs's own root is root's alone (0700), so such an exporter enters the pin directory
while it is still root and reads it from there (read_pins_from_here).
"""
from __future__ import annotations

import errno
import grp
import os
import struct
from dataclasses import dataclass, field
from urllib.parse import unquote_to_bytes

from steer.abi import xdp as abi
from steer.model.flowspec import FlowSpec, mask_order
from steer.kernel.btf import generic_xdp_redirects_to_cpumap
from steer.kernel.errors import KernelError
from steer.kernel.links import (XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE, obj_get, obj_pin, xdp_link,
                                xdp_link_ifindex)
from steer.kernel.maps import BpfMap, possible_cpus
from steer.kernel.mounts import BPFFS, ensure_bpffs
from steer.kernel.namespaces import netns_of
from steer.kernel.objects import BpfObject, bpf_dir
from steer.kernel.files import UnsafePath, remove_tree, trusted_dir
from steer.kernel.privileges import CAP_BPF, CAP_NET_ADMIN, require_caps
from steer.model.names import file_part, ifname_error, netns_error, printable

PIN_DIR = "steer"                  # below bpffs: everything `steer pin` leaves in the kernel
PIN_GROUP = "steer"                # the group that may read the pinned maps, where it exists
SHARED_DIR_MODE, SHARED_MAP_MODE = 0o750, 0o640
IFINDEX_MARK = "ifindex-"          # an empty directory beside the link: the device's ifindex
CPUMAP_QSIZE = 2048                # frames queued per target CPU: absorbs a NAPI budget (64) of
                                   # bulk-enqueued (8) batches from several RX queues at once
MAP_NAMES = ("rules", "masks", "rule_stats", "counters", "cpu_map")
NO_GENERIC_CPUMAP = ("generic XDP cannot redirect to a cpumap on this kernel (Linux 5.15 added "
                     "it)")
MODES = ("auto", "generic", "native")


class SteerError(Exception):
    """A steering request that cannot be done; str() is one line."""


class DeviceGone(SteerError):
    """The device of pinned rules was removed and no device of that name exists now."""


# the pin root as this process reaches it: its path, or "." once the process works from it
_pin_root: str | None = None


def pin_root() -> str:
    return _pin_root or os.path.join(BPFFS, PIN_DIR)


def pin_group() -> int | None:
    """The gid of PIN_GROUP, or None where there is no such group."""
    try:
        return grp.getgrnam(PIN_GROUP).gr_gid
    except KeyError:
        return None


def share(path: str, mode: int) -> None:
    """Give PATH (a pin directory or map that steer just made or found, never a link: bpffs
    holds none) to PIN_GROUP with MODE, where that group exists; root's alone otherwise."""
    gid = pin_group()
    if gid is None:
        return
    try:
        os.chown(path, 0, gid, follow_symlinks=False)
        os.chmod(path, mode)
    except OSError as e:
        # a root without CAP_CHOWN (a container's), or a bpffs mounted read-only (a pod's): the
        # pins stay as they are
        if e.errno not in (errno.EPERM, errno.EACCES, errno.EROFS):
            raise


def read_pins_from_here() -> None:
    """Make the pin root (bpffs mounted where missing) this process's working directory and
    read pins through it from now on: a process that leaves root keeps reaching them, which
    bpffs's own root (0700) would refuse it by path. steer reset empties the pin root but
    leaves it in place for such a process. Raises SteerError or KernelError."""
    global _pin_root
    ensure_bpffs()
    try:
        _trusted_pin_root(create=True)   # made, or found, and given to PIN_GROUP
    except OSError as e:
        if e.errno != errno.EROFS:
            raise
        raise SteerError(f"{pin_root()} does not exist and the bpffs is mounted read-only here: "
                         "rules pinned after this start are read after a restart") from None
    os.chdir(pin_root())
    _pin_root = "."


def pin_root_gone() -> str | None:
    """Why the pins cannot be read where this process reads them from its working directory
    (someone removed the directory: rmdir), or None."""
    if _pin_root is None:
        return None
    try:
        if os.stat(".").st_nlink == 0:
            raise FileNotFoundError
    except OSError:
        return (f"{os.path.join(BPFFS, PIN_DIR)} was removed after this process entered it; "
                "restart it to read the rules pinned since")
    return None


def _trusted_pin_root(create: bool) -> bool:
    """Whether the pin root exists (made when CREATE: 0700, or 0750 for PIN_GROUP where it
    exists); SteerError when someone other than root could have put files there."""
    try:
        exists = trusted_dir(pin_root(), create)
    except UnsafePath as e:
        raise SteerError(f"refusing the pin directory: {e}") from None
    if exists and create:
        share(pin_root(), SHARED_DIR_MODE)
    return exists


def check_names(dev: str, netns: str | None) -> None:
    """SteerError unless DEV could be a device's name and NETNS a namespace's name or path: both
    become parts of paths (sysfs, the pin directory)."""
    if (why := ifname_error(dev)) is not None:
        raise SteerError(f"interface {printable(repr(dev))}: {why}")
    if netns and "/" not in netns and (why := netns_error(netns)) is not None:
        raise SteerError(f"network namespace {printable(repr(netns))}: {why}")


def netns_path(name: str | None) -> str | None:
    """The file of network namespace NAME: a name under /run/netns, or a path (/proc/PID/ns/net)."""
    if not name:
        return None
    if "/" not in name and (why := netns_error(name)) is not None:
        raise SteerError(f"network namespace {printable(repr(name))}: {why}")
    path = name if "/" in name else os.path.join("/run/netns", name)
    if not os.path.exists(path):
        raise SteerError(f"network namespace {name!r} not found (looked for {path})")
    return path


def device_info(dev: str, netns: str | None) -> tuple[int, str | None]:
    """(ifindex, link kind such as 'veth', or None) of DEV in the namespace at path NETNS.
    The netlink socket is opened inside the namespace by this thread (pyroute2's NetNS would fork
    a helper process, which does not mix with the exporter's threads)."""
    from pyroute2 import IPRoute
    with netns_of(netns), IPRoute() as ipr:
        found = ipr.link_lookup(ifname=dev)
        if not found:
            where = f" in network namespace {netns}" if netns else ""
            raise SteerError(f"no interface {dev!r}{where}")
        link = ipr.get_links(found[0])[0]
        info = link.get_attr("IFLA_LINKINFO")
        return found[0], info.get_attr("IFLA_INFO_KIND") if info else None


def _dir_name(dev: str, netns: str | None) -> str:
    """DEV's directory under the pin root: DEV, then @NETNS for another namespace, each encoded
    (file_part) so that no name holds '/' or '@' and no two (DEV, NETNS) share one."""
    return file_part(dev) + (f"@{file_part(netns)}" if netns else "")


def _names_of(dir_name: str) -> tuple[str, str | None]:
    dev, at, ns = dir_name.partition("@")
    return os.fsdecode(unquote_to_bytes(dev)), os.fsdecode(unquote_to_bytes(ns)) if at else None


def has_pins(dev: str, netns: str | None) -> bool:
    """Whether `steer pin` left steering of DEV (in NETNS) in the kernel."""
    check_names(dev, netns)
    return _trusted_pin_root(create=False) and \
        os.path.isdir(os.path.join(pin_root(), _dir_name(dev, netns)))


@dataclass
class RuleView:
    spec: FlowSpec
    cpu: int
    id: int
    packets: int
    bytes: int

    def as_json(self) -> dict:
        return {"spec": str(self.spec), "cpu": self.cpu, "id": self.id, "packets": self.packets,
                "bytes": self.bytes, "exact": self.spec.exact}


@dataclass
class DeviceState:
    """One device's XDP steering as `steer rules` shows it, or, with ERROR, why it could not be
    read."""
    dev: str
    netns: str | None
    mode: str | None = None        # generic or native
    detached: str | None = None    # why its packets no longer reach the program
    rules: list[RuleView] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    # False where neither the link pin (root's) nor the ifindex beside it told whether the
    # program still sees the device (another namespace's, to a reader that is not root)
    link_read: bool = True

    def as_json(self) -> dict:
        if self.error:
            return {"dev": self.dev, "netns": self.netns, "error": self.error}
        return {"dev": self.dev, "netns": self.netns, "mode": self.mode, "detached": self.detached,
                "rules": [r.as_json() for r in self.rules], "counters": self.counters}


@dataclass
class XdpSteering:
    """The steering program of one device: its maps, its rules, its attachment."""
    dev: str
    netns: str | None = None
    mode: str = "auto"
    pinned: bool = True
    readonly: bool = False             # pins opened to read only: a report (steer rules, the exporter)
    ifindex: int = field(default=0, init=False)
    attached_mode: str | None = field(default=None, init=False)
    # set by open(reattach=True) when it moved pinned rules to a recreated device: (why the old
    # attachment was gone, rules carried over)
    reattached: tuple[str, int] | None = field(default=None, init=False)

    def __post_init__(self):
        check_names(self.dev, self.netns)
        self._maps: dict[str, BpfMap] = {}
        self._obj: BpfObject | None = None
        self._link_fd = -1

    @property
    def pin_dir(self) -> str:
        return os.path.join(pin_root(), _dir_name(self.dev, self.netns))

    # -- attach ------------------------------------------------------------------------------
    def open(self, reattach: bool = False) -> "XdpSteering":
        """Attach the program (or find the pinned one) and open its maps. Opening pins takes no
        capability (bpffs permissions decide), so a de-privileged exporter can read them.

        Pinned rules whose device went away (its namespace or the device itself deleted and
        created again, as a container restart does; a driver reload, which changes the ifindex)
        steer nothing: their link was detached with the old device. REATTACH (what a command
        that changes rules asks for) moves them to the device of that name that exists now, or
        raises DeviceGone when there is none; without it they are opened as they are, for
        `steer rules` and the exporter to report."""
        if self.mode not in MODES:
            raise SteerError(f"unknown XDP mode {self.mode!r}: choose from {', '.join(MODES)}")
        existing = self._pinned_link()
        if existing and not self.pinned:
            raise SteerError(f"{self.dev} has pinned steering rules (steer rules); remove them with "
                             "steer unpin or steer reset first")
        if existing:   # the pins are all it takes: no need to look at the device
            self.attached_mode = existing.rsplit("-", 1)[1]
            for name in MAP_NAMES:
                if not self.readonly:   # pins made before the group existed, or before steer shared
                    share(os.path.join(self.pin_dir, name), SHARED_MAP_MODE)
                self._maps[name] = BpfMap.from_pin(os.path.join(self.pin_dir, name),
                                                   readonly=self.readonly)
            if not self.readonly:
                share(self.pin_dir, SHARED_DIR_MODE)
            gone = self.detached() if reattach else None
            if gone:
                self._reattach(gone)
            return self
        if self.readonly:
            raise SteerError(f"{self.dev} has no pinned steering")
        require_caps([CAP_BPF, CAP_NET_ADMIN], "steering")
        ns_path = netns_path(self.netns)
        self.ifindex, kind = device_info(self.dev, ns_path)
        obj_path = bpf_dir() / "steer.bpf.o"
        if not obj_path.exists():
            raise SteerError(f"{obj_path} is not built: run `make` in the steer checkout")
        if self.pinned:
            ensure_bpffs()
            _trusted_pin_root(create=True)
            os.makedirs(self.pin_dir, mode=0o700, exist_ok=True)
        try:
            self._obj = BpfObject(str(obj_path), max_entries={"cpu_map": possible_cpus()},
                                  pin_root=self.pin_dir if self.pinned else None,
                                  no_pin=not self.pinned)
            for name in MAP_NAMES:
                self._maps[name] = self._obj.map(name)
            self._attach(ns_path, kind)
        except (KernelError, SteerError):
            self.close()
            if self.pinned:
                self._remove_pins()
            raise
        if self.pinned:
            self._obj.close()     # the pinned link and maps keep the program alive
            self._obj = None
            share(self.pin_dir, SHARED_DIR_MODE)
            for name in MAP_NAMES:
                share(os.path.join(self.pin_dir, name), SHARED_MAP_MODE)
                self._maps[name] = BpfMap.from_pin(os.path.join(self.pin_dir, name))
        return self

    def _attach(self, ns_path: str | None, kind: str | None) -> None:
        mode = self.mode
        if mode == "auto":
            # native XDP on a veth drops locally generated CHECKSUM_PARTIAL packets unless the
            # peer's tx checksum offload is off (docs/how-it-measures.md, "Steered flows"): generic is safe there
            mode = "generic" if kind == "veth" else "native"
        if mode == "generic" and not generic_xdp_redirects_to_cpumap():
            raise SteerError(NO_GENERIC_CPUMAP + (
                "; on a veth, native XDP needs the peer's tx checksum offload off first "
                "(ethtool -K PEER tx off, in the peer's namespace), then --mode native"
                if kind == "veth" else "; --mode native needs a driver with XDP"))
        prog_fd = self._obj.prog_fd("steer_xdp")
        with netns_of(ns_path):
            try:
                fd = xdp_link(prog_fd, self.ifindex,
                              XDP_FLAGS_DRV_MODE if mode == "native" else XDP_FLAGS_SKB_MODE)
            except KernelError as e:
                if self.mode == "auto" and mode == "native":
                    if not generic_xdp_redirects_to_cpumap():
                        raise SteerError(f"cannot attach native XDP to {self.dev} ({e}), and "
                                         f"{NO_GENERIC_CPUMAP}") from None
                    mode = "generic"   # the driver has no native XDP
                    fd = xdp_link(prog_fd, self.ifindex, XDP_FLAGS_SKB_MODE)
                elif e.errno in (16,):   # EBUSY
                    raise SteerError(f"{self.dev} already has an XDP program attached by "
                                     "another tool; steer does not replace it") from None
                else:
                    raise SteerError(f"cannot attach XDP ({mode}) to {self.dev}: {e}") from None
        self.attached_mode = mode
        if self.pinned:
            obj_pin(fd, os.path.join(self.pin_dir, f"link-{mode}"))
            os.close(fd)
            # the device's ifindex where a reader that may not open the link can see it
            os.mkdir(os.path.join(self.pin_dir, f"{IFINDEX_MARK}{self.ifindex}"), SHARED_DIR_MODE)
        else:
            self._link_fd = fd

    def _reattach(self, gone: str) -> None:
        """The pinned rules to the device that exists now under this name, in a fresh program."""
        where = self.dev + (f" in {self.netns}" if self.netns else "")
        try:
            device_info(self.dev, netns_path(self.netns))
        except SteerError as e:
            raise DeviceGone(f"the steering pinned on {where} steers nothing: {gone}, and {e}; "
                             "steer unpin or steer reset removes its rules") from None
        kept = [(r.spec, r.cpu) for r in self.rules()]
        self.close()
        self._remove_pins()
        try:
            self.open()
        except (KernelError, SteerError) as e:
            rules = "; ".join(f"{spec} -> CPU {cpu}" for spec, cpu in kept)
            raise SteerError(f"{e} (the rules that were pinned on {where}, to pin again: "
                             f"{rules})") from None
        self.table.pin_many(kept)
        self.reattached = (gone, len(kept))

    def _pinned_link(self) -> str | None:
        if not _trusted_pin_root(create=False):
            return None
        for m in ("generic", "native"):
            p = os.path.join(self.pin_dir, f"link-{m}")
            if os.path.exists(p):
                return p
        return None

    def _remove_pins(self) -> None:
        remove_pin_dir(self.pin_dir)

    def close(self) -> None:
        for m in self._maps.values():
            m.close()
        self._maps.clear()
        if self._link_fd >= 0:
            os.close(self._link_fd)
            self._link_fd = -1
        if self._obj:
            self._obj.close()
            self._obj = None

    def __enter__(self):
        return self.open()

    def __exit__(self, *exc):
        self.close()

    # -- rules: the table of this device ------------------------------------------------------
    @property
    def table(self) -> "RuleTable":
        return RuleTable(self._maps, self.dev)

    def rules(self) -> list[RuleView]:
        return self.table.rules()

    def counters(self) -> dict[str, int]:
        return self.table.counters()

    def pin(self, spec: FlowSpec, cpu: int) -> tuple[int | None, int]:
        return self.table.pin(spec, cpu)

    def unpin(self, spec: FlowSpec) -> int:
        return self.table.unpin(spec)

    def state(self) -> DeviceState:
        try:
            detached, link_read = self.detached(), True
        except KernelError as e:
            if e.errno not in (errno.EACCES, errno.EPERM):
                raise
            detached = self._detached_by_ifindex()
            link_read = detached is not False
            detached = detached or None
        return DeviceState(self.dev, self.netns, self.attached_mode, detached, self.rules(),
                           self.counters(), link_read=link_read)

    def detached(self) -> str | None:
        """Why the program no longer sees this device's packets (None while it does): its
        namespace deleted, or the device itself removed, which detaches the link."""
        if self.netns:
            try:
                netns_path(self.netns)
            except SteerError:
                return f"namespace {self.netns} was deleted"
        pin = self._pinned_link()
        fd = self._link_fd if self._link_fd >= 0 else -1
        if fd < 0 and pin:
            fd = obj_get(pin)
        if fd < 0:
            return None
        try:
            if xdp_link_ifindex(fd) == 0:
                return f"{self.dev} was removed"
        finally:
            if fd != self._link_fd:
                os.close(fd)
        return None

    def _detached_by_ifindex(self) -> str | None | bool:
        """detached() without the link (root's), from the ifindex pinned beside it, for a device
        of this namespace: why, None (attached), or False where it cannot tell (a device in
        another namespace, which only CAP_SYS_ADMIN may enter; pins older than the mark)."""
        marks = [n for n in os.listdir(self.pin_dir) if n.startswith(IFINDEX_MARK)]
        if self.netns or len(marks) != 1 or not marks[0][len(IFINDEX_MARK):].isdigit():
            return False
        try:
            with open(f"/sys/class/net/{self.dev}/ifindex") as f:
                now = int(f.read())
        except (OSError, ValueError):
            return f"{self.dev} was removed"
        if now != int(marks[0][len(IFINDEX_MARK):]):
            return f"{self.dev} was removed (a device of that name was made since)"
        return None

    def detach(self) -> None:
        """Remove the pinned program of this device, maps and all."""
        self.close()
        self._remove_pins()


@dataclass
class RuleTable:
    """The rules, masks, counters and cpumap entries of one loaded steering program."""
    maps: dict[str, BpfMap]
    label: str

    def rules(self) -> list[RuleView]:
        stats = self.maps["rule_stats"]
        out = []
        for kraw, vraw in self.maps["rules"].items():
            k, r = abi.RuleKey.from_buffer_copy(kraw), abi.Rule.from_buffer_copy(vraw)
            s = abi.RuleStats.from_buffer_copy(stats.lookup(struct.pack("I", r.id)))
            out.append(RuleView(FlowSpec.from_key(k), r.cpu, r.id, s.packets, s.bytes))
        return sorted(out, key=lambda v: v.id)

    def counters(self) -> dict[str, int]:
        per_cpu = self.maps["counters"].lookup(struct.pack("I", 0))
        total = {n: 0 for n, _ in abi.Counters._fields_}
        for raw in per_cpu:
            c = abi.Counters.from_buffer_copy(raw)
            for n in total:
                total[n] += getattr(c, n)
        return total

    def pin_many(self, rules: list[tuple[FlowSpec, int]]) -> None:
        """Add many new rules in one pass (benchmarks, static policies): the table is read once."""
        have = {str(r.spec): r for r in self.rules()}
        used = {r.id for r in have.values()}
        free = (i for i in range(abi.MAX_RULES) if i not in used)
        masks = [r.spec.mask for r in have.values()]
        for spec, cpu in rules:
            if str(spec) in have:
                raise SteerError(f"rule {spec} exists already")
            rid = next(free, None)
            if rid is None:
                raise SteerError(f"{self.label} would have more than {abi.MAX_RULES} rules")
            self._ensure_cpu(cpu)
            self.maps["rule_stats"].update(struct.pack("I", rid), bytes(abi.RuleStats()))
            self.maps["rules"].update(bytes(spec.key()), bytes(abi.Rule(cpu=cpu, id=rid)))
            masks.append(spec.mask)
        self._write_masks(masks)

    def pin(self, spec: FlowSpec, cpu: int) -> tuple[int | None, int]:
        """Steer SPEC to CPU; returns (previous CPU or None, rule id)."""
        rules = {str(r.spec): r for r in self.rules()}
        old = rules.get(str(spec))
        if old is None and len(rules) >= abi.MAX_RULES:
            raise SteerError(f"{self.label} already has {abi.MAX_RULES} rules")
        used = {r.id for r in rules.values()}
        rid = old.id if old else next(i for i in range(abi.MAX_RULES) if i not in used)
        self._ensure_cpu(cpu)
        if not old:
            self.maps["rule_stats"].update(struct.pack("I", rid), bytes(abi.RuleStats()))
        self.maps["rules"].update(bytes(spec.key()), bytes(abi.Rule(cpu=cpu, id=rid)))
        self._write_masks([r.spec.mask for r in rules.values()] + [spec.mask])
        if old and old.cpu != cpu:
            self._drop_unused_cpus()
        return (old.cpu if old else None), rid

    def unpin(self, spec: FlowSpec) -> int:
        """Remove SPEC's rule; returns the CPU it steered to."""
        rules = {str(r.spec): r for r in self.rules()}
        old = rules.pop(str(spec), None)
        if old is None:
            have = ", ".join(rules) or "none"
            raise SteerError(f"no rule {spec} on {self.label} (rules: {have})")
        self._write_masks([r.spec.mask for r in rules.values()])
        self.maps["rules"].delete(bytes(spec.key()))
        self.maps["rule_stats"].update(struct.pack("I", old.id), bytes(abi.RuleStats()))
        self._drop_unused_cpus()
        return old.cpu

    def _write_masks(self, masks) -> None:
        order = mask_order(masks)
        m = abi.Masks(count=len(order))
        for i, v in enumerate(order):
            m.mask[i] = v
        self.maps["masks"].update(struct.pack("I", 0), bytes(m))

    def _ensure_cpu(self, cpu: int) -> None:
        cm = self.maps["cpu_map"]
        if cm.lookup(struct.pack("I", cpu)) is None:
            try:
                cm.update(struct.pack("I", cpu), bytes(abi.CpumapVal(qsize=CPUMAP_QSIZE)))
            except KernelError as e:
                raise SteerError(f"cannot add CPU {cpu} to the cpumap: {e}") from None

    def _drop_unused_cpus(self) -> None:
        """Delete cpumap entries no rule uses: each one is a kernel thread."""
        used = {r.cpu for r in self.rules()}
        cm = self.maps["cpu_map"]
        for cpu in range(cm.max_entries):
            if cpu not in used and cm.lookup(struct.pack("I", cpu)) is not None:
                cm.delete(struct.pack("I", cpu))


def load_unattached() -> tuple[BpfObject, RuleTable]:
    """The steering program loaded but attached nowhere, for BPF_PROG_TEST_RUN (tests, bench)."""
    obj = BpfObject(str(bpf_dir() / "steer.bpf.o"), max_entries={"cpu_map": possible_cpus()},
                    no_pin=True)
    return obj, RuleTable({n: obj.map(n) for n in MAP_NAMES}, "test run")


def remove_pin_dir(path: str) -> None:
    """Unlink every pin of one device directory: the link pin first, which detaches XDP."""
    remove_tree(path, first="link-")


def pinned_state() -> list[DeviceState]:
    """state() of every device with pinned steering, its maps opened to read only; a device that
    cannot be read says why. SteerError where the pin root cannot be read at all."""
    if (why := pin_root_gone()) is not None:
        raise SteerError(why)
    out = []
    for dev, ns in pinned_devices():
        try:
            with XdpSteering(dev, ns, readonly=True) as st:
                out.append(st.state())
        except Exception as e:  # noqa: BLE001 - a vanished device must not hide the others
            out.append(DeviceState(dev, ns, error=str(e)))
    return out


def pinned_devices() -> list[tuple[str, str | None]]:
    """(dev, netns) of every device with pinned steering."""
    if not _trusted_pin_root(create=False):
        return []
    return [_names_of(name) for name in sorted(os.listdir(pin_root()))]


def remove_pinned() -> list[str]:
    """Remove all steering `steer pin` left in the kernel; what was done, one line each. The pin
    root stays, empty: an exporter that left root reads pins from it (read_pins_from_here), and
    would not reach one made again."""
    done = []
    for dev, ns in pinned_devices():
        remove_pin_dir(os.path.join(pin_root(), _dir_name(dev, ns)))
        done.append(f"removed XDP steering of {printable(dev)}" + (f" in {printable(ns)}" if ns else ""))
    if _trusted_pin_root(create=False):
        for entry in os.listdir(pin_root()):    # what is no device's (a planted link, a file)
            remove_tree(os.path.join(pin_root(), entry))
    return done


def require_steering_caps() -> None:
    require_caps([CAP_BPF, CAP_NET_ADMIN], "steering")

