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
#include <bpf/bpf_endian.h>
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

/* The reference per skb in the default's windows: what ft_skb_hint does for a TCP skb there
 * (flowtrace's sampling.bpf.h), frozen here: the CPU's state and the window looked up, the
 * sampler's hint stored, the skb's IPv4 or IPv6 and TCP headers read by probe reads, and its
 * flow's entry looked up in an LRU hash of the same key and value sizes and counted. Its costs
 * are those the host sets: the misses on the packet's headers (this program runs first and
 * pays them, as floor_napi_count does the napi struct's) and on the flow map, the key's hash.
 * ft_skb_hint read +188..+253 ns beyond an empty program in the calm windows of six clean
 * clones, on two kinds of VM; beyond this reference is what it adds of its own, the figure its
 * windowed budget holds. */
struct floor_state {
	__u64 data, len, proto, window, clock_ns;
	__u64 rest[60];		/* flowtrace's cpu_state is ~560 bytes */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct floor_state);
} floor_states SEC(".maps");

struct floor_window {
	__u64 opened;
	__u32 seq, scale;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct floor_window);
} floor_windows SEC(".maps");

struct floor_flow_key {
	__u8 saddr[16], daddr[16];
	__u16 sport, dport;
	__u8 proto, family;
	__u16 pad;
	__u32 cpu;
};

struct floor_flow {
	__u64 counts[40];	/* flowtrace's ft_flow_stats: ~320 bytes */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct floor_flow_key);
	__type(value, struct floor_flow);
} floor_flows SEC(".maps");

#define FLOOR_ETH_P_IP		0x0800
#define FLOOR_ETH_P_IPV6	0x86DD

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(floor_skb_flow, struct sk_buff *skb)
{
	struct floor_flow_key k = {};
	struct floor_flow *f, empty = {};
	struct floor_window *w;
	struct floor_state *s;
	unsigned char *data = skb->data;
	__u32 zero = 0, l4off, scale = 1;
	__u16 proto = bpf_ntohs(skb->protocol);
	__u8 th[13];

	s = bpf_map_lookup_elem(&floor_states, &zero);
	w = bpf_map_lookup_elem(&floor_windows, &zero);
	if (!s)
		return 0;
	if (w && w->scale)
		scale = w->scale;
	s->data = (__u64)data;
	s->len = skb->len;
	s->proto = skb->protocol;
	s->window = w ? w->seq : 0;
	if (proto == FLOOR_ETH_P_IP) {
		__u8 ip[20];

		if (bpf_probe_read_kernel(ip, sizeof(ip), data))
			return 0;
		if (ip[9] != 6)		/* IPPROTO_TCP */
			return 0;
		__builtin_memcpy(k.saddr, ip + 12, 4);
		__builtin_memcpy(k.daddr, ip + 16, 4);
		l4off = (ip[0] & 0xf) * 4;
		k.family = 4;
	} else if (proto == FLOOR_ETH_P_IPV6) {
		__u8 ip6[40];

		if (bpf_probe_read_kernel(ip6, sizeof(ip6), data))
			return 0;
		if (ip6[6] != 6)
			return 0;
		__builtin_memcpy(k.saddr, ip6 + 8, 16);
		__builtin_memcpy(k.daddr, ip6 + 24, 16);
		l4off = 40;
		k.family = 6;
	} else {
		return 0;
	}
	if (l4off > 60 || bpf_probe_read_kernel(th, sizeof(th), data + l4off))
		return 0;
	k.sport = th[0] << 8 | th[1];
	k.dport = th[2] << 8 | th[3];
	k.proto = 6;
	k.cpu = bpf_get_smp_processor_id();
	f = bpf_map_lookup_elem(&floor_flows, &k);
	if (!f) {
		bpf_map_update_elem(&floor_flows, &k, &empty, BPF_NOEXIST);
		f = bpf_map_lookup_elem(&floor_flows, &k);
		if (!f)
			return 0;
	}
	f->counts[2] += scale;
	f->counts[20] = s->clock_ns;
	return 0;
}

/* ft_skb_hint's work with --windows off on an skb of a TCP flow its socket counts: the CPU's
 * state looked up, the skb's fields stored in it as the hint, the current task's net context
 * read, the skb's hash compared with the two it skips; frozen, and attached ahead of it in the
 * bench mode "sampled" alone, so that it pays the misses on the skb and the per-CPU state that
 * the host's other work leaves cold, as floor_skb_flow does in windows. ft_skb_hint read +32..+49
 * ns beyond an empty program on one kind of VM and +66..+124 on another (kernel 6.18.44-fc-v657,
 * 2026-12-01, where the program of an earlier commit read the same); beyond this reference is
 * what it adds of its own, the figure the windows-off budget holds. */
SEC("tp_btf/netif_receive_skb")
int BPF_PROG(floor_skb_hint, struct sk_buff *skb)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct floor_state *s;
	__u32 zero = 0, hash;

	s = bpf_map_lookup_elem(&floor_states, &zero);
	if (!s)
		return 0;
	s->rest[4] = (__u64)task->bpf_net_context;
	s->data = (__u64)skb->data;
	s->len = skb->len;
	s->rest[0] = skb->len - skb->data_len;
	s->proto = skb->protocol;
	hash = skb->hash;
	if (hash && (hash == s->rest[1] || hash == s->rest[2]))
		return 0;
	s->rest[1 + (s->rest[3] & 1)] = hash;
	s->rest[3] ^= 1;
	return 0;
}
