/* SPDX-License-Identifier: GPL-2.0 */
/* flowtrace, sampling: the default mode (see the block below). */
#ifndef FT_SAMPLING_BPF_H
#define FT_SAMPLING_BPF_H

#include "common.bpf.h"
#include "stack.bpf.h"
#include "profile.bpf.h"
#include "maps.bpf.h"
#include "account.bpf.h"
#include "skb.bpf.h"
#include "kthread.bpf.h"
#include "receive.bpf.h"
#include "sock.bpf.h"
#include "syscall.bpf.h"

/* ---- sampled timing ------------------------------------------------------------------------
 * A cpu-clock perf event per CPU fires every period; ft_sample charges that period to what the
 * CPU was doing: NET_RX processing (or a cpumap/NAPI kthread) of the flow whose skb went up the
 * stack last on this CPU, or a receive syscall of a socket, found from the syscall's fd. The only
 * per-packet work left is ft_skb_hint's one store; the cost grows with the sample rate instead of
 * the packet and syscall rates, and unrelated syscalls pay nothing. */

/* A sample in a task stands for the time that task ran since its own previous sample, by the
 * scheduler's account of it (sum_exec_runtime), not for one nominal period: a timer that fires
 * late (interrupts off, or a virtual CPU woken late from a halt, where the kernel forwards the
 * timer and drops the periods it missed) would otherwise lose that time, and a task that shares
 * its CPU with others would be charged theirs. But never for more than SAMPLE_WEIGHT_CPU_PERIODS
 * (4) times the time since the previous sample on a task on its CPU (the idle task's samples,
 * one period each, and the expiries counted on it do not count): where tasks take turns on a busy
 * CPU, a task's run time since its own previous sample spans periods that other tasks' samples
 * stand for, and charging all of it to where this one sample landed only adds noise (a busy CPU
 * is sampled every period, so one period each is the unbiased count there). A sample taken on
 * the idle task's stack (a softirq on an idle CPU) stands for one period.
 * sum_exec_runtime is brought up to date only at scheduler events (a tick, a switch, a wake-up),
 * so a sample reads it late by up to a tick, and by how much depends on the context: receive
 * processing wakes readers, which updates the interrupted task's runtime, so a NET_RX sample
 * read it fresh and a sample in the task's own code stale, which gave NET_RX ~10% more than
 * its time (against libbpf-tools softirqs) and the tasks as much less. So the runtime is taken
 * as of the sample: sum_exec_runtime + (now - exec_start), where exec_start is the scheduler
 * clock at that last update. Only differences of it are used, so the constant offset between
 * the scheduler clock and bpf_ktime_get_ns() cancels. */
struct sampled_runtime {
	__u64 runtime;		/* the task's runtime at its previous sample */
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sampled_runtime);
} sampled_runtime SEC(".maps");

/* How far the scheduler's task clock of this CPU's run queue (what exec_start and
 * sum_exec_runtime are in) is behind its clock: the time the hypervisor took the CPU away (steal)
 * and, where the kernel accounts it, hard and soft irq time, since boot, and the steal its clocks
 * do not hold yet (run_clock.bpf.h's steal_not_counted). The run queue is reached
 * through the task's CFS run queue (group scheduling, which every distribution kernel has):
 * `runqueues` is a per-CPU variable that kallsyms lists only with CONFIG_KALLSYMS_ALL. */
static __always_inline __u64 task_clock_lag(struct task_struct *task)
{
	struct rq *rq;

	if (!bpf_core_field_exists(struct cfs_rq, rq))
		return 0;
	rq = task->se.cfs_rq->rq;
	if (!rq)
		return 0;
	/* and the steal since the run queue's last clock update, which its clocks do not hold yet
	 * (run_clock.bpf.h) */
	return rq->clock - rq->clock_task + steal_not_counted(rq, cfg.steal_off);
}

/* the longest task time one sample may stand for: beyond it something stopped the sampler
 * (throttling, a CPU coming back online), and the task's context is not known for that long */
#define MAX_SAMPLE_WEIGHT_PERIODS	100
#define SAMPLE_WEIGHT_CPU_PERIODS	4

