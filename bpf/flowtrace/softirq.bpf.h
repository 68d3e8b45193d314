/* SPDX-License-Identifier: GPL-2.0 */
/* flowtrace, softirq: Exact timing: the NET_RX softirq's entry and exit bracket each run. Two programs per
 * softirq (of any kind: they return at once for the others); a clock read each. */
#ifndef FT_SOFTIRQ_BPF_H
#define FT_SOFTIRQ_BPF_H

#include "common.bpf.h"
#include "maps.bpf.h"
#include "account.bpf.h"
#include "kthread.bpf.h"

SEC("tp_btf/softirq_entry")
int BPF_PROG(ft_softirq_entry, unsigned int vec_nr)
{
	struct cpu_state *s = this_cpu_state();
	struct ft_cpu_stats *tot = totals();
	__u64 now = run_clock_ns(cfg.steal_off);

	if (!s || !tot)
		return 0;
	/* a softirq run by a receive kthread (at its local_bh_enable, or at an interrupt's exit):
	 * the kthread goes on after it, the NAPI poller polling and the cpumap kthread taking its
	 * next batch off the ring; it sleeps at a sched_switch, which closes its interval */
	s->resume_ctx = s->ctx == CTX_NAPI_THREAD || s->ctx == CTX_KTHREAD ? s->ctx : CTX_NONE;
	close_kthread(s, tot, now);
	/* softirqs do not nest on a CPU, so one start time serves every vector */
	s->softirq_start = now;
	s->softirq_llc_start = llc_now();
	if (vec_nr != NET_RX_SOFTIRQ)
		return 0;
	tot->net_rx_events++;
	s->ctx = CTX_NET_RX;
	s->cur_valid = 0;
	s->mark = now;
	s->llc_mark = s->softirq_llc_start;
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(ft_softirq_exit, unsigned int vec_nr)
{
	struct cpu_state *s = this_cpu_state();
	struct ft_cpu_stats *tot = totals();
	__u64 now = run_clock_ns(cfg.steal_off);
	__u64 llc = llc_now();

	if (!s || !tot || !s->softirq_start)
		return 0;	/* attached while this softirq was already running */
	tot->softirq_ns += now - s->softirq_start;
	tot->softirq_llc += llc - s->softirq_llc_start;
	if (vec_nr == NET_RX_SOFTIRQ && s->ctx == CTX_NET_RX) {
		tot->net_rx_ns += now - s->softirq_start;
		/* the tail goes to the last skb's flow */
		charge_interval(s, tot, bpf_get_smp_processor_id(), now, llc, 0);
		s->ctx = CTX_NONE;
	}
	if (s->resume_ctx != CTX_NONE) {
		if (vec_nr != NET_RX_SOFTIRQ)
			tot->kthread_softirq_ns += now - s->softirq_start;
		else
			tot->kthread_net_rx_ns += now - s->softirq_start;
		open_kthread(s, s->resume_ctx, now, llc);
		s->resume_ctx = CTX_NONE;
	}
	s->softirq_start = 0;
	return 0;
}

#endif /* FT_SOFTIRQ_BPF_H */
