// SPDX-License-Identifier: GPL-2.0
/* The measuring floor of bench/event_cost.py: what a tracing program costs on this host before it
 * does anything (an empty program), and with one clock read, on the busiest tracepoint steer uses;
 * and an empty program on each tracepoint the default mode runs per packet or per poll, which
 * the per-packet budget (tests/live/test_budget_live.py) reads steer's own programs against. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
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

/* the least a per-skb program of steer's does, fixed here: a per-CPU slot looked up, the current
 * task read, and a few of the skb's fields stored. A VM's slow spells (a neighbour in the host's
 * caches) slow a program that touches memory more than an empty one: against this, steer's
 * per-skb program's own work keeps its size through them */
struct floor_slot {
	__u64 data, len, task;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct floor_slot);
} floor_slots SEC(".maps");

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(floor_skb_work, struct sk_buff *skb)
{
	__u32 zero = 0;
	struct floor_slot *v = bpf_map_lookup_elem(&floor_slots, &zero);

	if (v) {
		v->data = (__u64)skb->data;
		v->len = skb->len;
		v->task = (__u64)bpf_get_current_task_btf();
	}
	return 0;
}

SEC("tp_btf/napi_poll")
int BPF_PROG(floor_napi_work, struct napi_struct *napi, int work, int budget)
{
	__u32 zero = 0;
	struct floor_slot *v = bpf_map_lookup_elem(&floor_slots, &zero);

	if (v)
		v->len += work;
	return 0;
}