/* IRQ_OVER_TASK: the sample is in an interrupt or a softirq over a task (the irq stack) on a
 * kernel that keeps irq time out of tasks' run time (CONFIG_IRQ_TIME_ACCOUNTING:
 * cfg.irq_time_apart). That time is in no task's run time, so such a sample weighs one period,
 * and the task's reading stays where it was: its own samples still add up to its run time.
 * Weighed by the task's run time instead, NET_RX over a busy task read -41% against its
 * brackets in a guest of Debian's 6.1 built with the option (its samples' count -7% to -9%). */
static __always_inline __u64 sample_weight(__u64 period, __u64 now, struct cpu_state *s,
					   int irq_over_task)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct sampled_runtime *last;
	__u64 runtime, w, cpu_elapsed;

	if (!task->pid)
		return period;
	cpu_elapsed = s->task_sample_ns && s->task_sample_ns < now ? now - s->task_sample_ns : period;
	s->task_sample_ns = now;
	if (irq_over_task)
		return period;
	last = bpf_task_storage_get(&sampled_runtime, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!last)
		return period;
	/* the task's run time up to now, plus a constant (the two clocks' offset): now - exec_start
	 * alone would count the steal since exec_start's clock last moved (and across CPUs, the
	 * difference of their steal since boot) as run time, which doubled a cpumap kthread's time
	 * on a VM whose vCPUs the host preempts */
	runtime = task->se.sum_exec_runtime + now - task->se.exec_start - task_clock_lag(task);
	if (!last->runtime) {
		w = period;	/* its first sample: the time between is not known */
		last->runtime = runtime;
	} else if ((__s64)(runtime - last->runtime) > 0) {
		/* signed: the clocks' offset may put the readings near 2^64, where they wrap */
		w = runtime - last->runtime;
		last->runtime = runtime;
	} else {
		/* behind the previous sample's reading: that one was taken before the scheduler
		 * had counted a host preemption as steal (the lag above moves at its clock updates
		 * only) and read the steal as run time. Keeping the higher reading gives that back
		 * from the samples that follow; taking this lower one as the next base would keep
		 * the steal as the task's run time */
		w = 0;
	}
	if (w > SAMPLE_WEIGHT_CPU_PERIODS * cpu_elapsed)
		w = SAMPLE_WEIGHT_CPU_PERIODS * cpu_elapsed;
	return w < period * MAX_SAMPLE_WEIGHT_PERIODS ? w : period * MAX_SAMPLE_WEIGHT_PERIODS;
}

static __always_inline void note_udp(void)
{
	__u32 zero = 0, *seen = bpf_map_lookup_elem(&udp_seen, &zero);

	if (seen && !*seen) {
		/* the datagram's time: where the reads' program is off, userspace counts from it
		 * to the attach the time whose reads go uncounted (udp_reads_unwatched_ns) */
		__u64 now = bpf_ktime_get_ns();

		*seen = 1;
		bpf_ringbuf_output(&udp_ring, &now, sizeof(now), 0);
	}
}

/* Sampled timing in windows: the sampler runs all the time at its rate, the per-skb program
 * (the hints) only inside the windows. A receive sample between windows is charged to a flow
 * drawn from the CPU's last POOL_SLOTS receive samples inside windows (a ring, across windows:
 * at 99 Hz a 50 ms window holds two or three such samples, and one window's alone would give the
 * split of a few), so each flow's expected share is its share of those. The CPU's total stays
 * what its samples say over the whole time, as without windows: only the split among flows is
 * the windows' estimate, and it rests on the samples inside them, a tenth of all. A kthread's
 * samples and NET_RX's share the ring (a CPU does one or the other for a flow, as a rule), and
 * a ring that is empty or expired takes a seed from ft_skb_hint (there, why). (A
 * sampler that ran only inside the windows, at ten times its rate, saw steer's own programs and
 * its own interrupts there, and read a CPU's NET_RX 26-33% above its time over the whole.) */
#define POOL_MAX_AGE	4	/* windows since the ring's last sample: older, it is not the CPU's
				 * traffic now */

static __always_inline void pool_add(struct cpu_state *s, const struct ft_flow_key *k,
				     __u32 window)
{
	s->pool[s->pool_next++ & (POOL_SLOTS - 1)] = *k;
	if (s->pool_n < POOL_SLOTS)
		s->pool_n++;
	s->pool_window = window;
}

static __always_inline int pool_live(struct cpu_state *s, __u32 window)
{
	return s->pool_n && window - s->pool_window <= POOL_MAX_AGE;
}

