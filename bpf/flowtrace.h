/* SPDX-License-Identifier: GPL-2.0 */
/* Types shared by flowtrace.bpf.c and steer/abi/flowtrace.py (checked against BTF by a test).
 * Fixed-width types only, no pointers, explicit padding: both sides must agree byte for byte.
 */
#ifndef __FLOWTRACE_H
#define __FLOWTRACE_H

#define FT_COMM_LEN 16

/* receive-direction 5-tuple: src = remote peer, dst = this host */
struct ft_flow_key {
	__u8 saddr[16];		/* IPv4 in the first 4 bytes, rest zero */
	__u8 daddr[16];
	__u16 sport;		/* host byte order */
	__u16 dport;
	__u8 proto;		/* IPPROTO_TCP or IPPROTO_UDP */
	__u8 family;		/* 4 or 6 (v4-mapped IPv6 sockets are folded into 4) */
	__u16 pad;
};

/* one entry per (flow, CPU): the CPU in the key lets each CPU update its own entry without
 * atomics, and gives userspace the per-CPU split it needs for "dominant CPU and its share" */
struct ft_flow_cpu_key {
	struct ft_flow_key flow;
	__u32 cpu;
};

struct ft_flow_stats {
	__u64 rx_bytes;		/* transport payload seen on the kernel receive path */
	__u64 rx_packets;	/* wire packets (GRO aggregates count their segments) */
	__u64 rx_skbs;		/* skbs whose stack processing ran on this CPU: an skb that generic
				 * XDP redirects to a cpumap counts on the target CPU only */
	__u64 redirected_skbs;	/* skbs XDP redirected away from this CPU to a cpumap */
	__u64 kernel_ns;	/* NET_RX softirq (or threaded NAPI) time charged to this flow */
	__u64 kthread_ns;	/* cpumap kthread time charged to this flow (steered flows) */
	__u64 app_bytes;	/* bytes returned to the reader (sock_recv_length) */
	__u64 app_calls;	/* receive calls that returned data or an error */
	__u64 app_ns;		/* on-CPU time of receive syscalls, nested softirq taken out */
	__u64 app_nested_ns;	/* softirq time that ran inside those syscalls */
	__u64 llc_kernel;	/* LLC misses on the kernel side (0 without a PMU) */
	__u64 llc_app;		/* LLC misses on the application side */
	__u64 rx_drops;		/* received skbs of the flow the kernel dropped (skb:kfree_skb) */
	/* the other PMU events, per side, with sampled timing (0 without them): LLC references
	 * (misses / references gives the hit ratio), instructions retired, core cycles */
	__u64 refs_kernel;
	__u64 refs_app;
	__u64 instructions_kernel;
	__u64 instructions_app;
	__u64 cycles_kernel;
	__u64 cycles_app;
	/* sampled timing: the samples kernel_ns + kthread_ns and app_ns rest on (their error bars) */
	__u64 kernel_samples;
	__u64 app_samples;
	__u64 last_seen_ns;	/* bpf_ktime_get_ns() of the last update */
	__u32 app_pid;		/* tgid of the last reader */
	/* where the flow's packets come in, for its NIC's locality and queue (0: not known):
	 * the device the skb arrived on (skb->dev at netif_receive_skb, or the socket's
	 * sk_rx_dst_ifindex), in the network namespace rx_netns (its inode number) */
	__u32 rx_ifindex;
	char app_comm[FT_COMM_LEN];
	__u32 rx_netns;
	__u32 rx_napi_id;	/* the NAPI instance that polled it (skb/sk napi_id; 0: none) */
	__u16 rx_queue;		/* the device's RX queue + 1, as drivers record it (0: not recorded) */
	__u16 pad;
	__u32 last_drop_reason;	/* enum skb_drop_reason of its latest drop (0: none) */
	/* the last reader's cgroup (v2 id: its directory's inode number in the cgroup2 mount;
	 * 1, the root, on a host whose controllers are all v1), read when the reader changes */
	__u64 app_cgroup;
};

/* per-CPU totals; the invariant the tests check:
 * sum over flows of kernel_ns on CPU c + net_rx_unattributed_ns[c] == net_rx_ns[c] */
