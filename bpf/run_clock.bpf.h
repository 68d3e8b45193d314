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

/* The steal of this CPU since boot. The run queue keeps the part the scheduler has counted
 * (prev_steal_time_rq), brought up to date at its clock updates only: a switch, a wake-up, a
 * tick. A host preemption shorter than the time to the next tick is not in it yet when the vCPU
 * comes back, so a bracket that closes before the tick held it as run time (seen here: syscall
 * exits 1-2 ms behind; the recv()-only reader of the suite +7% against its schedstat with 1.2
 * CPU-s stolen over its test). Where the hypervisor shares the vCPU's steal with the guest (KVM's
 * per-CPU struct kvm_steal_time, whose first field the host brings up to date at every entry),
 * STEAL_OFF is where it lies from the run queue in the per-CPU area (userspace: the offsets of
 * steal_time and runqueues in BTF's .data..percpu), and the live figure is read from it (a load
 * through bpf_rdonly_cast, a probe read before 6.2). It is taken only where it is ahead of
 * the run queue's, by less than a second (anything else is not that clock: a zero where the
 * guest never registered it, another hypervisor's). 0 where the kernel does not account steal
 * (bare metal, no PARAVIRT_TIME_ACCOUNTING, or no-steal-acc). The run queue is reached through
 * the current task's CFS run queue, as in sampling.bpf.h: `runqueues` is a per-CPU variable
 * that kallsyms lists only with CONFIG_KALLSYMS_ALL, and so is steal_time. */
#define RUN_CLOCK_MAX_LAG	1000000000ULL

/* 6.2+: a cast the verifier turns into a move; loads through it fault safely, as a probe read's
 * do, at the cost of a load. RUN_CLOCK_NO_KFUNCS builds the object for kernels without it
 * (flowtrace-nokfunc.bpf.o): there libbpf before 1.3 looks for a weak kfunc that vmlinux lacks
 * in the modules' BTF, and without CAP_SYS_ADMIN that search fails the whole object. */
#ifndef RUN_CLOCK_NO_KFUNCS
extern void *bpf_rdonly_cast(const void *obj__ign, __u32 btf_id__k) __ksym __weak;
#endif

static __always_inline __u64 live_steal_ns(struct rq *rq, __s64 steal_off)
{
	__u64 live = 0;

#ifndef RUN_CLOCK_NO_KFUNCS
	struct kvm_steal_time *st;

	if (bpf_core_type_exists(struct kvm_steal_time) && !!bpf_rdonly_cast) {
		st = bpf_rdonly_cast((void *)rq + steal_off,
				     bpf_core_type_id_kernel(struct kvm_steal_time));
		return st->steal;
	}
#endif
	bpf_probe_read_kernel(&live, sizeof(live), (void *)rq + steal_off);
	return live;
}

/* the steal of RQ's CPU that its run queue has not counted yet (0 where not known) */
static __always_inline __u64 steal_not_counted(struct rq *rq, __s64 steal_off)
{
	__u64 counted, live;

	if (!steal_off || !bpf_core_field_exists(struct rq, prev_steal_time_rq))
		return 0;
	counted = rq->prev_steal_time_rq;
	live = live_steal_ns(rq, steal_off);
	return live > counted && live - counted < RUN_CLOCK_MAX_LAG ? live - counted : 0;
}

static __always_inline __u64 cpu_steal_ns(__s64 steal_off)
{
	struct task_struct *task;
	struct rq *rq;

	if (!bpf_core_field_exists(struct rq, prev_steal_time_rq) ||
	    !bpf_core_field_exists(struct cfs_rq, rq))
		return 0;
	task = bpf_get_current_task_btf();
	rq = task->se.cfs_rq->rq;	/* loads, not probe-read helper calls: it runs per skb */
	if (!rq)
		return 0;
	return rq->prev_steal_time_rq + steal_not_counted(rq, steal_off);
}

/* Differences of it on one CPU are run time; across CPUs it is no clock (each CPU's steal
 * differs), and it is not CLOCK_MONOTONIC: stamps userspace compares with its clock
 * (last_seen_ns) stay bpf_ktime_get_ns()'s. */
static __always_inline __u64 run_clock_ns(__s64 steal_off)
{
	return bpf_ktime_get_ns() - cpu_steal_ns(steal_off);
}

#endif /* RUN_CLOCK_BPF_H */