static __always_inline int pool_draw(struct cpu_state *s, struct ft_flow_key *k, __u32 window)
{
	__u32 n = s->pool_n;

	if (!pool_live(s, window))
		return -1;
	*k = s->pool[(bpf_get_prandom_u32() % n) & (POOL_SLOTS - 1)];
	return 0;
}

/* A CPU whose ring is empty or expired (a flow starting, a CPU that receive work keeps only
 * lightly busy) is seeded with the flow of its first skb in a window, when that one is counted:
 * until a sample lands in its receive processing inside a window, its samples between windows
 * would otherwise be no flow's. A 3 s flow alone on its CPU was read at 0.02 s where its other
 * runs read 0.2 to 0.6 s (tests/live/test_kernel_smoke.py). The seed stands for skbs, not time:
 * the samples that follow dilute it (one slot of the ring's) and overwrite it. Called once a
 * window a CPU, and out of line: inlined, ft_skb_hint read +10 and +24 ns beyond its floor in
 * one run of tests/live/test_budget_live.py, out of line -8 and -8 (-36..+5 before the seed). */
static __noinline void seed_pool(struct cpu_state *s, const struct ft_flow_key *k, __u32 window)
{
	if (pool_live(s, window))
		return;
	s->pool_n = 0;
	pool_add(s, k, window);
}

/* Sampled timing's per-skb program: the hint for the sampler and, for the transports in
 * cfg.skb_count, the skb's bytes and packets (in windows, a TCP skb's count alone: where a flow
 * goes up the stack, which a tenth of the samples may not say). skb->hash (the NIC's RSS hash,
 * or the one the sending socket put on it) tells an skb of one of the last two uncounted flows
 * on this CPU (TCP, where the sockets count it) without a look at its headers: a few loads and
 * compares; another flow, or no hash, costs the headers' parse. A counted flow whose hash
 * collides with one of those two goes uncounted while they last (1 in 2^31). */
SEC("tp_btf/netif_receive_skb")
int BPF_PROG(ft_skb_hint, struct sk_buff *skb)
{
	struct cpu_state *s = this_cpu_state();
	struct ft_flow_key k = {};
	struct ft_cpu_stats *tot;
	struct ft_flow_stats *st;
	__u32 hash, seq, scale = window_scale(&seq), first;
	__u64 payload = 0;

	if (!s || !scale)
		return 0;
	set_hint(s, skb);
	first = s->hint_window != seq;	/* this CPU's first skb in this window */
	s->hint_window = seq;
	if (!cfg.skb_count)
		return 0;
	hash = skb->hash;
	if (hash && (hash == s->skip_hash[0] || hash == s->skip_hash[1]))
		return 0;
	if (skb_flow(skb, &k, &payload))
		return 0;
	if (!skb_counted_proto(k.proto)) {
		s->skip_hash[s->skip_next & 1] = hash;
		s->skip_next ^= 1;
		return 0;
	}
	if (cfg.windows && first)
		seed_pool(s, &k, seq);
	if (k.proto == IPPROTO_UDP)
		note_udp();
	tot = totals();
	if (!tot)
		return 0;
	st = flow_entry(&k, bpf_get_smp_processor_id(), tot);
	if (!st)
		return 0;
	st->rx_skbs += scale;
	/* the sampler's clock, good to a period on a CPU that takes packets in, saves a clock read
	 * (~50 ns on this VM) an skb; before this CPU's first sample, the clock */
	st->last_seen_ns = s->clock_ns ? s->clock_ns : bpf_ktime_get_ns();
	if (k.proto == IPPROTO_TCP && !(cfg.skb_count & FT_COUNT_TCP))
		return 0;	/* FT_COUNT_TCP_SKBS: the socket counts its bytes */
	if (skb->skb_iif && current_kthread_ctx() == CTX_KTHREAD)
		return 0;	/* generic XDP counted it on the arrival CPU */
	count_payload(st, skb, payload, scale);
	return 0;
}

#define WHERE_TASK	0	/* none of the ranges below: task context (or hardirq, idle) */
#define WHERE_NET_RX	1
#define WHERE_SOFTIRQ	2	/* a softirq other than NET_RX */
#define WHERE_NET_CONTEXT 3	/* a bpf_net_context is held: NET_RX, or a kthread's own work */