struct ft_cpu_stats {
	__u64 net_rx_events;		/* softirq_entry for NET_RX: matches /proc/softirqs */
	__u64 net_rx_ns;
	__u64 net_rx_unattributed_ns;	/* NET_RX time with no TCP/UDP skb to charge it to */
	__u64 kthread_ns;
	__u64 kthread_unattributed_ns;
	__u64 softirq_ns;		/* every softirq vector: subtracted from syscalls it interrupts */
	__u64 softirq_llc;
	__u64 app_ns;
	__u64 app_nested_ns;
	__u64 llc_kernel;
	__u64 llc_app;
	__u64 flow_inserts;		/* new flow entries: userspace derives evictions from it */
	__u64 flow_failures;		/* flow map updates that failed: their time went to unattributed */
	__u64 untimed_skbs;		/* skbs seen outside NET_RX and cpumap (bytes counted, no time) */
	__u64 samples;			/* sampled timing: clock samples taken on this CPU */
	__u64 samples_kernel_mode;	/* of them, in the kernel (the stack was walked) */
	__u64 rx_drops;			/* received TCP/UDP skbs dropped on this CPU */
	__u64 refs_kernel;		/* as in ft_flow_stats, every flow's and unattributed */
	__u64 refs_app;
	__u64 instructions_kernel;
	__u64 instructions_app;
	__u64 cycles_kernel;
	__u64 cycles_app;
	__u64 napi_thread_ns;		/* of net_rx_ns, run in threaded NAPI kthreads (napi/<dev>-<id>),
					 * outside any softirq: the same receive work on another CPU */
	__u64 hardirq_ns;		/* device interrupt handlers (irq:irq_handler_entry/exit) */
	__u64 hardirqs;			/* handler runs: /proc/interrupts counts these per IRQ */
	/* NAPI polls of this CPU's backlog (RPS, netif_rx, loopback: no device), here and not in
	 * napi_polls: on loopback and a veth without GRO it polls about once per packet */
	__u64 backlog_polls;
	__u64 backlog_packets;
	__u64 backlog_full_polls;
	/* what was lost, counted so that no loss is silent: polls of NAPI instances beyond
	 * napi_polls' entries, profile samples beyond profile's, and the frames a cpumap dropped
	 * (its queue to the target CPU full at enqueue, or dropped by the target's kthread) */
	__u64 napi_map_full;
	__u64 profile_map_full;
	__u64 cpumap_enqueue_drops;
	__u64 cpumap_kthread_drops;
	/* receive calls the kprobe fallback could not count: their kretprobe found no arguments,
	 * which the in-flight map's LRU evicted (more threads inside receive calls at once than
	 * its entries). A call begun before the probes were attached is not among them: its
	 * return is not hooked (a kretprobe hooks the return at the function's entry) */
	__u64 recv_calls_lost;
	/* of softirq_ns, the vectors other than NET_RX run inside a receive kthread (cpumap, threaded
	 * NAPI: at its local_bh_enable or an interrupt's exit), which the scheduler counts as the
	 * kthread's time: on a sender's CPU, its TCP's pacing timers (HRTIMER) */
	__u64 kthread_softirq_ns;
	/* of net_rx_ns, the NET_RX softirqs a receive kthread ran (at its local_bh_enable or an
	 * interrupt's exit): the scheduler counts them as the kthread's time too. A cpumap
	 * kthread runs, after each batch, the backlog its own TCP filled through a veth (the ACKs
	 * of the flows it delivers): a fifth of its scheduler time in a lab flow steered to its
	 * reader's CPU */
	__u64 kthread_net_rx_ns;
	/* sampled timing: expiries of the sampler's clock for which the kernel ran no program (some
	 * kernels, while the CPU idles: withheld.bpf.h), counted from the timer itself and charged
	 * as ft_sample would have been (of `samples`) */
	__u64 samples_withheld;
	/* of them, those where what the CPU did is not known (a task was current, or a kernel
	 * before 6.11 has no bpf_net_context to tell NET_RX by): charged to nothing, nor counted in
	 * `samples` */
	__u64 samples_withheld_unknown;
	/* sampled timing: of `samples`, those charged to net_rx_ns (each with its weight there):
	 * what that figure rests on, counted one by one */
	__u64 net_rx_samples;
};

/* NAPI polls per CPU and NAPI instance (napi:napi_poll): where a device's receive work arrives.
 * A NIC queue's poll runs where its IRQ lands, or in its threaded NAPI kthread, or in a reader
 * that busy-polls; a veth's on the sender's CPU; the backlog (RPS, netif_rx, loopback) has no
 * device and keys as all zero. */
struct ft_napi_key {
	__u32 netns;		/* the device's network namespace (inode number; 0: no device) */
	__u32 ifindex;
	__u32 napi_id;		/* as skb->napi_id records it (0: not hashed) */
};

