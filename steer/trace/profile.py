"""steer profile: where each flow's receive CPU goes, in the categories of Cai et al. (SIGCOMM'21,
"Understanding host network stack overheads": data copy, TCP/IP, netdevice, skb management,
memory, lock, scheduling, the rest).

The sampled tracer's cpu-clock samples already know which flow a CPU works on and for which side
(its NET_RX processing, a cpumap kthread, the reader inside its receive syscall). With profiling
on, each such sample also takes its kernel stack and is counted under the category of the
innermost frame that has a rule below: the function it landed in, or, for a helper without a rule
(a usercopy check, memset), the nearest caller with one. The kernel does the classification: this
module cuts kernel text into ranges of one category each from /proc/kallsyms and RULES, the BPF
program looks the frames up in them, and only counts per (flow, CPU, side, category) come back.
"""
from __future__ import annotations

import fnmatch
import re
import struct
from dataclasses import dataclass, field

from steer.abi import flowtrace as abi
from steer.model.samples import FlowId

# the categories, in the order tables and charts show them
CATEGORIES = ("data_copy", "tcp_ip", "netdev", "skb_mgmt", "memory", "lock", "scheduling", "other")
CATEGORY_IDS = {name: abi.FT_CATEGORY_OTHER if name == "other" else i + 2
                for i, name in enumerate(CATEGORIES)}
CATEGORY_NAMES = {i: name for name, i in CATEGORY_IDS.items()}

