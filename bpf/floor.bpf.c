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
