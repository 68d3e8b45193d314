/* SPDX-License-Identifier: GPL-2.0 */
/* flowtrace, maps: The constants, the load-time configuration (`cfg`, the only thing in .rodata) and the maps:
 * the flow map ((flow, CPU) -> ft_flow_stats, LRU, --max-flows), per-CPU totals and receive
 * context, the PMU counter arrays, the readers' task storage. Costs memory only: about 300
 * bytes per (flow, CPU) entry. */
#ifndef FT_MAPS_BPF_H
#define FT_MAPS_BPF_H

#include "common.bpf.h"

#define NET_RX_SOFTIRQ	3	/* enum in include/linux/interrupt.h; stable since 2.6 */
#define AF_INET		2
#define AF_INET6	10
#define MSG_PEEK	2

/* receive syscalls whose time is charged to the socket that sock_recv_length names */
#if defined(__TARGET_ARCH_x86)
#define NR_read		0
#define NR_readv	19
#define NR_recvfrom	45
#define NR_recvmsg	47
#define NR_recvmmsg	299
#elif defined(__TARGET_ARCH_arm64)
#define NR_read		63
#define NR_readv	65
#define NR_recvfrom	207
#define NR_recvmsg	212
#define NR_recvmmsg	243
#else
#error "receive syscall numbers are not known for this architecture"
#endif

const volatile struct ft_config cfg = {};

/* the bound is a load-time setting (steer --max-flows); LRU so a flood of flows evicts old ones
 * instead of failing, and userspace counts evictions as inserts minus live entries */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct ft_flow_cpu_key);
	__type(value, struct ft_flow_stats);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ft_cpu_stats);
} cpu_totals SEC(".maps");

/* the window (cfg.windows): one entry, written by userspace alone */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ft_window);
} windows SEC(".maps");

/* the id of ft_sample's program, written by userspace once loaded: which perf event's expiries
 * are the sampler's (withheld.bpf.h) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} sampler_prog SEC(".maps");

/* Where the kernel refuses fexit, userspace puts the UDP reads' tracepoint program on its hook
 * only while UDP datagrams arrive (programs.UDP_READS_FALLBACK). The per-skb program sets
 * udp_seen at a datagram and, when it was clear, wakes userspace through udp_ring at once;
 * userspace clears it a second later, so that the ring rings at most once a second, and the
 * flag, written only while clear, keeps its cache line shared between CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} udp_seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);	/* a page: sized by userspace to this machine's */
} udp_ring SEC(".maps");

/* one perf counter (LLC misses) per CPU, filled by userspace when a PMU exists */
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} llc_counters SEC(".maps");

/* the other events (enum ft_event), per CPU likewise; read by the sampler only */
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} ref_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} instruction_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} cycle_counters SEC(".maps");

/* the network header of an skb that went up the stack (skb->data moves on as the layers pull
 * their headers; the buffer stays), for the sampler to parse later */
struct skb_hint {
	__u64 data;
	__u32 len;
	__u32 headlen;
	__u16 proto;		/* Ethernet protocol, network order */
	__u8 pad[6];
};

/* Which receive context an skb went up in, so that a sample charges the flow of its own context's
 * last skb: the kthread of a flow steered to its reader's CPU hands the reader's TCP the data, and
 * the ACKs that TCP sends come back in through a softirq the kthread runs when it enables bottom
 * halves, one ACK skb after each batch; with one hint a CPU, the kthread's samples went to the
 * ACKs. Told apart by where the bpf_net_context (6.11+) that net_rx_action holds lives (see
 * hint_slot); before 6.11, and where softirqs run on task stacks (PREEMPT_RT), one slot. */
#define HINT_SOFTIRQ	0	/* net_rx_action in a softirq on the CPU's irq stack */
#define HINT_TASK	1	/* receive work on a task's stack: a cpumap kthread's batches,
				 * threaded NAPI, ksoftirqd, busy polling */
#define HINT_SLOTS	2

#define POOL_SLOTS	32	/* cpu_state.pool's entries: a power of two */

