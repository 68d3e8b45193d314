/* SPDX-License-Identifier: GPL-2.0 */
/* truth.bpf.c's per-CPU record, as bench/peer.py reads it. */
#ifndef __TRUTH_H
#define __TRUTH_H

struct truth_cpu {
	__u64 start;	/* bpf_ktime_get_ns() at the open bracket's start; 0: none open */
	__u64 ns;	/* the closed brackets' time */
	__u64 count;	/* the closed brackets */
	__u64 gap_start;	/* gap_start's clock read, for gap_end */
	__u64 gap_ns;		/* from one program's last clock read to the next one's first */
	__u64 gap_count;
};

#endif /* __TRUTH_H */
