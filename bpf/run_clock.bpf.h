/* SPDX-License-Identifier: GPL-2.0 */
/* The run clock: what brackets on a CPU time, the CPU's clock less the time its hypervisor ran
 * something else in its place (steal). A task's scheduler time (sum_exec_runtime, schedstat)
 * leaves steal out, and so do /proc/stat's user, system and softirq figures; bpf_ktime_get_ns()
 * counts it. On a VM whose host was busy, a receive call or a kthread's run that the host
 * preempted for milliseconds read as that much more CPU time: a recv()-only reader +20% to +37%
 * against its schedstat in some suite runs on a 2-vCPU VM with 3-4% steal over its uptime.
 * Include after vmlinux.h and bpf_core_read.h. */
#ifndef RUN_CLOCK_BPF_H
#define RUN_CLOCK_BPF_H

/* The steal of this CPU's run queue since boot, as of the scheduler's last clock update on it
 * (prev_steal_time_rq: every switch, wake-up and tick brings it up to date; a host preemption
 * is counted at the first of those after it, which on a busy CPU is the tick that fires as the
 * vCPU comes back). 0 where the kernel does not account steal (bare metal, no
 * PARAVIRT_TIME_ACCOUNTING, or no-steal-acc). The run queue is reached through the current
 * task's CFS run queue, as in sampling.bpf.h: `runqueues` is a per-CPU variable that kallsyms
 * lists only with CONFIG_KALLSYMS_ALL. */
static __always_inline __u64 cpu_steal_ns(void)
{
	struct task_struct *task;
	struct rq *rq;

	if (!bpf_core_field_exists(struct rq, prev_steal_time_rq) ||
	    !bpf_core_field_exists(struct cfs_rq, rq))
		return 0;
	task = bpf_get_current_task_btf();
	rq = task->se.cfs_rq->rq;	/* loads, not probe-read helper calls: it runs per skb */
	return rq ? rq->prev_steal_time_rq : 0;
}

/* Differences of it on one CPU are run time; across CPUs it is no clock (each CPU's steal
 * differs), and it is not CLOCK_MONOTONIC: stamps userspace compares with its clock
 * (last_seen_ns) stay bpf_ktime_get_ns()'s. */
static __always_inline __u64 run_clock_ns(void)
{
	return bpf_ktime_get_ns() - cpu_steal_ns();
}

#endif /* RUN_CLOCK_BPF_H */