# Which category a kernel function is in: the first rule whose pattern matches wins. Patterns are
# shell globs on the function name; "module:NAME" takes every function of a module that no name
# rule took (a NIC driver's are netdev work). Order matters where names overlap: napi_alloc_skb is skb management
# before napi_* is netdev, tcp_rmem_schedule memory before tcp_* is TCP/IP, and the skb_* catch-all
# comes last.
RULES: tuple[tuple[str | None, tuple[str, ...]], ...] = (
    # A timer's sample cannot land where interrupts are off: the time spent there shows at the
    # point that turns them back on. The functions that do so pass their samples to their caller,
    # which knows what the interrupts were off for (a wake-up, a queue); where the host has a
    # PMU, an NMI-based event samples inside such sections and this rule matters less.
    (None, (
        "_raw_spin_unlock_irqrestore", "_raw_spin_unlock_irq", "_raw_read_unlock_irq*",
        "_raw_write_unlock_irq*", "__raw_spin_unlock_irq*", "arch_local_irq_restore",
        "__local_bh_enable_ip", "_raw_spin_unlock_bh", "local_bh_enable*")),
    ("data_copy", (
        "copy_user*", "rep_movs*", "_copy_to_iter", "_copy_from_iter*", "copy_page_to_iter*",
        "copy_page_from_iter*", "copyout*", "copyin*", "_copy_to_user", "_copy_from_user",
        "__copy_user*", "copy_to_user*", "copy_from_user*", "__arch_copy_*", "raw_copy_*",
        "skb_copy_datagram_iter", "__skb_datagram_iter", "simple_copy_to_iter",
        "skb_copy_datagram_from_iter", "skb_do_copy_data_nocache", "skb_copy_bits",
        "csum_partial_copy*", "csum_and_copy*", "memcpy*", "__memcpy*", "memmove*", "__memmove*",
        "__check_object_size", "check_heap_object", "__check_heap_object")),
    ("skb_mgmt", (
        "*kfree_skb*", "kfree_skbmem", "skb_release_*", "skb_free_head", "consume_skb",
        "napi_consume_skb", "__consume_stateless_skb", "skb_attempt_defer_free",
        "skb_defer_free_flush", "sk_skb_reason_drop", "__alloc_skb", "alloc_skb*",
        "__napi_alloc_skb", "napi_alloc_skb", "__netdev_alloc_skb", "netdev_alloc_skb",
        "build_skb*", "__build_skb*", "napi_build_skb", "__napi_build_skb", "napi_skb_cache_*",
        "napi_skb_free_*", "__skb_clone", "skb_clone*", "__copy_skb_header", "skb_try_coalesce",
        "skb_coalesce_rx_frag", "skb_add_rx_frag*", "skb_condense", "skb_segment*",
        "pskb_expand_head", "__pskb_pull_tail", "pskb_trim*", "skb_split", "sock_rfree",
        "sock_wfree", "napi_pp_put_page", "skb_pp_*", "skb_page_unref")),
    ("memory", (
        "kmem_cache_*", "__kmem_cache_*", "kmalloc*", "__kmalloc*", "kfree", "kvfree*",
        "___slab_alloc", "__slab_alloc*", "__slab_free", "slab_*", "*_slab_*", "alloc_pages*",
        "__alloc_pages*", "alloc_frozen_pages*", "__alloc_frozen_pages*",
        "get_page_from_freelist", "rmqueue*", "__rmqueue*", "free_pages*", "__free_pages*",
        "free_unref_*", "free_pcppages_bulk", "__free_one_page", "free_frozen_pages*",
        "__folio_put", "folio_put*", "put_page*", "page_frag_*", "__page_frag_*", "page_pool_*",
        "__page_pool_*", "mem_cgroup_*", "__mem_cgroup_*", "memcg_*", "__memcg_*", "obj_cgroup_*",
        "refill_obj_stock", "consume_obj_stock", "mod_memcg_*", "__mod_memcg_*", "__mod_lruvec_*",
        "mod_lruvec_*", "__mod_node_page_state", "mod_node_page_state", "__mod_zone_page_state",
        "prep_new_page", "post_alloc_hook", "__sk_mem_*", "sk_mem_*", "sk_forced_mem_schedule",
        "tcp_rmem_schedule", "tcp_wmem_schedule")),
    ("lock", (
        "_raw_spin_*", "raw_spin_*", "_raw_read_*", "_raw_write_*", "queued_spin_*",
        "native_queued_spin_*", "__pv_queued_spin_*", "pv_queued_spin_*", "queued_read_*",
        "queued_write_*", "do_raw_spin_*", "lock_sock*", "__lock_sock*", "release_sock",
        "__release_sock", "mutex_*", "__mutex_*", "down_read*", "up_read", "down_write*",
        "up_write", "rwsem_*", "__rwsem_*")),
    ("scheduling", (
        "schedule*", "__schedule", "try_to_wake_up", "wake_up_*", "__wake_up*",
        "autoremove_wake_function", "default_wake_function", "woken_wake_function", "ttwu_*",
        "__ttwu_*", "enqueue_task*", "dequeue_task*", "enqueue_entity", "dequeue_entit*",
        "pick_next_*", "__pick_next_*", "pick_task*", "put_prev_*", "set_next_*",
        "finish_task_switch*", "__switch_to*", "switch_mm*", "update_curr*", "update_load_avg",
        "__update_load_avg*", "update_cfs_*", "update_rq_clock*", "select_task_rq*",
        "select_idle_*", "check_preempt*", "wakeup_preempt*", "resched_curr*", "sched_*",
        "__sched_*", "psi_*", "prepare_task_switch", "context_switch", "reweight_*",
        "place_entity", "sched_balance_*", "newidle_balance", "load_balance")),
    ("netdev", (
        "*_gro_*", "gro_*", "napi_*", "__napi_*", "net_rx_action", "process_backlog",
        "netif_*", "__netif_*", "dev_*", "__dev_*", "netdev_*", "__netdev_*",
        "enqueue_to_backlog", "get_rps_cpu", "rps_*", "eth_*", "veth_*", "__veth_*", "virtnet_*",
        "virtqueue_*", "vring_*", "detach_buf*", "receive_buf", "receive_mergeable*",
        "receive_small*", "receive_big", "page_to_skb", "xdp_*", "__xdp_*", "bpf_xdp_*",
        "cpu_map_*", "__cpu_map_*", "sch_direct_xmit", "qdisc_*", "__qdisc_*", "pfifo_fast_*",
        "loopback_xmit", "validate_xmit_*",
        *(f"module:{m}" for m in (
            "mlx5_core", "mlx4_en", "ixgbe", "ixgbevf", "i40e", "iavf", "ice", "idpf", "igb", "igc",
            "e1000", "e1000e", "bnxt_en", "bnx2x", "tg3", "ena", "gve", "sfc", "nfp", "be2net",
            "qede", "cxgb4", "hv_netvsc", "vmxnet3", "virtio_net", "veth", "r8169", "tun", "vxlan",
            "geneve", "macvlan", "ipvlan", "bonding", "team", "8021q", "bridge")))),
    ("tcp_ip", (
        "tcp_*", "__tcp_*", "tcp4_*", "tcp6_*", "tcpv6_*", "ip_*", "__ip_*", "ip4_*", "ip6_*",
        "__ip6_*", "ipv4_*", "ipv6_*", "inet_*", "__inet_*", "inet6_*", "udp_*", "__udp_*",
        "udp4_*", "udp6_*", "__udp4_*", "__udp6_*", "udpv6_*", "icmp_*", "raw_v4_*", "raw_v6_*",
        "raw_local_deliver", "nf_*", "__nf_*", "nft_*", "ipt_*", "ip6t_*", "sk_*", "__sk_*",
        "sock_*", "__sock_*", "csum_*", "__skb_checksum*", "skb_checksum*", "fib_*", "__fib_*",
        "dst_*", "rt_*", "neigh_*", "__neigh_*")),
    ("skb_mgmt", ("skb_*", "__skb_*")),
)

