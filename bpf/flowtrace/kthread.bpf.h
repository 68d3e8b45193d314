/* SPDX-License-Identifier: GPL-2.0 */
/* flowtrace, kthread: Charging a CPU's receive context: an interval [mark, now] to the current flow or to the
 * unattributed rest, and the receive kthreads (cpumap, threaded NAPI) told apart by name.
 * Exact timing's core; no program of its own. */
#ifndef FT_KTHREAD_BPF_H
#define FT_KTHREAD_BPF_H

#include "common.bpf.h"
#include "maps.bpf.h"
#include "account.bpf.h"

/* add DT of receive kthread context CTX to this CPU's totals (a threaded NAPI poller's is NET_RX
 * work outside a softirq); 0 where CTX is no receive kthread's */
static __always_inline int kthread_total_add(struct ft_cpu_stats *tot, __u8 ctx, __u64 dt)
{
	if (ctx == CTX_KTHREAD) {
		tot->kthread_ns += dt;
	} else if (ctx == CTX_NAPI_THREAD) {
		tot->net_rx_ns += dt;
		tot->napi_thread_ns += dt;
	} else {
		return 0;
	}
	return 1;
}

/* DT of context CTX to flow ST, or with no flow to the context's unattributed time */
static __always_inline void charge_flow_time(struct ft_flow_stats *st, struct ft_cpu_stats *tot,
					     __u8 ctx, __u64 dt)
{
	if (st) {
		if (ctx == CTX_KTHREAD)
			st->kthread_ns += dt;
		else
			st->kernel_ns += dt;
	} else if (ctx == CTX_KTHREAD) {
		tot->kthread_unattributed_ns += dt;
	} else {
		tot->net_rx_unattributed_ns += dt;
	}
}

/* close the interval [mark, now] of this CPU's receive context: charge it to the current flow,
 * whose entry the caller may have looked up already (KNOWN) */
static __always_inline void charge_interval(struct cpu_state *s, struct ft_cpu_stats *tot,
					    __u32 cpu, __u64 now, __u64 llc,
					    struct ft_flow_stats *known)
{
	__u64 dllc = llc - s->llc_mark;
	struct ft_flow_stats *st = known;

	if (!st && s->cur_valid)
		st = flow_entry(&s->cur, cpu, tot);
	charge_flow_time(st, tot, s->ctx, now - s->mark);
	if (st)
		st->llc_kernel += dllc;	/* last seen: at its skb (ft_netif_receive_skb) */
	tot->llc_kernel += dllc;
	s->mark = now;
	s->llc_mark = llc;
}

static __always_inline int same_flow(const struct ft_flow_key *a, const struct ft_flow_key *b)
{
	__u64 x[5], y[5];	/* sizeof(struct ft_flow_key) == 40 */
	int i;

	__builtin_memcpy(x, a, sizeof(x));
	__builtin_memcpy(y, b, sizeof(y));
	for (i = 0; i < 5; i++)
		if (x[i] != y[i])
			return 0;
	return 1;
}

/* cpumap kthreads are named "cpumap/<cpu>/map:<id>" (kernel/bpf/cpumap.c) */
static __always_inline int comm_is_cpumap(const char *comm)
{
	return comm[0] == 'c' && comm[1] == 'p' && comm[2] == 'u' && comm[3] == 'm' &&
	       comm[4] == 'a' && comm[5] == 'p' && comm[6] == '/';
}

/* threaded NAPI kthreads are named "napi/<dev>-<napi id>" (net/core/dev.c) */
static __always_inline int comm_is_napi(const char *comm)
{
	return comm[0] == 'n' && comm[1] == 'a' && comm[2] == 'p' && comm[3] == 'i' && comm[4] == '/';
}

/* the receive kthread the current task is: CTX_KTHREAD (cpumap), CTX_NAPI_THREAD or CTX_NONE */
static __always_inline __u8 kthread_ctx(const char *comm)
{
	if (comm_is_cpumap(comm))
		return CTX_KTHREAD;
	return comm_is_napi(comm) ? CTX_NAPI_THREAD : CTX_NONE;
}

static __always_inline __u8 current_kthread_ctx(void)
{
	char comm[8];

	bpf_get_current_comm(comm, sizeof(comm));
	return kthread_ctx(comm);
}

/* A receive kthread's context on this CPU: the cpumap kthread's or a threaded NAPI poller's (CTX),
 * open from its first skb or when it comes on the CPU (and for cpumap at its xdp_cpumap_kthread
 * event), closed when it leaves the CPU or runs a softirq (at local_bh_enable), and for cpumap
 * when it next reaches that event: since 6.14 the event comes before its batch goes up the stack
 * (through GRO), so an interval that only the next event closed would span the kthread's sleep. */
static __always_inline void open_kthread(struct cpu_state *s, __u8 ctx, __u64 now, __u64 llc)
{
	s->ctx = ctx;
	s->cur_valid = 0;	/* the head of the interval goes to its first skb */
	s->kthread_start = now;
	s->mark = now;
	s->llc_mark = llc;
}

/* An interval that closes with no skb since it opened (the kthread came back from a softirq it
 * ran, or was switched back in, and went to sleep before its next skb) is its loop's end: the
 * tail of the work it did for its last skb's flow, as a softirq's tail is. Without this, a
 * steered flow's cpumap kthread lost 1-2% of its time to unattributed on a quiet 2-vCPU VM, 7%
 * where the host stole (more switches in the middle of a batch). */
static __always_inline void close_kthread(struct cpu_state *s, struct ft_cpu_stats *tot, __u64 now)
{
	__u32 pid;

	if (!kthread_total_add(tot, s->ctx, now - s->kthread_start))
		return;
	pid = (__u32)bpf_get_current_pid_tgid();	/* sched_switch's prev: still current */
	if (s->cur_valid) {
		s->tail_flow = s->cur;
		s->tail_pid = pid;
	} else if (s->tail_pid == pid && pid) {
		s->cur = s->tail_flow;
		s->cur_valid = 1;
	}
	charge_interval(s, tot, bpf_get_smp_processor_id(), now, llc_now(), 0);
	s->ctx = CTX_NONE;
}

#endif /* FT_KTHREAD_BPF_H */