#define PF_KTHREAD	0x00200000	/* include/linux/sched.h */
#define S_IFMT		00170000
#define S_IFSOCK	0140000

static __always_inline int in_text(__u64 ip, int which)
{
	return ip >= cfg.text[which][0] && ip < cfg.text[which][1];
}

/* the innermost of net_rx_action / threaded NAPI / softirq handling on the interrupted stack.
 * Walking it is the sampler's main cost: ~16 us a sample on this VM, a fixed ~7 us plus ~0.5 us a
 * frame (bench.event_cost), so where_sampled walks only when the cheap signs below cannot tell. */
static __always_inline int where_on_stack(struct bpf_perf_event_data *ctx)
{
	__u64 *ips;
	long n = sampled_frames(ctx, &ips);
	int i;

	if (!n)
		return WHERE_TASK;
	for (i = 0; i < FT_STACK_DEPTH; i++) {
		if (i >= n)
			break;
		if (in_text(ips[i], FT_TEXT_NET_RX) || in_text(ips[i], FT_TEXT_NAPI_THREAD))
			return WHERE_NET_RX;
		if (in_text(ips[i], FT_TEXT_SOFTIRQ))
			return WHERE_SOFTIRQ;
	}
	return WHERE_TASK;
}

/* Whether a NET_RX sample landed in RPS sending its IPIs: net_rps_send_ipi, at the end of a
 * net_rx_action, kicks the CPUs this one handed packets to. A softirq raised for that alone
 * takes no packet in and is no flow's (the exact mode leaves a softirq without skbs
 * unattributed); charged to the CPU's last skb, it went to whichever flow that was: with RFS in
 * this VM, where each IPI traps to the host (6-8 us a softirq), two fifths to two thirds of a
 * sending CPU's NET_RX time (bench.accuracy, scenario 9). The stack is walked only where the
 * interrupted code is on the IPI's way down (FT_TEXT_IPI_*), so other samples pay a few
 * compares. */
static __always_inline int sending_rps_ipi(struct bpf_perf_event_data *ctx)
{
	__u64 ip = PT_REGS_IP(&ctx->regs), *ips;
	int i, found = 0;
	long n;

	for (i = FT_TEXT_RPS_IPI; i <= FT_TEXT_IPI_LAST; i++)
		found |= in_text(ip, i);
	if (!found)
		return 0;
	n = sampled_frames(ctx, &ips);
	for (i = 0; i < 8; i++) {
		if (i >= n)
			break;
		if (in_text(ips[i], FT_TEXT_RPS_IPI))
			return 1;
		if (in_text(ips[i], FT_TEXT_NET_RX))
			return 0;
	}
	return 0;
}

/* Whether the interrupted context ran on its task's stack (task context; ksoftirqd's softirqs)
 * or off it (a softirq, on the CPU's irq stack: the sampling interrupt cannot interrupt a
 * hardirq). Task stacks are 16 KiB on x86_64 and arm64, 32 KiB under KASAN: in between the
 * answer is not known. */
#define TASK_STACK_MAX		(32 << 10)	/* and TASK_STACK_SURE, skb.bpf.h */
#define ON_TASK_STACK		0
#define OFF_TASK_STACK		1
#define STACK_NOT_KNOWN		2

static __always_inline int sampled_stack(struct bpf_perf_event_data *ctx, struct task_struct *task)
{
	__u64 sp = ctx->regs.sp, base = (__u64)task->stack;

	if (!cfg.softirq_stacks || sp < base || sp >= base + TASK_STACK_MAX)
		return cfg.softirq_stacks ? OFF_TASK_STACK : STACK_NOT_KNOWN;
	return sp < base + TASK_STACK_SURE ? ON_TASK_STACK : STACK_NOT_KNOWN;
}

static __always_inline int comm_is_ksoftirqd(const char *comm)
{
	return comm[0] == 'k' && comm[1] == 's' && comm[2] == 'o' && comm[3] == 'f' &&
	       comm[4] == 't' && comm[5] == 'i' && comm[6] == 'r' && comm[7] == 'q';
}

