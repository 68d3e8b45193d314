/* SPDX-License-Identifier: GPL-2.0 */
/* flowtrace, stack: the kernel stack a cpu-clock sample interrupted, read into this CPU's
 * scratch: where sampled timing looks for NET_RX, and what steer profile categorises. */
#ifndef FT_STACK_BPF_H
#define FT_STACK_BPF_H

#include "common.bpf.h"

/* frames of the interrupted kernel stack looked at: net_rx_action sits ~15-25 frames below the
 * deepest TCP function, and a softirq that interrupted a syscall adds the syscall's frames below */
#define FT_STACK_DEPTH	24

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64[FT_STACK_DEPTH]);
} stack_scratch SEC(".maps");

/* the interrupted kernel stack, innermost frame first, in this CPU's scratch: its frame count
 * (0 where it could not be taken) */
static __always_inline long sampled_frames(struct bpf_perf_event_data *ctx, __u64 **ips)
{
	__u32 zero = 0;
	long n;

	*ips = bpf_map_lookup_elem(&stack_scratch, &zero);
	if (!*ips)
		return 0;
	n = bpf_get_stack(ctx, *ips, FT_STACK_DEPTH * sizeof(__u64), 0);
	return n > 0 ? n / sizeof(__u64) : 0;
}

#endif /* FT_STACK_BPF_H */