/* what the current receive context on this CPU is charging to */
struct cpu_state {
	__u64 softirq_start;	/* start of the running softirq (any vector) */
	__u64 mark;		/* last boundary of the NET_RX or kthread interval */
	__u64 llc_mark;
	__u64 softirq_llc_start;
	__u64 kthread_start;	/* start of the running cpumap batch or threaded NAPI run */
	__u64 hardirq_start;	/* the running interrupt handler's start (handlers do not nest) */
	/* sampled timing: the last skb that went up the stack here, per receive context (HINT_*) */
	struct skb_hint hint[HINT_SLOTS];
	/* sampled timing: skb->hash of the last two flows parsed whose transport is not counted
	 * here (0: none): two, because a CPU that takes in a flow's data also takes in the ACKs of
	 * what it sends, one skb of each in turn */
	__u32 skip_hash[2];
	__u8 skip_next;		/* the slot of skip_hash the next uncounted flow takes */
	__u8 hint_pad[3];
	__u64 sample_llc;	/* sampled timing: the LLC counter at the previous sample */
	__u64 sample_events[FT_EVENTS];	/* and the other events' */
	__u64 clock_ns;		/* sampled timing: bpf_ktime_get_ns() at the last sample, a clock
				 * good to one period for last_seen_ns (tracing programs may not
				 * call bpf_ktime_get_coarse_ns) */
	__u64 task_sample_ns;	/* and at the last sample on a task (not the idle task's): what a
				 * task's weight is capped by (sample_begin) */
	struct ft_flow_key cur;
	__u8 ctx;		/* CTX_* */
	__u8 cur_valid;		/* cur holds the flow of the last skb */
	__u8 skb_counted;	/* the last event counted an rx_skb for cur on this CPU */
	__u8 resume_ctx;	/* the receive kthread's context the running softirq interrupted */
	__u8 sample_ran;	/* ft_sample ran for the clock expiry now ending (withheld.bpf.h) */
	__u8 pad[3];
	/* sampled timing in windows: the window (its seq) of this CPU's hints and of its running
	 * interrupt handler's start; what is from an earlier one is stale */
	__u32 hint_window;
	__u32 hardirq_window;
	/* exact timing: the receive kthread switched in last, when, and its scheduler runtime then */
	__u64 run_start;
	__u64 run_runtime;
	__u32 run_pid;
	__u8 run_flow_valid;	/* run_flow holds the run's first skb's flow */
	__u8 run_pad[3];
	struct ft_flow_key run_flow;
	/* exact timing: the receive kthread whose interval last closed on a flow here, and that
	 * flow: where its next interval closes with no skb (after a softirq it ran, or a switch
	 * back in), that interval is the tail of this flow's work (kthread.bpf.h) */
	__u32 tail_pid;
	__u32 tail_pad;
	struct ft_flow_key tail_flow;
	/* sampled timing in windows: the flows of this CPU's last POOL_SLOTS receive samples inside
	 * windows (a ring), which the samples between windows, with no hint, are charged to
	 * (sampling.bpf.h) */
	struct ft_flow_key pool[POOL_SLOTS];
	__u32 pool_n;		/* slots filled */
	__u32 pool_next;	/* the slot the next one takes (modulo POOL_SLOTS) */
	__u32 pool_window;	/* the window of the last one */
	__u32 pool_pad;
	/* sampled timing: the sampler's perf event as the last expiry of its timer left it
	 * (withheld.bpf.h): its overflow count this tick, and the tick's */
	__u64 clock_interrupts;
	__u64 clock_interrupts_seq;
};

#define CTX_NONE	0
#define CTX_NET_RX	1
#define CTX_KTHREAD	2	/* a cpumap kthread: steered work, charged as kthread time */
#define CTX_NAPI_THREAD	3	/* a threaded NAPI kthread: the NET_RX work itself, out of softirq */

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_state);
} cpu_states SEC(".maps");

/* per reader thread: the receive syscall in progress */
struct recv_state {
	__u64 seg_start;	/* start of the current on-CPU segment, 0 while switched out */
	__u64 softirq_snap;	/* this CPU's softirq_ns at seg_start */
	__u64 softirq_llc_snap;
	__u64 llc_snap;
	__u64 acc_ns;
	__u64 acc_nested_ns;
	__u64 acc_llc;
	struct ft_flow_key flow;
	__u8 in_recv;
	__u8 have_flow;
	__u8 pad[6];
	/* exact timing: when the run that a wake-up inside a receive call began was switched in,
	 * and the reader's scheduler runtime then (0: no such run) */
	__u64 run_start;
	__u64 run_runtime;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct recv_state);
} readers SEC(".maps");

#endif /* FT_MAPS_BPF_H */