/* NET_RX processing, another softirq, or neither (task context, a kthread, idle), with the
 * stack walk only where cheaper signs cannot tell:
 * - From 6.11, net_rx_action holds a bpf_net_context in the task it runs on (current, whatever
 *   it interrupted) for exactly as long as it runs: set at its start, cleared at its one exit.
 *   Other holders set one only with bottom halves off, in task context: threaded NAPI and busy
 *   polling (receive processing too), the cpumap kthread (which ft_sample tells by its name), XDP
 *   on tun and netkit's transmit. A softirq that a holder runs when it enables bottom halves
 *   (the cpumap kthread's, after each batch: the ACKs its TCP sent through a veth) is on the irq
 *   stack, and counts as NET_RX, as in the exact mode.
 * - The stack pointer tells a softirq from task context, and before 6.11 spares the walk in
 *   task context, outside ksoftirqd. */
static __always_inline int where_sampled(struct bpf_perf_event_data *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	int stack = sampled_stack(ctx, task);
	char comm[16];

	if (bpf_core_field_exists(task->bpf_net_context)) {
		/* off the task's stack it is net_rx_action's own context (or a softirq on top of a
		 * holder, most likely NET_RX itself); on it, the holder's work */
		if (task->bpf_net_context)
			return stack == OFF_TASK_STACK ? WHERE_NET_RX : WHERE_NET_CONTEXT;
		if (stack == ON_TASK_STACK)
			return WHERE_TASK;
		/* net_rx_action's own code before it sets the context and after it clears it:
		 * 3% of the samples inside NET_RX brackets (2026-12-01), once another softirq's */
		if (stack == OFF_TASK_STACK)
			return in_text(PT_REGS_IP(&ctx->regs), FT_TEXT_NET_RX) ? WHERE_NET_RX
									     : WHERE_SOFTIRQ;
		return where_on_stack(ctx);
	}
	if (stack == ON_TASK_STACK) {
		bpf_get_current_comm(comm, sizeof(comm));
		if (!comm_is_ksoftirqd(comm))
			return WHERE_TASK;
	}
	return where_on_stack(ctx);
}

static __always_inline int sampled_user_mode(struct bpf_perf_event_data *ctx)
{
#if defined(__TARGET_ARCH_x86)
	/* the context allows whole-word reads only, and cs shares its word with FRED bits */
	__u64 *regs = (__u64 *)&ctx->regs;

	return (regs[__builtin_offsetof(struct pt_regs, cs) / 8] & 3) != 0;
#else
	return (ctx->regs.pstate & 0xf) == 0;	/* PSR_MODE_EL0t */
#endif
}

/* the flow of the socket the current task is receiving from, if it is inside a receive syscall:
 * the syscall number and the fd come from its user registers, the socket from its fd table */
static __always_inline int current_recv_flow(struct ft_flow_key *k)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct pt_regs *regs;
	struct fdtable *fdt;
	struct file **fds, *file;
	struct socket *sock;
	long nr;
	__u32 fd;

	if (task->flags & PF_KTHREAD)
		return -1;
	regs = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!regs)
		return -1;
#if defined(__TARGET_ARCH_x86)
	nr = BPF_CORE_READ(regs, orig_ax);
#else
	nr = BPF_CORE_READ(regs, syscallno);
#endif
	if (!is_recv_syscall(nr))
		return -1;
	fd = PT_REGS_PARM1_CORE_SYSCALL(regs);
	fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
		return -1;
	fds = BPF_CORE_READ(fdt, fd);
	if (bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]) || !file)
		return -1;
	if ((BPF_CORE_READ(file, f_inode, i_mode) & S_IFMT) != S_IFSOCK)
		return -1;
	sock = BPF_CORE_READ(file, private_data);
	return sock_flow(BPF_CORE_READ(sock, sk), k);
}

/* One side's PMU deltas since the previous sample, added to a flow's or a CPU's figures (both
 * name them alike): SIDE is kernel or app. */
#define ADD_EVENTS(x, side, dllc, dev)						\
	do {									\
		(x)->llc_##side += (dllc);					\
		(x)->refs_##side += (dev)[FT_EVENT_REFERENCES];			\
		(x)->instructions_##side += (dev)[FT_EVENT_INSTRUCTIONS];	\
		(x)->cycles_##side += (dev)[FT_EVENT_CYCLES];			\
	} while (0)

/* What one sample weighs and carries, worked out once by sample_begin() and handed to the step
 * that charges it. */