_SUFFIX = re.compile(r"\.(cold|isra|constprop|part|llvm|lto_priv)(\.\d+)*.*$")


def _compile(rules) -> re.Pattern:
    """One pattern of every rule, a named group each: an alternation tries its branches in
    order, so the first rule that matches is the one that wins, in one pass over the name."""
    return re.compile("|".join(f"(?P<r{i}>{'|'.join(fnmatch.translate(p) for p in pats)})"
                               for i, (_, pats) in enumerate(rules)))


_COMPILED = _compile(RULES)
_RULE_IDS = {f"r{i}": CATEGORY_IDS[cat] if cat else abi.FT_CATEGORY_NONE
             for i, (cat, _) in enumerate(RULES)}


def category_of(name: str, module: str | None = None) -> str | None:
    """The category of kernel function NAME (of MODULE, None for the kernel itself), or None
    where no rule names it: its callers decide."""
    c = _category_id(name, module)
    return CATEGORY_NAMES[c] if c != abi.FT_CATEGORY_NONE else None


def _category_id(name: str, module: str | None) -> int:
    base = _SUFFIX.sub("", name) if "." in name else name   # clones: tcp_v4_rcv.cold, f.isra.0
    m = _COMPILED.match(base)
    if module:
        # a module's function: by its name first, else by its module (a NIC driver's)
        m = m or _COMPILED.match(f"module:{module}")
    return _RULE_IDS[m.lastgroup] if m else abi.FT_CATEGORY_NONE


def text_categories(path: str = "/proc/kallsyms") -> list[tuple[int, int]]:
    """Kernel text cut into ranges of one category: sorted (start, category id), each running to
    the next start, consecutive functions of one category merged. A name without a rule is a range
    of FT_CATEGORY_NONE (its caller decides). Raises OSError, or ValueError when kallsyms shows no
    addresses (kptr_restrict: profiling needs CAP_SYSLOG)."""
    by_addr: dict[int, int] = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) < 3 or parts[1] not in ("t", "T", "w", "W"):
                continue
            addr = int(parts[0], 16)
            module = parts[3].strip("[]") if len(parts) > 3 else None
            if module == "bpf":
                module = None   # BPF programs' JIT images: no rule, like any unnamed helper
            cid = _category_id(parts[2], module)
            # aliases at one address: the one with a rule speaks for it
            if by_addr.get(addr, abi.FT_CATEGORY_NONE) == abi.FT_CATEGORY_NONE:
                by_addr[addr] = cid
    if not by_addr or set(by_addr) == {0}:
        raise ValueError("/proc/kallsyms shows no addresses (kptr_restrict): steer profile needs "
                         "CAP_SYSLOG, or run as root")
    ranges: list[tuple[int, int]] = []
    for addr in sorted(by_addr):
        cid = by_addr[addr]
        if not ranges or ranges[-1][1] != cid:
            ranges.append((addr, cid))
    # past the last symbol nothing is known: a range with no rule, so that a frame there is not
    # charged to the last function's category
    last = max(by_addr)
    if ranges[-1][1] != abi.FT_CATEGORY_NONE:
        ranges.append((last + 1, abi.FT_CATEGORY_NONE))
    return ranges


def pack_ranges(ranges: list[tuple[int, int]]) -> tuple[bytes, bytes]:
    """The ranges as the keys and values of the profile_text array."""
    keys = b"".join(struct.pack("I", i) for i in range(len(ranges)))
    values = b"".join(bytes(abi.TextCategory(start, cid, 0)) for start, cid in ranges)
    return keys, values


def stack_category(ips: list[int], ranges: list[tuple[int, int]]) -> str:
    """What the BPF program computes, for the tests: the category of the innermost frame of IPS
    (innermost first) that has one; 'other' where none has."""
    import bisect
    starts = [s for s, _ in ranges]
    for ip in ips:
        i = bisect.bisect_right(starts, ip) - 1
        if i >= 0 and ranges[i][1] != abi.FT_CATEGORY_NONE:
            return CATEGORY_NAMES[ranges[i][1]]
    return "other"


SIDES = {abi.FT_SIDE_KERNEL: "kernel", abi.FT_SIDE_KTHREAD: "kernel", abi.FT_SIDE_APP: "app"}


@dataclass
class Split:
    """Seconds and samples per category, of one side of a flow or CPU."""
    seconds: dict[str, float] = field(default_factory=dict)
    samples: int = 0

    def add(self, category: str, seconds: float, samples: int) -> None:
        self.seconds[category] = self.seconds.get(category, 0.0) + seconds
        self.samples += samples

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    def as_json(self) -> dict:
        return {c: round(self.seconds.get(c, 0.0), 9) for c in CATEGORIES}

    def shares(self) -> dict[str, float]:
        t = self.total
        return {c: (self.seconds.get(c, 0.0) / t if t else 0.0) for c in CATEGORIES}


