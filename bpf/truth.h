/* SPDX-License-Identifier: GPL-2.0 */
/* truth.bpf.c's per-CPU record, as bench/peer.py reads it (six __u64, in this order). */
#ifndef __TRUTH_H
#define __TRUTH_H

struct truth_bracket {
	__u64 start;	/* bpf_ktime_get_ns() at the open bracket's start; 0: none open */
	__u64 ns;	/* the closed brackets' time */
	__u64 count;	/* the closed brackets */
};

struct truth_cpu {
	struct truth_bracket net_rx;	/* softirq_entry to softirq_exit of each NET_RX softirq */
	struct truth_bracket gap;	/* from one program's last clock read to the next one's first */
};

#endif /* __TRUTH_H */
