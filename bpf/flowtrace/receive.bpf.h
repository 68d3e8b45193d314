/* SPDX-License-Identifier: GPL-2.0 */
/* flowtrace, receive: Exact timing's per-skb program on net:netif_receive_skb: the skb's flow, bytes and
 * packets, and the interval since the previous skb charged to the previous flow. A header parse,
 * a map lookup and a clock read per skb: the largest per-packet cost steer has (bench.event_cost,
 * exact). */
#ifndef FT_RECEIVE_BPF_H
#define FT_RECEIVE_BPF_H

#include "common.bpf.h"
#include "maps.bpf.h"
#include "account.bpf.h"
#include "skb.bpf.h"
#include "kthread.bpf.h"

/* the bytes and wire packets of SKB, whose transport payload is PAYLOAD bytes, into its entry */
static __always_inline void count_payload(struct ft_flow_stats *st, struct sk_buff *skb,
					  __u64 payload, __u32 scale)
{
	__u16 segs;

	note_rx_path_skb(st, skb);
	st->rx_bytes += payload * scale;
	/* a GRO aggregate stands for gso_segs wire packets (skb_shinfo: head + end offset) */
	segs = BPF_CORE_READ((struct skb_shared_info *)(skb->head + skb->end), gso_segs);
	st->rx_packets += (segs ? segs : 1) * scale;
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(ft_netif_receive_skb, struct sk_buff *skb)
{
	struct cpu_state *s = this_cpu_state();
	struct ft_cpu_stats *tot = totals();
	struct ft_flow_key k = {};
	struct ft_flow_stats *st;
	__u32 cpu = bpf_get_smp_processor_id();
	__u64 stamp = bpf_ktime_get_ns(), now = stamp - cpu_steal_ns(cfg.steal_off);
	__u64 payload = 0, llc;
	int parsed, second_pass = 0;
	__u8 kctx;

	if (!s || !tot)
		return 0;
	s->skb_counted = 0;
	parsed = skb_flow(skb, &k, &payload) == 0;

	if (s->ctx == CTX_NONE && s->softirq_start == 0) {
		kctx = current_kthread_ctx();
		if (kctx != CTX_NONE)
			open_kthread(s, kctx, now, llc_now());	/* first skb of a batch */
	}
	if (s->ctx == CTX_KTHREAD) {
		/* generic XDP already passed this skb through netif_receive_skb on the arrival CPU,
		 * which set skb_iif; an skb built from an xdp_frame (native XDP) arrives here fresh */
		second_pass = skb->skb_iif != 0;
	}

	/* this skb's entry: counted below, and charged with the interval when the previous skb was
	 * of the same flow (a GRO batch), which saves the second hash lookup */
	st = parsed ? flow_entry(&k, cpu, tot) : 0;
	if (s->ctx != CTX_NONE) {
		llc = llc_now();
		if (!s->cur_valid && parsed) {
			/* the head of the interval (driver, GRO) is work for this first skb */
			s->cur = k;
			s->cur_valid = 1;
		}
		charge_interval(s, tot, cpu, now, llc,
				s->cur_valid && parsed && same_flow(&s->cur, &k) ? st : 0);
		if (s->run_pid && !s->run_flow_valid && parsed) {
			s->run_flow = k;	/* the kthread run's first flow: its wake-up's */
			s->run_flow_valid = 1;
		}
		s->cur = k;
		s->cur_valid = parsed;
	} else {
		tot->untimed_skbs++;
	}

	if (!st)
		return 0;
	st->rx_skbs++;
	s->skb_counted = 1;
	st->last_seen_ns = stamp;
	if (second_pass)
		return 0;	/* bytes and packets were counted on the arrival CPU */
	count_payload(st, skb, payload, 1);
	return 0;
}

#endif /* FT_RECEIVE_BPF_H */
