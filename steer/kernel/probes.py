"""What the kernel accepts, asked with a program of two instructions before steer loads its own
objects: a whole object's load that the kernel refuses part of costs ~0.17 s on a VM of 2 vCPUs
(its maps, its relocations and the programs loaded before the one refused), the probe well under
a millisecond."""
from __future__ import annotations

import ctypes
import os

from steer.kernel.btf import BTF_KIND_FUNC, BTF_KIND_TYPEDEF, vmlinux_type_id
from steer.kernel.libbpf import libbpf

BPF_PROG_TYPE_TRACING = 26
BPF_TRACE_RAW_TP, BPF_TRACE_FEXIT = 23, 25   # enum bpf_attach_type: tp_btf, fexit
# r0 = 0 (BPF_ALU64 | BPF_MOV | BPF_K); exit (BPF_JMP | BPF_EXIT): one byte of each 8 set
_RETURN_ZERO = bytes([0xb7, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0])


class _ProgLoadOpts(ctypes.Structure):
    """libbpf's struct bpf_prog_load_opts up to the fields a probe sets (sz says how far)."""
    _fields_ = [("sz", ctypes.c_size_t), ("attempts", ctypes.c_int),
                ("expected_attach_type", ctypes.c_uint32), ("prog_btf_fd", ctypes.c_uint32),
                ("prog_flags", ctypes.c_uint32), ("prog_ifindex", ctypes.c_uint32),
                ("kern_version", ctypes.c_uint32), ("attach_btf_id", ctypes.c_uint32),
                ("attach_prog_fd", ctypes.c_uint32), ("attach_btf_obj_fd", ctypes.c_uint32)]


def tracing_load_errno(attach_type: int, btf_id: int) -> int:
    """The errno with which the kernel refuses a tracing program of ATTACH_TYPE on the kernel's
    BTF id BTF_ID that returns 0 and does nothing else; 0 where it loads one (closed at once)."""
    opts = _ProgLoadOpts(sz=ctypes.sizeof(_ProgLoadOpts), expected_attach_type=attach_type,
                         attach_btf_id=btf_id)
    insns = ctypes.create_string_buffer(_RETURN_ZERO, len(_RETURN_ZERO))
    fd = libbpf().bpf_prog_load(BPF_PROG_TYPE_TRACING, b"steer_probe", b"GPL", insns,
                                len(_RETURN_ZERO) // 8, ctypes.byref(opts))
    if fd < 0:
        return -fd
    os.close(fd)
    return 0


def fexit_errno(func: str) -> int | None:
    """The errno with which the kernel refuses an fexit program on the kernel function FUNC (0:
    it loads one); None where its BTF has no FUNC."""
    fid = vmlinux_type_id(func, BTF_KIND_FUNC)
    return None if fid is None else tracing_load_errno(BPF_TRACE_FEXIT, fid)


def tp_btf_errno(tracepoint: str) -> int | None:
    """The same for a tp_btf program on TRACEPOINT (None: the BTF has no btf_trace_TRACEPOINT):
    the probe's own check, on a kind of program every kernel steer runs on loads."""
    tid = vmlinux_type_id(f"btf_trace_{tracepoint}", BTF_KIND_TYPEDEF)
    return None if tid is None else tracing_load_errno(BPF_TRACE_RAW_TP, tid)
