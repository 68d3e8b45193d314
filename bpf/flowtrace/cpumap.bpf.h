/* SPDX-License-Identifier: GPL-2.0 */
/* flowtrace, cpumap: Steered flows: generic XDP's redirect (so that a redirected skb is not counted twice)
 * and the cpumap kthread's batches, bracketed as a softirq is. A program per redirect and one
 * per batch. */
#ifndef FT_CPUMAP_BPF_H
#define FT_CPUMAP_BPF_H

#include "common.bpf.h"
#include "maps.bpf.h"
#include "account.bpf.h"
#include "kthread.bpf.h"

/* generic XDP runs inside netif_receive_skb, after the event above: when it redirects that skb to
 * a cpumap, the stack work happens on the target CPU, which counts the skb in its own pass */
SEC("tp_btf/xdp_redirect")
int BPF_PROG(ft_xdp_redirect, const struct net_device *dev, const struct bpf_prog *xdp,
	     const void *tgt, int err, enum bpf_map_type map_type)
{
	struct cpu_state *s = this_cpu_state();
	struct ft_cpu_stats *tot = totals();
	struct ft_flow_stats *st;

	if (!s || !tot || err || map_type != BPF_MAP_TYPE_CPUMAP || !s->skb_counted || !s->cur_valid)
		return 0;
	if (!BPF_CORE_READ(dev, xdp_prog))
		return 0;	/* native XDP: no skb existed yet, nothing was counted */
	st = flow_entry(&s->cur, bpf_get_smp_processor_id(), tot);
	if (st) {
		st->rx_skbs--;
		st->redirected_skbs++;
	}
	s->skb_counted = 0;
	return 0;
}

SEC("tp_btf/xdp_cpumap_kthread")
int BPF_PROG(ft_xdp_cpumap_kthread, int map_id, unsigned int processed, unsigned int drops, int sched)
{
	struct cpu_state *s = this_cpu_state();
	struct ft_cpu_stats *tot = totals();
	__u64 now = run_clock_ns(cfg.steal_off);
	__u8 valid;

	if (tot)
		tot->cpumap_kthread_drops += drops;
	if (!s || !tot || s->softirq_start)
		return 0;
	if (s->ctx == CTX_KTHREAD && !s->cur_valid)
		return 0;	/* no skb yet since the wake-up: the head goes on to the first one */
	valid = s->cur_valid;
	close_kthread(s, tot, now);
	/* what follows is this kthread's work: the rest of the loop before 6.14 (its tail goes to the
	 * last skb's flow, as a softirq's does), the batch's way up the stack since */
	open_kthread(s, CTX_KTHREAD, now, llc_now());
	s->cur_valid = valid;
	return 0;
}

/* the frames a cpumap could not queue to its target CPU (the queue full: the target's kthread
 * falls behind), per flush of a batch of up to 8 frames on the redirecting CPU */
SEC("tp_btf/xdp_cpumap_enqueue")
int BPF_PROG(ft_xdp_cpumap_enqueue, int map_id, unsigned int processed, unsigned int drops,
	     int to_cpu)
{
	struct ft_cpu_stats *tot = totals();

	if (tot)
		tot->cpumap_enqueue_drops += drops;
	return 0;
}

#endif /* FT_CPUMAP_BPF_H */