struct ft_sampled {
	__u64 weight;			/* ns it stands for (sample_weight()) */
	__u64 dllc;			/* LLC misses since the previous sample on this CPU */
	__u64 dev[FT_EVENTS];		/* the other PMU events since then */
	__u32 cpu;
	__u32 pad;
};

/* Step 1: this CPU's bookkeeping, whatever the sample landed in: the PMU's deltas since the
 * previous sample (charged with its weight, to the same side), the count of samples, and the
 * weight itself, for a clock of PERIOD ns. */
static __always_inline void sample_begin(__u64 period, struct cpu_state *s,
					 struct ft_cpu_stats *tot, struct ft_sampled *x,
					 int irq_over_task)
{
	__u64 llc, now;

	llc = llc_now();
	x->dllc = s->sample_llc ? llc - s->sample_llc : 0;
	s->sample_llc = llc;
	events_since_sample(s, x->dev);
	tot->samples++;
	now = bpf_ktime_get_ns();
	/* a task's weight is capped by the time since the CPU's previous sample on a task, not on
	 * the idle task: a task that runs in bursts between idle spells (a cpumap kthread) has its
	 * samples' weights add up to its run time only if the idle samples between them (or the
	 * expiries ft_sample_withheld counts there, each period) do not reset the cap; they read
	 * its kthread -10% to -12% of schedstat when they did (the first sample on this CPU: as if
	 * the previous one were a period ago) */
	x->weight = sample_weight(period, now, s, irq_over_task);
	s->clock_ns = now;
}

/* Step 2: what the CPU was doing: WHERE_* from where_sampled(), with the receive kthreads told
 * apart by name (*KTHREAD: the cpumap kthread's own work; *NAPI_THREAD: a threaded NAPI poller,
 * whose work is NET_RX) */
static __always_inline int sample_context(struct bpf_perf_event_data *ctx, int *kthread,
					  int *napi_thread)
{
	int where = where_sampled(ctx);
	char comm[8];

	*kthread = *napi_thread = 0;
	if (where == WHERE_TASK || where == WHERE_NET_CONTEXT) {
		bpf_get_current_comm(comm, sizeof(comm));
		/* threaded NAPI (napi/<dev>-<id>) runs the NET_RX work in a kthread, bh disabled */
		if (comm_is_napi(comm))
			where = WHERE_NET_RX, *napi_thread = 1;
		else if (comm_is_cpumap(comm))
			*kthread = 1;
		else if (where == WHERE_NET_CONTEXT)
			where = WHERE_NET_RX;
	}
	return where;
}

/* Step 3a: receive processing (NET_RX, or a receive kthread's work), to the flow of the CPU's
 * last skb in this window (its key in *K; 0: one was found), or between windows to one drawn
 * from the last window's, and to the CPU's totals by context. WINDOW: the window open now, or
 * the last one; IN_WINDOW: one is open (always, without windows); RPS_IPI: the sample is RPS
 * sending IPIs (sending_rps_ipi), no flow's */
static __always_inline int charge_receive(struct cpu_state *s, struct ft_cpu_stats *tot,
					  struct ft_sampled *x, int kthread, int napi_thread,
					  struct ft_flow_key *k, __u32 window, int in_window,
					  int rps_ipi)
{
	struct ft_flow_stats *st = 0;
	__u64 w = x->weight;
	char comm[8];

	if (rps_ipi) {
		/* no flow's: see sending_rps_ipi */
	} else if (in_window) {
		/* a hint from an earlier window is stale: its skb may be gone */
		if (s->hint_window == window && hint_flow(s, k) == 0) {
			st = flow_entry(k, x->cpu, tot);
			if (st && cfg.windows)
				pool_add(s, k, window);
		}
	} else if (pool_draw(s, k, window) == 0) {
		st = flow_entry(k, x->cpu, tot);
	}
	if (st) {
		if (kthread)
			st->kthread_ns += w;
		else
			st->kernel_ns += w;
		st->kernel_samples++;
		ADD_EVENTS(st, kernel, x->dllc, x->dev);
		st->last_seen_ns = s->clock_ns;
	} else if (kthread) {
		tot->kthread_unattributed_ns += w;
	} else {
		tot->net_rx_unattributed_ns += w;
	}
	if (kthread) {
		tot->kthread_ns += w;
	} else if (napi_thread) {
		tot->net_rx_ns += w;
		tot->net_rx_samples++;
		tot->napi_thread_ns += w;
	} else {
		tot->net_rx_ns += w;
		tot->net_rx_samples++;
		tot->softirq_ns += w;
		/* a NET_RX softirq on top of a receive kthread (its local_bh_enable) */
		bpf_get_current_comm(comm, sizeof(comm));
		if (kthread_ctx(comm) != CTX_NONE)
			tot->kthread_net_rx_ns += w;
	}
	ADD_EVENTS(tot, kernel, x->dllc, x->dev);
	return st ? 0 : -1;
}