struct ft_napi_stats {
	__u64 polls;
	__u64 packets;		/* the polls' work: packets (or frames) the driver took in */
	__u64 full_polls;	/* polls that used their whole budget: the device had more waiting */
};

/* the PMU events besides LLC misses (llc_counters), each in a perf event array of its own;
 * ft_config.events has bit 1 << FT_EVENT_* set for those userspace opened */
enum ft_event {
	FT_EVENT_REFERENCES,	/* cache-references: LLC references (Intel LONGEST_LAT_CACHE.REFERENCE) */
	FT_EVENT_INSTRUCTIONS,
	FT_EVENT_CYCLES,
	FT_EVENTS,
};

/* kernel text the sampler tells receive contexts apart by: [start, end) from /proc/kallsyms */
enum ft_text {
	FT_TEXT_NET_RX,		/* net_rx_action: the NET_RX softirq */
	FT_TEXT_NAPI_THREAD,	/* napi_threaded_poll: the same NAPI work in a kthread (0 if absent) */
	FT_TEXT_SOFTIRQ,	/* handle_softirqs (__do_softirq before 6.10): any softirq vector */
	FT_TEXT_RPS_IPI,	/* net_rps_send_ipi: RPS kicking the CPUs it handed packets to */
	/* where the interrupted code can be while net_rps_send_ipi sends an IPI (a VM traps to the
	 * host on each: 6-8 us here): the sampler looks for net_rps_send_ipi on the stack only there */
	FT_TEXT_IPI_FIRST,
	FT_TEXT_IPI_LAST = FT_TEXT_IPI_FIRST + 6,
	FT_TEXT_PERF_HRTIMER,	/* perf_swevent_hrtimer: the cpu-clock event's timer function, whose
				 * expiries ft_sample_withheld looks at */
	FT_TEXT_RANGES,
};

/* how CPU time is measured */
enum ft_timing {
	FT_TIMING_EXACT,	/* clock reads at every boundary: softirq, skb, receive syscall */
	FT_TIMING_SAMPLED,	/* a cpu-clock sample per period, charged to what the CPU is doing */
};

/* sampled timing: the transports whose bytes and packets ft_skb_hint counts skb by skb
 * (ft_config.skb_count): UDP always, since no socket keeps a count of them; TCP where the kernel
 * refused the socket programs that count it from the sockets' own counters. FT_COUNT_TCP_SKBS:
 * TCP's skbs alone, their bytes left to the sockets (in windows, where a flow's few samples
 * cannot name the CPU its skbs go up the stack on) */
enum ft_count {
	FT_COUNT_TCP = 1,
	FT_COUNT_UDP = 2,
	FT_COUNT_TCP_SKBS = 4,
};

/* written into .rodata before load */
struct ft_config {
	__u32 llc_enabled;	/* a per-CPU counter was put in the llc_counters array */
	__u32 recv_flags_arg;	/* index of `flags` in tcp_recvmsg/udp_recvmsg (fallback hooks) */
	enum ft_timing timing;	/* 4 bytes, as __u32; typed so that its values reach the BTF */
	__u32 softirq_stacks;	/* softirqs run on the CPUs' irq stacks (x86_64, arm64; not under
				 * PREEMPT_RT): the sampler tells task context by the stack pointer */
	__u32 app_counters;	/* sampled timing: what a TCP reader got comes from the socket's own
				 * counters, no program runs per read (--app-hook counters) */
	__u32 profile_ranges;	/* steer profile: entries of profile_text (0: not profiling) */
	__u32 events;		/* 1 << FT_EVENT_* for each event array userspace filled */
	__u32 skb_count;	/* sampled timing: FT_COUNT_* bits */
	__u32 windows;		/* sampled timing in windows: the programs of struct ft_window count */
	__u32 irq_time_apart;	/* the kernel keeps interrupts' and softirqs' time out of tasks' run
				 * time (CONFIG_IRQ_TIME_ACCOUNTING; userspace tells it by struct
				 * irqtime in the kernel's BTF) */
	__s64 steal_off;	/* run_clock.bpf.h: KVM's steal_time from the run queue, in the
				 * per-CPU area (0: not known) */
	__u64 text[FT_TEXT_RANGES][2];
};

/* Sampled timing in windows (steer/trace/windows.py): the per-packet, per-read and per-interrupt
 * programs and the sampler are on their hooks for a window of each cycle only (a program on a
 * tracepoint costs its dispatch on every event even when it returns at once), and what they count
 * inside it stands for the whole cycle. Userspace opens a window after it attached them and closes
 * it before it takes them off, so that the counts cover exactly [open_ns, close). */
