"""XDP steering: move a flow's receive processing to a chosen CPU (an XDP program redirects its
packets through a cpumap). The papers' other knobs (application, IRQ and RPS affinity) are in
affinity.py.

XDP steering of one device is either *pinned* (`steer pin`: the link and maps live under
/sys/fs/bpf/steer/<dev>[@<netns>], a directory only root may write, and outlive the command until
`steer unpin` or `steer reset`) or *owned* by a process (`steer auto`: a plain BPF link that the
kernel drops when the process dies).
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from urllib.parse import unquote_to_bytes

from steer.abi import xdp as abi
from steer.model.flowspec import FlowSpec, mask_order
from steer.kernel.gateway import (BPFFS, XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE, BpfMap, BpfObject,
                                  KernelError, bpf_dir, ensure_bpffs, netns_of, obj_get, obj_pin,
                                  generic_xdp_redirects_to_cpumap, possible_cpus, xdp_link,
                                  xdp_link_ifindex)
from steer.kernel.files import UnsafePath, remove_tree, trusted_dir
from steer.kernel.privileges import CAP_BPF, CAP_NET_ADMIN, require_caps
from steer.model.names import file_part, ifname_error, netns_error, printable

PIN_DIR = "steer"                  # below bpffs: everything `steer pin` leaves in the kernel
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


def pin_root() -> str:
    return os.path.join(BPFFS, PIN_DIR)


def _trusted_pin_root(create: bool) -> bool:
    """Whether the pin root exists (made 0700 when CREATE); SteerError when someone other than
    root could have put files there."""
    try:
        return trusted_dir(pin_root(), create)
    except UnsafePath as e:
        raise SteerError(f"refusing the pin directory: {e}") from None


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
                self._maps[name] = BpfMap.from_pin(os.path.join(self.pin_dir, name))
            gone = self.detached() if reattach else None
            if gone:
                self._reattach(gone)
            return self
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
            for name in MAP_NAMES:
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
        return DeviceState(self.dev, self.netns, self.attached_mode, self.detached(), self.rules(),
                           self.counters())

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
    """state() of every device with pinned steering; a device that cannot be read says why."""
    out = []
    for dev, ns in pinned_devices():
        try:
            with XdpSteering(dev, ns) as st:
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
    """Remove all steering `steer pin` left in the kernel; what was done, one line each."""
    done = []
    for dev, ns in pinned_devices():
        remove_pin_dir(os.path.join(pin_root(), _dir_name(dev, ns)))
        done.append(f"removed XDP steering of {printable(dev)}" + (f" in {printable(ns)}" if ns else ""))
    remove_tree(pin_root())
    return done


def require_steering_caps() -> None:
    require_caps([CAP_BPF, CAP_NET_ADMIN], "steering")

