"""Programs by fd: XDP attached through a BPF link, pins, run statistics, and test runs on a
packet (BPF_PROG_TEST_RUN)."""
from __future__ import annotations

import ctypes
import os
import struct

from steer.kernel.errors import KernelError, fail
from steer.kernel.libbpf import libbpf

BPF_XDP = 37                       # enum bpf_attach_type
XDP_FLAGS_SKB_MODE, XDP_FLAGS_DRV_MODE = 1 << 1, 1 << 2


class _LinkCreateOpts(ctypes.Structure):
    """struct bpf_link_create_opts of libbpf 1.x; steer sets sz and flags and leaves the rest 0."""
    _fields_ = [("sz", ctypes.c_size_t), ("flags", ctypes.c_uint32), ("iter_info", ctypes.c_void_p),
                ("iter_info_len", ctypes.c_uint32), ("target_btf_id", ctypes.c_uint32),
                ("_union", ctypes.c_uint64 * 4)]


def xdp_link(prog_fd: int, ifindex: int, flags: int) -> int:
    """Attach an XDP program to IFINDEX (of the calling thread's netns) through a BPF link; the
    returned fd owns the attachment: close it, or unlink its pin, and the program is detached."""
    opts = _LinkCreateOpts(sz=ctypes.sizeof(_LinkCreateOpts), flags=flags)
    fd = libbpf().bpf_link_create(prog_fd, ifindex, BPF_XDP, ctypes.byref(opts))
    if fd < 0:
        raise KernelError(f"XDP attach: {os.strerror(-fd)}", -fd)
    return fd


def xdp_link_ifindex(link_fd: int) -> int:
    """The device an XDP link is attached to, 0 once that device is gone (unregistering a netdev
    detaches its links; the link object lives on while someone holds or pins it). struct
    bpf_link_info: type, id, prog_id, then the union at offset 16, whose xdp.ifindex comes first."""
    buf = ctypes.create_string_buffer(64)
    n = ctypes.c_uint32(len(buf))
    rc = libbpf().bpf_obj_get_info_by_fd(link_fd, buf, ctypes.byref(n))
    if rc < 0:
        raise fail("cannot read link info", rc)
    return struct.unpack_from("I", buf.raw, 16)[0]


def _prog_info(prog_fd: int) -> bytes:
    """A program's struct bpf_prog_info, as much of it as the kernel fills."""
    buf = ctypes.create_string_buffer(256)
    n = ctypes.c_uint32(len(buf))
    rc = libbpf().bpf_obj_get_info_by_fd(prog_fd, buf, ctypes.byref(n))
    if rc < 0:
        raise fail("cannot read program info", rc)
    return buf.raw[:n.value]


def prog_id(prog_fd: int) -> int:
    """A loaded program's id (struct bpf_prog_info: type, then id; uapi since 4.13)."""
    return struct.unpack_from("I", _prog_info(prog_fd), 4)[0]


def prog_run_stats(prog_fd: int) -> tuple[int, int]:
    """(run_time_ns, run_cnt) of a program: non-zero only while kernel.bpf_stats_enabled is 1.
    Offsets 192 and 200 of struct bpf_prog_info are uapi, stable since 5.1."""
    info = _prog_info(prog_fd)
    if len(info) < 208:
        return 0, 0
    return struct.unpack_from("QQ", info, 192)


def prog_recursion_misses(prog_fd: int) -> int:
    """The times the kernel skipped a tracing program because it was already running on that
    CPU (a hard interrupt's tracepoint nested in a softirq's): struct bpf_prog_info's
    recursion_misses, offset 208, uapi since 5.12 (0 before)."""
    info = _prog_info(prog_fd)
    return struct.unpack_from("Q", info, 208)[0] if len(info) >= 216 else 0


def prog_sizes(prog_fd: int) -> tuple[int, int]:
    """(instructions after the verifier's rewrites, bytes of machine code) of a program: struct
    bpf_prog_info's xlated_prog_len / 8 and jited_prog_len (offsets 20 and 16, uapi since 4.13)."""
    jited, xlated = struct.unpack_from("II", _prog_info(prog_fd), 16)
    return xlated // 8, jited


def obj_get(path: str) -> int:
    """An fd for a pinned object (the caller closes it)."""
    fd = libbpf().bpf_obj_get(path.encode())
    if fd < 0:
        raise fail(f"cannot open pinned {path}", fd)
    return fd


def obj_pin(fd: int, path: str) -> None:
    rc = libbpf().bpf_obj_pin(fd, path.encode())
    if rc < 0:
        raise fail(f"cannot pin {path}", rc)


class _TestRunOpts(ctypes.Structure):
    """struct bpf_test_run_opts of libbpf 1.x, up to the fields steer uses."""
    _fields_ = [("sz", ctypes.c_size_t), ("data_in", ctypes.c_void_p), ("data_out", ctypes.c_void_p),
                ("data_size_in", ctypes.c_uint32), ("data_size_out", ctypes.c_uint32),
                ("ctx_in", ctypes.c_void_p), ("ctx_out", ctypes.c_void_p),
                ("ctx_size_in", ctypes.c_uint32), ("ctx_size_out", ctypes.c_uint32),
                ("retval", ctypes.c_uint32), ("repeat", ctypes.c_int), ("duration", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("cpu", ctypes.c_uint32), ("batch_size", ctypes.c_uint32)]


def prog_test_run(prog_fd: int, packet: bytes, out_size: int = 16384,
                  repeat: int = 1) -> tuple[int, bytes, int]:
    """Run a program on PACKET through BPF_PROG_TEST_RUN, REPEAT times in the kernel:
    (return code, packet after, mean run time in ns as the kernel measured it)."""
    din = ctypes.create_string_buffer(packet, len(packet))
    dout = ctypes.create_string_buffer(out_size)
    opts = _TestRunOpts(sz=ctypes.sizeof(_TestRunOpts), data_in=ctypes.addressof(din),
                        data_out=ctypes.addressof(dout), data_size_in=len(packet),
                        data_size_out=out_size, repeat=repeat)
    rc = libbpf().bpf_prog_test_run_opts(prog_fd, ctypes.byref(opts))
    if rc < 0:
        raise fail("BPF_PROG_TEST_RUN", rc)
    return opts.retval, dout.raw[:opts.data_size_out], opts.duration
