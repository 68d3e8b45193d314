/* SPDX-License-Identifier: GPL-2.0 */
/* truth.bpf.c's records, as bench/peer.py and the tests read them. The per-CPU one: nineteen
 * __u64, in this order. */
#ifndef __TRUTH_H
#define __TRUTH_H

struct truth_bracket {
	__u64 start;	/* bpf_ktime_get_ns() at the open bracket's start; 0: none open */
	__u64 ns;	/* the closed brackets' time */
	__u64 count;	/* the closed brackets */
};

struct truth_landing {
	__u64 open;	/* the expiries inside the open bracket */
	__u64 count;	/* inside closed brackets */
	__u64 polled;	/* of count, inside brackets that took packets in (truth_poll) */
};

/* the time the host took the CPU away (run_clock.bpf.h's steal) inside brackets: what a clock
 * that counts it, such as a peer tool's, holds beyond the brackets' time */
struct truth_steal_in {
	__u64 start;	/* the steal clock at the open bracket's start */
	__u64 ns;	/* inside the closed brackets */
};

struct truth_cpu {
	struct truth_bracket net_rx;	/* softirq_entry to softirq_exit of each NET_RX softirq */
	struct truth_bracket gap;	/* from one program's last clock read to the next one's first */
	struct truth_bracket gated;	/* the NET_RX softirqs that began while the gate was open */
	/* with truth_poll attached, the NET_RX softirqs in which a NAPI poll (a device's or the
	 * backlog's) took packets in; start: the open one has */
	struct truth_bracket polled;
	/* with truth_clock_expiry attached in the same object, the sampler's clock expiries that
	 * began inside a NET_RX bracket: where its samples landed, whatever steer made of them */
	struct truth_landing landed;
	struct truth_steal_in steal;	/* inside net_rx */
	struct truth_steal_in gap_steal;	/* inside gap: the same code, so the same cost */
};

/* The gate: where userspace gives it a map of this shape that another object writes (steer's
 * struct ft_window, whose scale is non-zero while a window is open), the brackets that open while
 * scale is set are also counted in `gated`. Left alone, it stays shut. */
struct truth_gate {
	__u64 opened;
	__u32 seq;
	__u32 scale;
};

/* the run clock's two steal figures (run_clock.bpf.h) as the last sched_switch on a CPU read them:
 * the live one through STEAL_OFF, and the run queue's count */
struct truth_steal {
	__u64 live;
	__u64 counted;
};

/* truth_clock_expiry's timer: its function's address (perf_swevent_hrtimer, from kallsyms) and
 * the id of the program its perf events run */
struct truth_clock {
	__u64 function;
	__u32 prog_id;
	__u32 pad;
};

#endif /* __TRUTH_H */
