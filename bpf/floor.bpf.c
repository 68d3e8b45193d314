// SPDX-License-Identifier: GPL-2.0
/* The measuring floor of bench/event_cost.py: what a tracing program costs on this host before it
 * does anything (an empty program), and with one clock read, on the busiest tracepoint steer uses;
 * and an empty program on each tracepoint the default mode runs per packet or per poll, which
 * the per-packet budget (tests/live/test_budget_live.py) reads steer's own programs against;
 * and a reference of fixed work per NAPI poll, the budget's measure there. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "floor.h"

char LICENSE[] SEC("license") = "GPL";

SEC("tp_btf/softirq_entry")
int BPF_PROG(floor_empty, unsigned int vec_nr)
{
	return 0;
}

__u64 sink;

SEC("tp_btf/softirq_entry")
int BPF_PROG(floor_clock, unsigned int vec_nr)
{
	sink = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(floor_skb, struct sk_buff *skb)
{
	return 0;
}

SEC("tp_btf/napi_poll")
int BPF_PROG(floor_napi, struct napi_struct *napi, int work, int budget)
{
	return 0;
}

/* The reference per NAPI poll: what ft_napi_poll does on the polls the lab's flows make (the
 * backlog's, no device: a read of the configuration, one per-CPU counter record, three adds),
 * frozen here. Between two polls the stack streams the packets' data through the CPU's caches,
 * so each of those is a cache miss, and a miss costs what the host makes it cost: ft_napi_poll
 * read 35-55 ns beyond an empty program on one kind of VM and 14-24 on another, and a copy of its
 * counter update alone 20-30 ns on the first. Beyond this reference, which misses as it does,
 * is what ft_napi_poll adds: the figure its budget holds. */
const volatile __u32 floor_cfg_windows = 0;	/* .rodata, as flowtrace's cfg */

struct floor_totals {
	__u64 other[26];	/* flowtrace's ft_cpu_stats: its backlog counters at 208 */
	__u64 backlog_polls, backlog_packets, backlog_full_polls;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct floor_totals);
} floor_cpu_totals SEC(".maps");

SEC("tp_btf/napi_poll")
int BPF_PROG(floor_napi_count, struct napi_struct *napi, int work, int budget)
{
	__u32 zero = 0, scale = floor_cfg_windows ? 0 : 1;
	struct floor_totals *tot;

	if (napi->dev)
		return 0;
	tot = bpf_map_lookup_elem(&floor_cpu_totals, &zero);
	if (!tot)
		return 0;
	tot->backlog_polls += scale;
	tot->backlog_packets += (work > 0 ? work : 0) * scale;
	tot->backlog_full_polls += (budget > 0 && work >= budget) * scale;
	return 0;
}
