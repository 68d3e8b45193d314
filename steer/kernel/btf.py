"""What the running kernel's BTF says it has: a function's parameters, a type, a redirect path."""
from __future__ import annotations

from steer.kernel.libbpf import libbpf

BTF_KIND_ENUM, BTF_KIND_TYPEDEF, BTF_KIND_FUNC = 6, 8, 12


def vmlinux_func_params(name: str) -> int | None:
    """How many parameters the kernel function NAME takes by the running kernel's BTF (None: no
    such function there), so that a hook is only attached where it reads the arguments it means."""
    lib = libbpf()
    btf = lib.btf__load_vmlinux_btf()
    if not btf:
        return None
    try:
        fid = lib.btf__find_by_name_kind(btf, name.encode(), BTF_KIND_FUNC)
        if fid <= 0:
            return None
        proto = lib.btf__type_by_id(btf, lib.btf__type_by_id(btf, fid).contents.type)
        return proto.contents.info & 0xffff      # a FUNC_PROTO's vlen is its parameter count
    finally:
        lib.btf__free(btf)


def vmlinux_has_type(name: str, kind: int = BTF_KIND_TYPEDEF) -> bool:
    """Whether the running kernel's BTF defines NAME (a tracepoint exists as btf_trace_<name>)."""
    lib = libbpf()
    btf = lib.btf__load_vmlinux_btf()
    if not btf:
        return False
    try:
        return lib.btf__find_by_name_kind(btf, name.encode(), kind) > 0
    finally:
        lib.btf__free(btf)


def generic_xdp_redirects_to_cpumap() -> bool:
    """Whether generic (skb) XDP can redirect to a cpumap: Linux 5.15 added that path
    (cpu_map_generic_redirect); before it the kernel refuses to attach generic XDP that uses a
    cpumap (5.9-5.14: EINVAL), or drops what it redirects."""
    return vmlinux_has_type("cpu_map_generic_redirect", BTF_KIND_FUNC)
