// SPDX-License-Identifier: GPL-2.0
/* The measuring floor of bench/event_cost.py: what a tracing program costs on this host before it
 * does anything (an empty program), and with one clock read, on the busiest tracepoint steer uses.
 * The per-event cost of steer's programs is read against these two. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "floor.h"

char LICENSE[] SEC("license") = "GPL";

SEC("tp_btf/softirq_entry")
int BPF_PROG(floor_empty, unsigned int vec_nr)
{
	return 0;
}

__u64 sink;

SEC("tp_btf/softirq_entry")
int BPF_PROG(floor_clock, unsigned int vec_nr)
{
	sink = bpf_ktime_get_ns();
	return 0;
}
