"""BPF object files: where the built ones are, and each one opened, configured, loaded and
attached with BPF links held by this process."""
from __future__ import annotations

import ctypes
import errno
import os
import time
from pathlib import Path

from steer.kernel.errors import KernelError, fail, failed_map, failed_program, libbpf_log
from steer.kernel.libbpf import libbpf
from steer.kernel.maps import BpfMap


def bpf_dir() -> Path:
    """Where the built BPF objects are: $STEER_BPF_DIR; else the package's own bpf/ (an installed
    wheel or Debian package carries them there, built when the package was); else build/ of the
    checkout the package runs from (`make`)."""
    env = os.environ.get("STEER_BPF_DIR")
    if env:
        return Path(env)
    package = Path(__file__).resolve().parents[1]   # steer/, above steer/kernel/
    packaged = package / "bpf"
    return packaged if (packaged / "flowtrace.bpf.o").exists() else package.parent / "build"


VMLINUX_BTF = "/sys/kernel/btf/vmlinux"


def module_btfs_hidden() -> bool:
    """Whether this process may not list the kernel's BTF objects (BPF_BTF_GET_NEXT_ID needs
    CAP_SYS_ADMIN, which the systemd unit and the DaemonSet do not grant). A CO-RE relocation of
    a type that vmlinux lacks sends libbpf to the modules' BTF; before libbpf 1.3 (Debian 12 has
    1.1) a refused listing then fails the whole object, where 1.3 goes on without modules."""
    next_id = ctypes.c_uint32()
    rc = libbpf().bpf_btf_get_next_id(0, ctypes.byref(next_id))
    return rc < 0 and ctypes.get_errno() == errno.EPERM


class _OpenOpts(ctypes.Structure):
    """struct bpf_object_open_opts of libbpf 1.x, up to kernel_log_level."""
    _fields_ = [("sz", ctypes.c_size_t), ("object_name", ctypes.c_char_p),
                ("relaxed_maps", ctypes.c_bool), ("pin_root_path", ctypes.c_char_p),
                ("_removed_attach_prog_fd", ctypes.c_uint32), ("kconfig", ctypes.c_char_p),
                ("btf_custom_path", ctypes.c_char_p), ("kernel_log_buf", ctypes.c_char_p),
                ("kernel_log_size", ctypes.c_size_t), ("kernel_log_level", ctypes.c_uint32)]


class _IterAttachOpts(ctypes.Structure):   # struct bpf_iter_attach_opts
    _fields_ = [("sz", ctypes.c_size_t), ("link_info", ctypes.c_void_p),
                ("link_info_len", ctypes.c_uint32)]