struct ft_window {
	__u64 open_ns;		/* bpf_ktime_get_ns() when this window opened */
	__u32 seq;		/* the windows opened so far */
	__u32 scale;		/* while open, what each event counts for: the cycle over the window;
				 * 0: closed */
};

/* steer profile. Kernel text is cut into ranges of one category each (userspace builds them from
 * /proc/kallsyms and its table of rules, steer/trace/profile.py); a sample's category is that of the
 * innermost frame of its kernel stack whose range has one. */
#define FT_CATEGORY_NONE	0	/* no rule for this function: its caller decides */
#define FT_CATEGORY_OTHER	1	/* no frame on the stack had a rule */

struct ft_text_category {
	__u64 start;		/* the range runs to the next entry's start; sorted by start */
	__u32 category;
	__u32 pad;
};

/* which side of the flow a profiled sample worked for */
enum ft_side {
	FT_SIDE_KERNEL,		/* NET_RX processing */
	FT_SIDE_KTHREAD,	/* a cpumap kthread's processing (steered flows) */
	FT_SIDE_APP,		/* the reader, inside its receive syscall */
};

struct ft_profile_key {
	struct ft_flow_key flow;	/* all zero: receive work no flow could be charged for */
	__u32 cpu;
	__u32 side;			/* enum ft_side, as __u32 */
	__u32 category;
};

struct ft_profile_value {
	__u64 samples;
	__u64 ns;		/* the samples' weights, as the flow's kernel_ns/app_ns take them */
};

/* --latency: how long a flow's received data waits in the host, from its skb reaching the stack
 * (netif_receive_skb) to the receive call that copies it to the reader. At most one skb per flow
 * every gate_ns is sampled (arrival time alone decides, not the reader: a sample never depends on
 * how full the queue is); its arrival waits in one of FT_LAT_SLOTS slots until a copy takes it. */
#define FT_LAT_SLOTS		16
#define FT_LAT_SUB		8	/* buckets per power of two: each ~1/8 of it wide */
#define FT_LAT_BUCKETS		256	/* 0-7 ns one each, then 8 per power of two to 2^34 ns */
#define FT_LAT_GATE_NS		100000	/* at first a sample every 100 us per flow, at most */
#define FT_LAT_GATE_MAX_NS	1000000000
#define FT_LAT_CALM		(4 * FT_LAT_SLOTS)
#define FT_LAT_TCP		(1ULL << 32)	/* a TCP slot's id: this bit and the sequence number */

struct ft_lat_slot {
	__u64 id;		/* 0: free; TCP: FT_LAT_TCP | the skb's first payload byte's sequence
				 * number; UDP: the skb's address */
	__u64 arrival_ns;
	__u64 queued_ns;	/* when it reached its socket's receive queue (0: not seen) */
};

/* a UDP socket's sampled datagrams, from their enqueue to the read that takes them: a socket
 * serves many peers, so each slot names its flow */
struct ft_lat_sock {
	struct ft_lat_slot slot[FT_LAT_SLOTS];
	struct ft_flow_key flow[FT_LAT_SLOTS];
	__u32 head;
	__u32 reader;		/* the thread that read it last (TCP and UDP): its wake-ups are the
				 * flow's */
};

struct ft_lat_flow {
	__u64 next_ns;		/* no sample before this arrival time */
	__u64 gate_ns;		/* between samples: doubles where a slot was taken before its read,
				 * halves again after FT_LAT_CALM reads without that */
	__u64 samples;		/* arrival-to-read delays in hist */
	__u64 lost;		/* sampled skbs whose slot was taken before a read took them */
	__u64 sum_ns;
	__u64 staged;		/* of the samples, those whose enqueue was seen: in hist_stack and
				 * hist_queue too */
	__u32 head;		/* the next slot to fill, modulo FT_LAT_SLOTS */
	__u32 calm;		/* samples read since the last one lost */
	struct ft_lat_slot slot[FT_LAT_SLOTS];
	__u64 wakes;		/* its reader's wake-ups by its data, in hist_wake */
	__u64 cross_wakes;	/* of those, from another CPU than the one the reader then ran on */
	__u64 wake_sum_ns;
	__u32 hist[FT_LAT_BUCKETS];		/* arrival to read */
	__u32 hist_stack[FT_LAT_BUCKETS];	/* arrival to the socket's receive queue */
	__u32 hist_queue[FT_LAT_BUCKETS];	/* the receive queue to the read */
	__u32 hist_wake[FT_LAT_BUCKETS];	/* the reader's wake-up to its running */
};

#endif /* __FLOWTRACE_H */
