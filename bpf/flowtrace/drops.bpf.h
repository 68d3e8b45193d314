/* SPDX-License-Identifier: GPL-2.0 */
/* flowtrace, drops: Received skbs the kernel drops, per flow and CPU, with the latest reason (skb:kfree_skb,
 * 5.17+). One program per freed skb of any kind; it returns at once for the consumed ones and
 * for skbs that were never received (~0.8 us per counted drop here). */
#ifndef FT_DROPS_BPF_H
#define FT_DROPS_BPF_H

#include "common.bpf.h"
#include "account.bpf.h"
#include "skb.bpf.h"

/* Received skbs the kernel drops (a full socket buffer, a bad checksum, no socket, a netfilter
 * rule...), per flow and per CPU, with the reason of the latest: NDM'13 reads a starved same-core
 * reader's losses into its numbers. Only an skb that went through netif_receive_skb (skb_iif set)
 * is the receiver's: on a host that also sends, a dropped outgoing skb of a flow parses the same.
 * The headers are read from the network header, wherever the layer that dropped it left data. */
#define SKB_CONSUMED_REASON 1	/* enum skb_drop_reason: 0 not dropped yet, 1 consumed */

SEC("tp_btf/kfree_skb")
int BPF_PROG(ft_kfree_skb, struct sk_buff *skb, void *location, enum skb_drop_reason reason)
{
	struct ft_cpu_stats *tot;
	struct ft_flow_stats *st;
	struct ft_flow_key k = {};
	__u64 payload;

	if ((__u32)reason <= SKB_CONSUMED_REASON || !skb->skb_iif)
		return 0;
	if (pulled_skb_flow(skb, &k, &payload, 0))
		return 0;
	tot = totals();
	if (!tot)
		return 0;
	tot->rx_drops++;
	st = flow_entry(&k, bpf_get_smp_processor_id(), tot);
	if (!st)
		return 0;
	st->rx_drops++;
	st->last_drop_reason = reason;
	st->last_seen_ns = bpf_ktime_get_ns();
	return 0;
}

#endif /* FT_DROPS_BPF_H */