class BpfObject:
    """A BPF object file: open, configure, load, attach with links, close.

    Programs are attached with BPF links held by this process: when it exits, however it exits,
    the kernel detaches them.
    """

    def __init__(self, path: str, *, rodata: bytes | None = None,
                 max_entries: dict[str, int] | None = None, disable: set[str] = frozenset(),
                 only: set[str] | None = None, btf: str | None = None,
                 pin_root: str | None = None, no_pin: bool = False,
                 no_maps: set[str] = frozenset(), reuse: dict[str, int] | None = None):
        lib = libbpf()
        if not os.path.exists(path):
            raise KernelError(f"BPF object {path} not found: build it with `make`")
        self.path = path
        self._links: list[tuple[str, int]] = []
        self._obj = None
        libbpf_log.clear()   # so that an error quotes this object's log, not an older one
        opts = _OpenOpts(sz=ctypes.sizeof(_OpenOpts))
        if not btf and module_btfs_hidden() and os.path.exists(VMLINUX_BTF):
            btf = VMLINUX_BTF   # relocated against vmlinux alone, as libbpf 1.3 would
        if btf:
            opts.btf_custom_path = btf.encode()
        if pin_root:
            # maps marked LIBBPF_PIN_BY_NAME are pinned here at load, or reused when already there
            opts.pin_root_path = pin_root.encode()
        self._obj = lib.bpf_object__open_file(path.encode(), ctypes.byref(opts))
        if not self._obj:
            raise fail(f"cannot open {path}", ctypes.get_errno())
        try:
            if rodata is not None:
                m = self._map_handle(".rodata")
                buf = ctypes.create_string_buffer(rodata, len(rodata))
                rc = lib.bpf_map__set_initial_value(m, buf, len(rodata))
                if rc < 0:
                    raise fail("cannot set the BPF configuration", rc)
            for name, n in (max_entries or {}).items():
                rc = lib.bpf_map__set_max_entries(self._map_handle(name), n)
                if rc < 0:
                    raise fail(f"cannot size map {name}", rc)
            for name in disable:
                lib.bpf_program__set_autoload(self._prog_handle(name), False)
            for name in no_maps:   # not created: a program that uses one fails to load, named
                lib.bpf_map__set_autocreate(self._map_handle(name), False)
            for name, fd in (reuse or {}).items():   # another object's map, shared: its fd
                rc = lib.bpf_map__reuse_fd(self._map_handle(name), fd)
                if rc < 0:
                    raise fail(f"cannot share map {name}", rc)
            if only is not None:
                for name in set(self.programs()) - set(only):
                    lib.bpf_program__set_autoload(self._prog_handle(name), False)
            if no_pin:
                # a process-owned instance: its maps die with it instead of landing in bpffs
                m = None
                while True:
                    m = lib.bpf_object__next_map(self._obj, m)
                    if not m:
                        break
                    lib.bpf_map__set_pin_path(m, None)
            rc = lib.bpf_object__load(self._obj)
            if rc < 0:
                bad_map = failed_map()
                raise fail(f"cannot load {os.path.basename(path)} into the kernel", rc,
                           None if bad_map else failed_program(), bad_map)
        except BaseException:
            self.close()
            raise

    def _map_handle(self, name: str):
        m = libbpf().bpf_object__find_map_by_name(self._obj, name.encode())
        if not m:
            raise KernelError(f"{self.path} has no map {name}")
        return m

    def _prog_handle(self, name: str):
        p = libbpf().bpf_object__find_program_by_name(self._obj, name.encode())
        if not p:
            raise KernelError(f"{self.path} has no program {name}")
        return p

    def programs(self) -> list[str]:
        lib = libbpf()
        out, p = [], None
        while True:
            p = lib.bpf_object__next_program(self._obj, p)
            if not p:
                return out
            if lib.bpf_program__autoload(p):
                out.append(lib.bpf_program__name(p).decode())

    def map(self, name: str) -> BpfMap:
        return BpfMap(self._map_handle(name), name)

    def prog_fd(self, name: str) -> int:
        return libbpf().bpf_program__fd(self._prog_handle(name))

    def attach(self, name: str, exists_for: float = 0.0) -> None:
        """Attach NAME; while the kernel answers EEXIST, try again for up to EXISTS_FOR seconds.
        Before Linux 6.10 a raw tracepoint refuses a program already on it, and a link this
        process destroyed stays on while another holds a copy of it (a child between fork and
        exec, bpftool listing links), which it lets go within milliseconds."""
        lib = libbpf()
        deadline = time.monotonic() + exists_for
        while not (link := lib.bpf_program__attach(self._prog_handle(name))):
            err = ctypes.get_errno()
            if err != errno.EEXIST or time.monotonic() >= deadline:
                e = fail(f"cannot attach {name}", err, name)
                if err == errno.EEXIST and exists_for:
                    raise KernelError(f"{e} (its last link still held open elsewhere after "
                                      f"{exists_for} s)", err, name)
                raise e
            time.sleep(0.01)
        self._links.append((name, link))

    def attach_all(self) -> None:
        for name in self.programs():
            self.attach(name)

    def attach_perf_event(self, name: str, perf_fd: int) -> None:
        """Attach NAME to an open perf event through a BPF link (kernel >= 5.15; libbpf falls back
        to the ioctl, which the perf fd's close undoes just as well)."""
        lib = libbpf()
        link = lib.bpf_program__attach_perf_event(self._prog_handle(name), perf_fd)
        if not link:
            raise fail(f"cannot attach {name} to a perf event", ctypes.get_errno(), name)
        self._links.append((name, link))

    def attach_iter(self, name: str, map_name: str) -> None:
        """Attach the iterator program NAME to the map MAP_NAME (iter/bpf_*_map programs)."""
        lib = libbpf()
        info = ctypes.c_uint32(lib.bpf_map__fd(self._map_handle(map_name)))  # bpf_iter_link_info.map
        opts = _IterAttachOpts(sz=ctypes.sizeof(_IterAttachOpts), link_info=ctypes.addressof(info),
                               link_info_len=ctypes.sizeof(info))
        link = lib.bpf_program__attach_iter(self._prog_handle(name), ctypes.byref(opts))
        if not link:
            raise fail(f"cannot attach the iterator {name}", ctypes.get_errno(), name)
        self._links.append((name, link))

    def run_iter(self, name: str) -> bytes:
        """Run the attached iterator NAME once over its map; returns what it wrote."""
        lib = libbpf()
        link = next(link for n, link in self._links if n == name)
        fd = lib.bpf_iter_create(lib.bpf_link__fd(link))
        if fd < 0:
            raise fail(f"cannot run the iterator {name}", -fd, name)
        try:
            out = []
            while chunk := os.read(fd, 65536):
                out.append(chunk)
            return b"".join(out)
        except OSError as e:
            raise KernelError(f"cannot run the iterator {name}: {e.strerror}", e.errno,
                              name) from None
        finally:
            os.close(fd)

    @property
    def attached(self) -> list[str]:
        return [n for n, _ in self._links]

    def detach(self, name: str) -> None:
        """Take the program NAME (attached once) off its hook."""
        lib = libbpf()
        for i, (n, link) in enumerate(self._links):
            if n == name:
                del self._links[i]
                lib.bpf_link__destroy(link)
                return

    def detach_all(self) -> None:
        lib = libbpf()
        while self._links:
            _, link = self._links.pop()
            lib.bpf_link__destroy(link)

    def close(self) -> None:
        lib = libbpf()
        self.detach_all()
        if self._obj:
            lib.bpf_object__close(self._obj)
            self._obj = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