@dataclass
class FlowProfile:
    flow: FlowId
    rx_bytes: int = 0
    kernel: Split = field(default_factory=Split)
    app: Split = field(default_factory=Split)

    @property
    def samples(self) -> int:
        return self.kernel.samples + self.app.samples

    def as_json(self) -> dict:
        return {**self.flow._asdict(), "rx_bytes": self.rx_bytes, "kernel": self.kernel.as_json(),
                "app": self.app.as_json(), "kernel_seconds": round(self.kernel.total, 9),
                "app_seconds": round(self.app.total, 9), "samples": self.samples}


@dataclass
class Profile:
    duration: float
    frequency: int
    flows: list[FlowProfile]
    cpus: dict[int, dict[str, Split]]     # cpu -> side -> split, every sample of receive work
    unattributed: Split                   # receive processing no flow could be charged for
    samples: int                          # every cpu-clock sample taken, on any work

    def as_json(self) -> dict:
        return {"duration": round(self.duration, 6), "frequency": self.frequency,
                "categories": list(CATEGORIES),
                "flows": [f.as_json() for f in self.flows],
                "unattributed": {"kernel": self.unattributed.as_json(),
                                 "samples": self.unattributed.samples},
                "cpus": [{"cpu": c, "kernel": sides["kernel"].as_json(),
                          "app": sides["app"].as_json(),
                          "samples": sides["kernel"].samples + sides["app"].samples}
                         for c, sides in sorted(self.cpus.items())],
                "samples": self.samples}


_KEY = struct.Struct(abi.struct_format(abi.ProfileKey))
_VALUE = struct.Struct(abi.struct_format(abi.ProfileValue))


def read_counts(profile_map) -> dict[bytes, tuple[int, int]]:
    """Raw key -> (samples, ns), as the kernel counts them since the tracer started."""
    out = {}
    for k, v in profile_map.items():
        out[k] = _VALUE.unpack(v[:_VALUE.size])
    return out


def build_profile(before: dict, after: dict, flow_bytes: dict[FlowId, int], duration: float,
                  frequency: int, samples: int, flow_id_of) -> Profile:
    """The profile of the window between two read_counts() results. FLOW_BYTES: each flow's
    received bytes in the window (from the tracer's own samples); FLOW_ID_OF turns an unpacked
    flow key into its FlowId."""
    flows: dict[FlowId, FlowProfile] = {}
    cpus: dict[int, dict[str, Split]] = {}
    unattributed = Split()
    for raw, (n, ns) in after.items():
        n0, ns0 = before.get(raw, (0, 0))
        n, ns = n - n0, ns - ns0
        if n <= 0:
            continue
        k = _KEY.unpack(raw)
        key, cpu, side, cid = k[:6], k[7], k[8], k[9]
        side_name = SIDES.get(side, "kernel")
        category = CATEGORY_NAMES.get(cid, "other")
        seconds = ns / 1e9
        per_cpu = cpus.setdefault(cpu, {"kernel": Split(), "app": Split()})
        per_cpu[side_name].add(category, seconds, n)
        if not any(key[0]) and not key[2] and not key[3]:   # no flow: saddr, sport, dport all 0
            unattributed.add(category, seconds, n)
            continue
        fid = flow_id_of(key)
        fp = flows.get(fid)
        if fp is None:
            fp = flows[fid] = FlowProfile(fid, flow_bytes.get(fid, 0))
        getattr(fp, side_name).add(category, seconds, n)
    ordered = sorted(flows.values(), key=lambda f: f.kernel.total + f.app.total, reverse=True)
    return Profile(duration, frequency, ordered, cpus, unattributed, samples)


def run_profile(tracer, window) -> Profile:
    """The profile of what happens while WINDOW() runs (a sleep, a lab run), from TRACER (started
    with profile=True): each flow's categories, and its bytes, between two reads."""
    before_counts, before = tracer.profile_counts(), tracer.sample()
    window()
    after_counts, after = tracer.profile_counts(), tracer.sample()
    flow_bytes: dict[FlowId, int] = {}
    for key, s in after.entries.items():
        old = before.entries.get(key)
        flow_bytes[key[0]] = flow_bytes.get(key[0], 0) + s.rx_bytes - (old.rx_bytes if old else 0)
    samples = (sum(c.samples for c in after.cpus) - sum(c.samples for c in before.cpus))
    seconds = (after.monotonic_ns - before.monotonic_ns) / 1e9
    return build_profile(before_counts, after_counts, flow_bytes, seconds, tracer.sample_hz,
                         samples, tracer.flow_id)
