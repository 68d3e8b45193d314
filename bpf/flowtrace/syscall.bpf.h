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
	segment_start(r, tot, run_clock_ns(cfg.steal_off));
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(ft_sys_exit, struct pt_regs *regs, long ret)
{
	struct ft_cpu_stats *tot;
	struct ft_flow_stats *st;
	struct recv_state *r;
	__u64 now, stamp;

	r = bpf_task_storage_get(&readers, bpf_get_current_task_btf(), 0, 0);
	if (!r || !r->in_recv)
		return 0;
	tot = totals();
	if (!tot)
		return 0;
	stamp = bpf_ktime_get_ns();
	now = stamp - cpu_steal_ns(cfg.steal_off);
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
	st->last_seen_ns = stamp;
	tot->app_ns += r->acc_ns;
	tot->app_nested_ns += r->acc_nested_ns;
	tot->llc_app += r->acc_llc;
	return 0;
}

/* The scheduler charges a task it wakes to run at once (the idle task or the running one
 * preempted) from the wake-up: its clock is not read again at the switch that follows, so the
 * time from the wake-up to the switch (the wake-up's interrupt, leaving the idle loop, the
 * switch) is the woken task's. A cpumap kthread woken 20,000 times a second spent ~6 us a
 * wake-up there on a 2-vCPU VM, two fifths of its scheduler time. At the switch out, what the
 * scheduler charged this run (its sum_exec_runtime then and at the switch in) beyond the run's
 * own time between the switches is that head. A kernel that keeps irq time out of tasks'
 * runtime (IRQ_TIME_ACCOUNTING) charges less than the run's time where interrupts came in:
 * then there is no head. */
#define MAX_WAKEUP_NS	1000000ULL	/* beyond a millisecond it is not a wake-up's head */

/* what the scheduler charged PREV's run (its sum_exec_runtime now and RUN_RUNTIME at the switch
 * in) beyond the run's own time between the switches (RUN_START to NOW): a head where it is
 * more, a tail where it is less (below) */
static __always_inline __s64 charged_beyond_run(struct task_struct *prev, __u64 run_runtime,
						__u64 run_start, __u64 now)
{
	return (__s64)(prev->se.sum_exec_runtime - run_runtime) - (__s64)(now - run_start);
}

static __always_inline __u64 wakeup_head(__s64 beyond)
{
	return beyond <= 0 || beyond > (__s64)MAX_WAKEUP_NS ? 0 : beyond;
}

/* a receive kthread's head: the kthread's, and the flow's of the run's first skb (as an
 * interval's head goes to its first skb), else of the kthread's last flow (close_kthread) */
static __always_inline void charge_wakeup(struct cpu_state *s, struct ft_cpu_stats *tot,
					  __u64 head)
{
	struct ft_flow_stats *st = 0;

	/* a run that ended in a softirq's interval (no kthread context): not the kthread's to say */
	if (!head || !kthread_total_add(tot, s->ctx, head))
		return;
	if (s->run_flow_valid)
		st = flow_entry(&s->run_flow, bpf_get_smp_processor_id(), tot);
	else if (s->tail_pid == s->run_pid)	/* a run with no skb: the tail of its last flow's */
		st = flow_entry(&s->tail_flow, bpf_get_smp_processor_id(), tot);
	charge_flow_time(st, tot, s->ctx, head);
}

/* The other way round: a run the scheduler charged less than its time between the switches. A
 * wake-up that preempts the running task skips the clock's update at the switch that follows
 * (above), so the time from that wake-up to the switch is the woken task's head, not the time of
 * the task that ran it: a cpumap kthread that hands its reader data on the reader's CPU wakes the
 * reader, runs on to its next preemption point, and the scheduler charges that tail to the
 * reader. steer ends the kthread's run where the scheduler did: where the reader is a traced
 * receiver its head holds the tail (charge_reader_wakeup), and the CPU's time counts once.
 * Without this the kthread read +0.4% to +0.9% against its schedstat on a 2-vCPU VM (7,000 tails
 * of 0.5-4 us in 5 s, bpftrace). Only where tasks' runtime holds interrupts' time: with
 * IRQ_TIME_ACCOUNTING (cfg.irq_time_apart) the scheduler charges less wherever one came in, and
 * the difference is no tail. The cut stays inside the run's last interval (after its last
 * softirq). Userspace tells the option, not a CO-RE test of struct irqtime: where a type is not
 * in vmlinux, libbpf before 1.3 looks for it in the modules' BTF, and without CAP_SYS_ADMIN (the
 * systemd unit, the DaemonSet) that search fails the whole object. */
static __always_inline __u64 run_end(struct cpu_state *s, __u64 now, __s64 beyond)
{
	if (cfg.irq_time_apart || beyond >= 0)
		return now;
	return now + beyond > s->mark ? now + beyond : s->mark;	/* BEYOND < 0: the tail */
}

/* A reader's run that began inside a receive call (it was woken there): its head is that
 * call's receive time, given to the flow it read (the call may have returned since: the run's
 * head is known only at its switch out) */
static __always_inline void charge_reader_wakeup(struct recv_state *r, struct ft_cpu_stats *tot,
						 struct task_struct *prev, __u64 now)
{
	__u64 head = wakeup_head(charged_beyond_run(prev, r->run_runtime, r->run_start, now));
	struct ft_flow_stats *st;

	r->run_start = 0;
	if (!head)
		return;
	if (r->in_recv) {
		/* blocked again, or preempted, in a call: given with its time when it returns to a
		 * flow (the head of the run goes with the reads that follow it) */
		r->acc_ns += head;
		return;
	}
	if (!r->have_flow)
		return;
	st = flow_entry(&r->flow, bpf_get_smp_processor_id(), tot);
	if (!st)
		return;
	st->app_ns += head;
	tot->app_ns += head;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(ft_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct ft_cpu_stats *tot = totals();
	struct cpu_state *s;
	struct recv_state *r;
	__u64 now, end;
	__s64 beyond;
	__u8 kctx;

	if (!tot)
		return 0;
	now = run_clock_ns(cfg.steal_off);
	s = this_cpu_state();
	if (s) {
		end = now;
		if (s->run_pid && s->run_pid == prev->pid) {
			beyond = charged_beyond_run(prev, s->run_runtime, s->run_start, now);
			charge_wakeup(s, tot, wakeup_head(beyond));
			end = run_end(s, now, beyond);
		}
		close_kthread(s, tot, end);	/* the receive kthread sleeps or is preempted */
		s->run_pid = 0;
		kctx = kthread_ctx(next->comm);
		if (kctx != CTX_NONE) {
			open_kthread(s, kctx, now, llc_now());
			s->run_pid = next->pid;
			s->run_start = now;
			s->run_runtime = next->se.sum_exec_runtime;
			s->run_flow_valid = 0;
		}
	}
	/* a reader that blocks or is preempted inside its receive syscall is off-CPU until it
	 * comes back: only its on-CPU segments count */
	r = bpf_task_storage_get(&readers, prev, 0, 0);
	if (r) {
		if (r->in_recv)
			segment_end(r, tot, now);
		if (r->run_start)
			charge_reader_wakeup(r, tot, prev, now);
	}
	r = bpf_task_storage_get(&readers, next, 0, 0);
	if (r && r->in_recv) {
		segment_start(r, tot, now);
		/* woken inside a receive call: the head of this run is the call's */
		r->run_start = now;
		r->run_runtime = next->se.sum_exec_runtime;
	}
	return 0;
}

#endif /* FT_SYSCALL_BPF_H */
