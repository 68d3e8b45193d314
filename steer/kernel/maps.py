"""BPF maps and ring buffers, read and written with bytes: one entry, a kernel batch, or a pin
opened by path."""
from __future__ import annotations

import ctypes
import errno
import os
import select

from steer.kernel.errors import KernelError, fail
from steer.kernel.libbpf import RING_FN, libbpf


def possible_cpus() -> int:
    n = libbpf().libbpf_num_possible_cpus()
    if n < 0:
        raise fail("cannot count possible CPUs", n)
    return n



BPF_MAP_TYPE_PERCPU_HASH, BPF_MAP_TYPE_PERCPU_ARRAY, BPF_MAP_TYPE_LRU_PERCPU_HASH = 5, 6, 10
_PERCPU_TYPES = {BPF_MAP_TYPE_PERCPU_HASH, BPF_MAP_TYPE_PERCPU_ARRAY, BPF_MAP_TYPE_LRU_PERCPU_HASH}
BPF_ANY = 0   # update flags: the only one steer passes
_NO_BATCH = (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS)   # kernel < 5.6
BPF_F_RDONLY = 1 << 3


class _MapInfo(ctypes.Structure):
    """The head of struct bpf_map_info (uapi/linux/bpf.h)."""
    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32), ("key_size", ctypes.c_uint32),
                ("value_size", ctypes.c_uint32), ("max_entries", ctypes.c_uint32),
                ("map_flags", ctypes.c_uint32), ("name", ctypes.c_char * 16)]



class _ObjGetOpts(ctypes.Structure):
    """struct bpf_obj_get_opts of libbpf 1.x, up to file_flags (1.2 adds path_fd after it)."""
    _fields_ = [("sz", ctypes.c_size_t), ("file_flags", ctypes.c_uint32)]


class BpfRing:
    """A BPF ring buffer read for its wake-ups and its latest record: poll() sleeps (without the
    GIL) until the programs put records in it, TIMEOUT_MS pass, or another thread calls wake(),
    and says how many records it took; `last` is the latest of them. The sleep is a poll(2) of
    libbpf's epoll descriptor beside an eventfd of our own, so a stop does not wait out the
    timeout."""

    def __init__(self, bpf_map: "BpfMap"):
        lib = libbpf()
        self.name = bpf_map.name
        self.last = b""
        self._count = RING_FN(self._keep)   # kept: libbpf holds the pointer
        self._rb = lib.ring_buffer__new(bpf_map.fd, self._count, None, None)
        if not self._rb:
            raise fail(f"cannot read the ring buffer {self.name}", ctypes.get_errno())
        self._wake = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self._poll = select.poll()
        self._poll.register(lib.ring_buffer__epoll_fd(self._rb), select.POLLIN)
        self._poll.register(self._wake, select.POLLIN)

    def _keep(self, ctx, data, size) -> int:
        self.last = ctypes.string_at(data, size)
        return 0

    def poll(self, timeout_ms: int) -> int:
        """Records taken: 0 after the timeout or a wake()."""
        try:
            ready = self._poll.poll(timeout_ms)
        except InterruptedError:
            return 0
        if any(fd == self._wake for fd, _ in ready):
            try:
                os.eventfd_read(self._wake)
            except BlockingIOError:
                pass
        n = libbpf().ring_buffer__consume(self._rb)
        if n < 0 and n != -errno.EINTR:
            raise fail(f"cannot read the ring buffer {self.name}", n)
        return max(n, 0)

    def wake(self) -> None:
        """The thread in poll() returns now."""
        os.eventfd_write(self._wake, 1)

    def close(self) -> None:
        if self._rb:
            libbpf().ring_buffer__free(self._rb)
            self._rb = None
            os.close(self._wake)


