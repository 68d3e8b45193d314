// SPDX-License-Identifier: GPL-2.0
/* steer: redirect chosen flows to chosen CPUs through a cpumap.
 *
 * Rules match the receive-direction 5-tuple, exactly or on any subset of its fields; the first
 * match in mask order (most specific first) redirects the packet to its rule's CPU, where the
 * cpumap kthread builds the skb and runs the stack. Everything else, and every packet this parser
 * does not understand, passes untouched.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "parsing.bpf.h"
#include "steer.h"

char LICENSE[] SEC("license") = "GPL";

/* pinned by name under the device's directory, so `steer pin` calls share them */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, STEER_MAX_RULES);
	__type(key, struct steer_rule_key);
	__type(value, struct steer_rule);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct steer_masks);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} masks SEC(".maps");

/* shared, not per-CPU: STEER_MAX_RULES per-CPU copies would cost megabytes on big hosts, and one
 * rule's packets mostly arrive on one RX queue, so the atomic adds rarely contend */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STEER_MAX_RULES);
	__type(key, __u32);
	__type(value, struct steer_rule_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rule_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct steer_counters);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} counters SEC(".maps");

/* sized to the possible CPUs at load */
struct {
	__uint(type, BPF_MAP_TYPE_CPUMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bpf_cpumap_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cpu_map SEC(".maps");

static __always_inline void masked(struct steer_rule_key *out, const struct steer_rule_key *pkt,
				   __u8 m)
{
	__builtin_memset(out, 0, sizeof(*out));
	out->mask = m;
	if (m & STEER_F_PROTO)
		out->proto = pkt->proto;
	if (m & STEER_F_SPORT)
		out->sport = pkt->sport;
	if (m & STEER_F_DPORT)
		out->dport = pkt->dport;
	if (m & STEER_F_SRC)
		__builtin_memcpy(out->saddr, pkt->saddr, 16);
	if (m & STEER_F_DST)
		__builtin_memcpy(out->daddr, pkt->daddr, 16);
	if (m & (STEER_F_SRC | STEER_F_DST))
		out->family = pkt->family;
}

/* fill the tuple of a TCP/UDP packet; -1 for anything else */
static __always_inline int packet_tuple(struct xdp_md *ctx, struct steer_rule_key *k)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct cursor c = { .pos = data };
	struct iphdr *ip;
	struct ipv6hdr *ip6;
	struct tcphdr *th;
	struct udphdr *uh;
	int proto;

	proto = parse_ethhdr(&c, end);
	if (proto == ETH_P_IP) {
		proto = parse_iphdr(&c, end, &ip);
		if (proto < 0)
			return -1;
		__builtin_memcpy(k->saddr, &ip->saddr, 4);
		__builtin_memcpy(k->daddr, &ip->daddr, 4);
		k->family = 4;
	} else if (proto == ETH_P_IPV6) {
		proto = parse_ip6hdr(&c, end, &ip6);
		if (proto < 0)
			return -1;
		__builtin_memcpy(k->saddr, &ip6->saddr, 16);
		__builtin_memcpy(k->daddr, &ip6->daddr, 16);
		k->family = 6;
	} else {
		return -1;
	}
	if (proto == IPPROTO_TCP) {
		if (parse_tcphdr(&c, end, &th) < 0)
			return -1;
		k->sport = bpf_ntohs(th->source);
		k->dport = bpf_ntohs(th->dest);
	} else if (proto == IPPROTO_UDP) {
		if (parse_udphdr(&c, end, &uh) < 0)
			return -1;
		k->sport = bpf_ntohs(uh->source);
		k->dport = bpf_ntohs(uh->dest);
	} else {
		return -1;
	}
	k->proto = proto;
	return 0;
}

SEC("xdp")
int steer_xdp(struct xdp_md *ctx)
{
	struct steer_rule_key pkt = {}, k;
	struct steer_counters *cnt;
	struct steer_masks *ms;
	struct steer_rule *r = 0;
	__u32 zero = 0, i;
	long ret;

	cnt = bpf_map_lookup_elem(&counters, &zero);
	ms = bpf_map_lookup_elem(&masks, &zero);
	if (!cnt || !ms)
		return XDP_PASS;
	if (packet_tuple(ctx, &pkt) < 0) {
		cnt->unparsed++;
		return XDP_PASS;
	}
	for (i = 0; i < STEER_MAX_MASKS; i++) {
		if (i >= ms->count)
			break;
		masked(&k, &pkt, ms->mask[i]);
		r = bpf_map_lookup_elem(&rules, &k);
		if (r)
			break;
	}
	if (!r) {
		cnt->passed++;
		return XDP_PASS;
	}
	{
		struct steer_rule_stats *st = bpf_map_lookup_elem(&rule_stats, &r->id);

		if (st) {
			__sync_fetch_and_add(&st->packets, 1);
			__sync_fetch_and_add(&st->bytes, ctx->data_end - ctx->data);
		}
	}
	/* the low bits of flags are the action when the CPU has no cpumap entry: pass */
	ret = bpf_redirect_map(&cpu_map, r->cpu, XDP_PASS);
	if (ret == XDP_REDIRECT)
		cnt->redirected++;
	else
		cnt->redirect_failed++;
	return ret;
}
