"""What the running kernel's BTF says it has: a function's parameters, a type, a redirect path."""
from __future__ import annotations

import contextlib
import ctypes
import functools
import threading

from steer.kernel.libbpf import _BtfType, libbpf

BTF_KIND_STRUCT, BTF_KIND_ENUM, BTF_KIND_TYPEDEF, BTF_KIND_FUNC, BTF_KIND_DATASEC = 4, 6, 8, 12, 15


class _VarSecinfo(ctypes.Structure):   # struct btf_var_secinfo, after a DATASEC's btf_type
    _fields_ = [("type", ctypes.c_uint32), ("offset", ctypes.c_uint32),
                ("size", ctypes.c_uint32)]


_shared = threading.local()   # .btf: the parse a shared_vmlinux_btf() block of this thread holds


@contextlib.contextmanager
def shared_vmlinux_btf():
    """Inside the block, this thread's queries of the kernel's BTF read one parse of it: a parse
    takes ~16 ms and ~6 MB (a 5.5 MB vmlinux BTF), and a tracer's start asks a dozen questions.
    Outside one, each query parses and frees it, so that a long-running process keeps none."""
    if getattr(_shared, "btf", None):
        yield
        return
    lib = libbpf()
    _shared.btf = lib.btf__load_vmlinux_btf()
    try:
        yield
    finally:
        btf, _shared.btf = _shared.btf, None
        if btf:
            lib.btf__free(btf)


@contextlib.contextmanager
def _vmlinux():
    """The kernel's parsed BTF (None where it has none): the shared parse, else one of its own."""
    held = getattr(_shared, "btf", None)
    if held:
        yield held
        return
    lib = libbpf()
    btf = lib.btf__load_vmlinux_btf()
    try:
        yield btf
    finally:
        if btf:
            lib.btf__free(btf)


def vmlinux_type_id(name: str, kind: int = BTF_KIND_TYPEDEF) -> int | None:
    """The BTF id of NAME of KIND in the kernel's BTF (None: not there): what a program attached
    by BTF names (an fexit its function, a tp_btf its tracepoint's btf_trace_<name>)."""
    with _vmlinux() as btf:
        tid = libbpf().btf__find_by_name_kind(btf, name.encode(), kind) if btf else 0
        return tid if tid > 0 else None


def percpu_distance(frm: str, to: str) -> int | None:
    """How far the per-CPU variable TO lies from FRM in every CPU's per-CPU area, in bytes, by
    the running kernel's BTF (their offsets in its .data..percpu section); None where either is
    not there. For the BPF side, which reaches FRM's copy through a pointer and would read TO's
    beside it: kallsyms lists per-CPU variables only with CONFIG_KALLSYMS_ALL."""
    lib = libbpf()
    with _vmlinux() as btf:
        if not btf:
            return None
        sid = lib.btf__find_by_name_kind(btf, b".data..percpu", BTF_KIND_DATASEC)
        if sid <= 0:
            return None
        sec = lib.btf__type_by_id(btf, sid)
        n = sec.contents.info & 0xffff
        infos = (_VarSecinfo * n).from_address(ctypes.addressof(sec.contents)
                                               + ctypes.sizeof(_BtfType))
        offsets = {}
        for info in infos:
            var = lib.btf__type_by_id(btf, info.type).contents
            name = lib.btf__name_by_offset(btf, var.name_off)
            if name in (frm.encode(), to.encode()):
                offsets[name.decode()] = info.offset
        if len(offsets) < 2:
            return None
        return offsets[to] - offsets[frm]


@functools.lru_cache(maxsize=1)
def kvm_steal_offset() -> int:
    """bpf/run_clock.bpf.h's STEAL_OFF: where a CPU's KVM steal clock (steal_time, the time the
    host ran something else in the vCPU's place, as the host keeps it) lies from its run queue;
    0 where the kernel's BTF has either not (no KVM guest support): the run clock then takes the
    steal the run queue has counted."""
    return percpu_distance("runqueues", "steal_time") or 0


def vmlinux_func_params(name: str) -> int | None:
    """How many parameters the kernel function NAME takes by the running kernel's BTF (None: no
    such function there), so that a hook is only attached where it reads the arguments it means."""
    lib = libbpf()
    with shared_vmlinux_btf(), _vmlinux() as btf:
        fid = vmlinux_type_id(name, BTF_KIND_FUNC)
        if fid is None:
            return None
        proto = lib.btf__type_by_id(btf, lib.btf__type_by_id(btf, fid).contents.type)
        return proto.contents.info & 0xffff      # a FUNC_PROTO's vlen is its parameter count


def vmlinux_has_type(name: str, kind: int = BTF_KIND_TYPEDEF) -> bool:
    """Whether the running kernel's BTF defines NAME (a tracepoint exists as btf_trace_<name>)."""
    return vmlinux_type_id(name, kind) is not None


def irq_time_kept_from_tasks() -> bool:
    """Whether the kernel keeps interrupt and softirq time out of tasks' run time: built with
    CONFIG_IRQ_TIME_ACCOUNTING, whose per-CPU irq clock (struct irqtime, kernel/sched/sched.h) only
    such a kernel defines. Debian's kernels are built without it; many other distributions'
    with it."""
    return vmlinux_has_type("irqtime", BTF_KIND_STRUCT)


def generic_xdp_redirects_to_cpumap() -> bool:
    """Whether generic (skb) XDP can redirect to a cpumap: Linux 5.15 added that path
    (cpu_map_generic_redirect); before it the kernel refuses to attach generic XDP that uses a
    cpumap (5.9-5.14: EINVAL), or drops what it redirects."""
    return vmlinux_has_type("cpu_map_generic_redirect", BTF_KIND_FUNC)