/* Step 3b: another softirq than NET_RX */
static __always_inline void charge_softirq(struct ft_cpu_stats *tot, struct ft_sampled *x)
{
	char comm[8];

	tot->softirq_ns += x->weight;
	tot->softirq_llc += x->dllc;
	bpf_get_current_comm(comm, sizeof(comm));
	if (kthread_ctx(comm) != CTX_NONE)
		tot->kthread_softirq_ns += x->weight;
}

/* Step 4: a task inside a receive syscall: its own time (WHERE_TASK), or softirq time nested in
 * it, to the flow of the socket it reads (its key in *RK); the first sample of a new reader names
 * it. 0: charged as the reader's own time */
static __always_inline int charge_reader(struct cpu_state *s, struct ft_cpu_stats *tot,
					 struct ft_sampled *x, int where, struct ft_flow_key *rk)
{
	struct ft_flow_stats *st;
	__u32 pid;

	if (current_recv_flow(rk))
		return -1;
	st = flow_entry(rk, x->cpu, tot);
	if (!st)
		return -1;
	pid = bpf_get_current_pid_tgid() >> 32;
	if (st->app_pid != pid) {
		/* with socket counters no read names the reader: the samples do */
		st->app_pid = pid;
		bpf_get_current_comm(st->app_comm, sizeof(st->app_comm));
		st->app_cgroup = bpf_get_current_cgroup_id();
	}
	if (where == WHERE_TASK) {
		st->app_ns += x->weight;
		st->app_samples++;
		ADD_EVENTS(st, app, x->dllc, x->dev);
		tot->app_ns += x->weight;
		ADD_EVENTS(tot, app, x->dllc, x->dev);
	} else {
		st->app_nested_ns += x->weight;
		tot->app_nested_ns += x->weight;
	}
	st->last_seen_ns = s->clock_ns;
	return where == WHERE_TASK ? 0 : -1;
}

SEC("perf_event")
int ft_sample(struct bpf_perf_event_data *ctx)
{
	struct cpu_state *s = this_cpu_state();
	struct ft_cpu_stats *tot = totals();
	struct ft_flow_key k = {}, rk = {};
	struct ft_sampled x = {};
	__u32 window, in_window = window_scale(&window) != 0;
	int where, kthread, napi_thread, side = -1;
	struct ft_flow_key *flow = 0;

	if (!s || !tot)
		return 0;
	x.cpu = bpf_get_smp_processor_id();
	sample_begin(ctx->sample_period, s, tot, &x, cfg.irq_time_apart &&
		     sampled_stack(ctx, bpf_get_current_task_btf()) == OFF_TASK_STACK);
	s->sample_ran = 1;	/* for ft_sample_withheld, at this expiry's end */
	if (sampled_user_mode(ctx))
		return 0;
	tot->samples_kernel_mode++;
	where = sample_context(ctx, &kthread, &napi_thread);
	if (where == WHERE_NET_RX || kthread) {
		if (charge_receive(s, tot, &x, kthread, napi_thread, &k, window, in_window,
				   !kthread && !napi_thread && sending_rps_ipi(ctx)) == 0)
			flow = &k;
		side = kthread ? FT_SIDE_KTHREAD : FT_SIDE_KERNEL;
	} else if (where == WHERE_SOFTIRQ) {
		charge_softirq(tot, &x);
	}
	if (!kthread && charge_reader(s, tot, &x, where, &rk) == 0)
		flow = &rk, side = FT_SIDE_APP;
	/* one call site: the profile's search is most of what the verifier walks */
	if (cfg.profile_ranges && side >= 0)
		profile_sample(ctx, flow, x.cpu, side, x.weight);
	return 0;
}

#endif /* FT_SAMPLING_BPF_H */