class BpfMap:
    """A loaded map, read and written with bytes keys and values (per-CPU maps: a list per CPU)."""

    def __init__(self, handle, name: str):
        lib = libbpf()
        self.name = name
        self.fd = lib.bpf_map__fd(handle)
        self._owned = False
        self._setup(lib.bpf_map__key_size(handle), lib.bpf_map__value_size(handle),
                    lib.bpf_map__max_entries(handle), lib.bpf_map__type(handle))

    @classmethod
    def from_pin(cls, path: str, readonly: bool = False) -> "BpfMap":
        """A map pinned in bpffs, opened by path; its sizes come from the kernel. READONLY asks
        only to read it, which a pin's read permission allows (a pin shared with a group)."""
        lib = libbpf()
        fd = lib.bpf_obj_get_opts(path.encode(), ctypes.byref(_ObjGetOpts(
            sz=ctypes.sizeof(_ObjGetOpts), file_flags=BPF_F_RDONLY if readonly else 0)))
        if fd < 0:
            raise fail(f"cannot open pinned map {path}", fd)
        info = _MapInfo()
        n = ctypes.c_uint32(ctypes.sizeof(info))
        rc = lib.bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(n))
        if rc < 0:
            os.close(fd)
            raise fail(f"cannot inspect pinned map {path}", rc)
        m = cls.__new__(cls)
        m.name, m.fd, m._owned = os.path.basename(path), fd, True
        m._setup(info.key_size, info.value_size, info.max_entries, info.type)
        return m

    def close(self) -> None:
        if self._owned and self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _setup(self, key_size, value_size, max_entries, map_type):
        self.key_size, self.value_size, self.max_entries = key_size, value_size, max_entries
        self.percpu = map_type in _PERCPU_TYPES
        self._ncpu = possible_cpus() if self.percpu else 1
        # per-CPU values are laid out at 8-byte strides (kernel/bpf/syscall.c, bpf_map_value_size)
        self._stride = (self.value_size + 7) & ~7 if self.percpu else self.value_size

    def _split(self, raw: bytes) -> bytes | list[bytes]:
        if not self.percpu:
            return raw
        return [raw[i * self._stride: i * self._stride + self.value_size] for i in range(self._ncpu)]

    def lookup(self, key: bytes) -> bytes | list[bytes] | None:
        k = ctypes.create_string_buffer(key, self.key_size)
        v = ctypes.create_string_buffer(self._stride * self._ncpu)
        rc = libbpf().bpf_map_lookup_elem(self.fd, k, v)
        if rc == -errno.ENOENT:
            return None
        if rc < 0:
            raise fail(f"lookup in map {self.name}", rc)
        return self._split(v.raw)

    def delete(self, key: bytes) -> bool:
        k = ctypes.create_string_buffer(key, self.key_size)
        rc = libbpf().bpf_map_delete_elem(self.fd, k)
        if rc == -errno.ENOENT:
            return False
        if rc < 0:
            raise fail(f"delete from map {self.name}", rc)
        return True

    def update(self, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
        k = ctypes.create_string_buffer(key, self.key_size)
        v = ctypes.create_string_buffer(value, max(len(value), self.value_size))
        rc = libbpf().bpf_map_update_elem(self.fd, k, v, flags)
        if rc < 0:
            raise fail(f"update of map {self.name}", rc)

    def update_batch(self, keys: bytes, values: bytes) -> int:
        """Insert or replace many entries in one call (5.6+): KEYS and VALUES are the packed
        arrays. Returns how many were written."""
        n = len(keys) // self.key_size
        if len(values) != n * self._stride * self._ncpu:
            raise ValueError("keys and values do not pair up")
        count = ctypes.c_uint32(n)
        kb = ctypes.create_string_buffer(keys, len(keys))
        vb = ctypes.create_string_buffer(values, len(values))
        rc = libbpf().bpf_map_update_batch(self.fd, kb, vb, ctypes.byref(count), None)
        if rc < 0:
            raise fail(f"batch update of map {self.name}", rc)
        return count.value

    def memlock(self) -> int | None:
        """Kernel memory charged to the map, from /proc/self/fdinfo."""
        try:
            with open(f"/proc/self/fdinfo/{self.fd}") as f:
                for line in f:
                    if line.startswith("memlock:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return None

    def _batches(self, batch: int):
        """(keys, values, count) per kernel batch lookup (5.6+): packed arrays, per-CPU values at
        their 8-byte stride. Raises KernelError with one of _NO_BATCH where the kernel has none."""
        lib = libbpf()
        vsize = self._stride * self._ncpu
        keys = ctypes.create_string_buffer(self.key_size * batch)
        vals = ctypes.create_string_buffer(vsize * batch)
        token = ctypes.create_string_buffer(max(self.key_size, 8))
        in_batch = None
        while True:
            count = ctypes.c_uint32(batch)
            rc = lib.bpf_map_lookup_batch(self.fd, in_batch, token, keys, vals, ctypes.byref(count), None)
            err = -rc if rc < 0 else 0
            if err and err != errno.ENOENT:
                raise fail(f"batch lookup in map {self.name}", err)
            n = count.value
            if n:
                yield keys.raw[:n * self.key_size], vals.raw[:n * vsize], n
            if err == errno.ENOENT:
                return
            in_batch = token

    def raw_batches(self, batch: int = 8192):
        """Every entry as packed arrays, (keys, values, count) per batch, for bulk unpacking;
        one key at a time on kernels without batch lookups."""
        gen = self._batches(batch)
        try:
            first = next(gen, None)
        except KernelError as e:
            if e.errno not in _NO_BATCH:
                raise
            items = self._items_iter()
            if items:
                pad = lambda v: v.ljust(self._stride, b"\0")  # noqa: E731 - per-CPU stride
                yield (b"".join(k for k, _ in items),
                       b"".join(pad(v) if isinstance(v, bytes) else b"".join(map(pad, v))
                                for _, v in items),
                       len(items))
            return
        if first:
            yield first
        yield from gen

    def items(self, batch: int = 4096) -> list[tuple[bytes, bytes | list[bytes]]]:
        """Every entry as (key, value) pairs; per-CPU values as a list per CPU."""
        vsize = self._stride * self._ncpu
        out = []
        for kraw, vraw, n in self.raw_batches(batch):
            for i in range(n):
                out.append((kraw[i * self.key_size:(i + 1) * self.key_size],
                            self._split(vraw[i * vsize:(i + 1) * vsize])))
        return out

    def _items_iter(self):
        lib = libbpf()
        out = []
        cur = None
        nxt = ctypes.create_string_buffer(self.key_size)
        while lib.bpf_map_get_next_key(self.fd, cur, nxt) == 0:
            key = nxt.raw
            val = self.lookup(key)
            if val is not None:
                out.append((key, val))
            cur = ctypes.create_string_buffer(key, self.key_size)
        return out
