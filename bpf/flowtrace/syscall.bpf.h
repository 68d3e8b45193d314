/* SPDX-License-Identifier: GPL-2.0 */
/* flowtrace, syscall: Exact timing's application side: a known reader's receive syscalls are timed on-CPU
 * (raw sys_enter/sys_exit on every syscall of the host, and sched_switch to split the segments),
 * less the softirq time nested in them. This is what makes exact timing cost 1.6x on a trivial
 * syscall (bench.syscall_tax). */
#ifndef FT_SYSCALL_BPF_H
#define FT_SYSCALL_BPF_H

#include "common.bpf.h"
#include "maps.bpf.h"
#include "account.bpf.h"
#include "kthread.bpf.h"

static __always_inline void segment_start(struct recv_state *r, struct ft_cpu_stats *tot, __u64 now)
{
	r->seg_start = now;
	r->softirq_snap = tot->softirq_ns;
	r->softirq_llc_snap = tot->softirq_llc;
	r->llc_snap = llc_now();
}

static __always_inline void segment_end(struct recv_state *r, struct ft_cpu_stats *tot, __u64 now)
{
	__u64 nested = tot->softirq_ns - r->softirq_snap;
	__u64 nested_llc = tot->softirq_llc - r->softirq_llc_snap;
	__u64 dt = now - r->seg_start, dllc = llc_now() - r->llc_snap;

	if (!r->seg_start)
		return;
	r->acc_ns += dt > nested ? dt - nested : 0;
	r->acc_nested_ns += nested;
	r->acc_llc += dllc > nested_llc ? dllc - nested_llc : 0;
	r->seg_start = 0;
}

static __always_inline int is_recv_syscall(long id)
{
	return id == NR_read || id == NR_readv || id == NR_recvfrom || id == NR_recvmsg ||
	       id == NR_recvmmsg;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(ft_sys_enter, struct pt_regs *regs, long id)
{
	struct ft_cpu_stats *tot;
	struct recv_state *r;

	if (!is_recv_syscall(id))
		return 0;
	r = bpf_task_storage_get(&readers, bpf_get_current_task_btf(), 0, 0);
	if (!r)
		return 0;	/* not a socket reader (yet) */
	tot = totals();
	if (!tot)
		return 0;
	r->in_recv = 1;
	r->have_flow = 0;
	r->acc_ns = r->acc_nested_ns = r->acc_llc = 0;
	segment_start(r, tot, bpf_ktime_get_ns());
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(ft_sys_exit, struct pt_regs *regs, long ret)
{
	struct ft_cpu_stats *tot;
	struct ft_flow_stats *st;
	struct recv_state *r;
	__u64 now;

	r = bpf_task_storage_get(&readers, bpf_get_current_task_btf(), 0, 0);
	if (!r || !r->in_recv)
		return 0;
	tot = totals();
	if (!tot)
		return 0;
	now = bpf_ktime_get_ns();
	segment_end(r, tot, now);
	r->in_recv = 0;
	if (!r->have_flow)
		return 0;	/* read() of a pipe or file by a socket reader */
	/* charged to the CPU the syscall returns on: where the data was copied */
	st = flow_entry(&r->flow, bpf_get_smp_processor_id(), tot);
	if (!st)
		return 0;
	st->app_ns += r->acc_ns;
	st->app_nested_ns += r->acc_nested_ns;
	st->llc_app += r->acc_llc;
	st->last_seen_ns = now;
	tot->app_ns += r->acc_ns;
	tot->app_nested_ns += r->acc_nested_ns;
	tot->llc_app += r->acc_llc;
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(ft_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct ft_cpu_stats *tot = totals();
	struct cpu_state *s;
	struct recv_state *r;
	__u64 now;
	__u8 kctx;

	if (!tot)
		return 0;
	now = bpf_ktime_get_ns();
	s = this_cpu_state();
	if (s) {
		close_kthread(s, tot, now);	/* the receive kthread sleeps or is preempted */
		kctx = kthread_ctx(next->comm);
		if (kctx != CTX_NONE)
			open_kthread(s, kctx, now, llc_now());
	}
	/* a reader that blocks or is preempted inside its receive syscall is off-CPU until it
	 * comes back: only its on-CPU segments count */
	r = bpf_task_storage_get(&readers, prev, 0, 0);
	if (r && r->in_recv)
		segment_end(r, tot, now);
	r = bpf_task_storage_get(&readers, next, 0, 0);
	if (r && r->in_recv)
		segment_start(r, tot, now);
	return 0;
}

#endif /* FT_SYSCALL_BPF_H */
