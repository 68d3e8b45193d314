// SPDX-License-Identifier: GPL-2.0
/* A truth for the benchmarks, not part of steer: each CPU's NET_RX softirq time, from brackets
 * of the softirq_entry and softirq_exit tracepoints, as libbpf-tools `softirqs` and bpftrace take
 * it, and what the brackets add to it themselves, measured beside them.
 *
 * A bracket holds part of its own cost: the entry program's return and the exit program's call,
 * from one clock read to the other (~60 ns a softirq on this VM, retpolines; bpftrace's brackets,
 * with their hash map, several times that: 10-25% of a CPU's NET_RX time at 100,000 softirqs a
 * second). The clock is read last on entry and first on exit, so that part is one program's
 * return and the next one's call. gap_start and gap_end, a pair shaped like the bracket's two
 * programs and attached before it on softirq_entry (outside the bracket), time exactly that on
 * every NET_RX softirq; userspace takes their mean off each bracket (bench/peer.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "truth.h"

char LICENSE[] SEC("license") = "GPL";

#define NET_RX_VEC	3	/* NET_RX_SOFTIRQ */

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct truth_cpu);
} truth_cpus SEC(".maps");

SEC("tp_btf/softirq_entry")
int BPF_PROG(truth_entry, unsigned int vec_nr)
{
	__u32 zero = 0;
	struct truth_cpu *c;

	if (vec_nr != NET_RX_VEC)
		return 0;
	c = bpf_map_lookup_elem(&truth_cpus, &zero);
	if (c)
		c->start = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(truth_exit, unsigned int vec_nr)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 zero = 0;
	struct truth_cpu *c;

	if (vec_nr != NET_RX_VEC)
		return 0;
	c = bpf_map_lookup_elem(&truth_cpus, &zero);
	if (!c || !c->start)
		return 0;
	c->ns += now - c->start;
	c->count++;
	c->start = 0;
	return 0;
}

/* the return of one program and the call of the next on the same tracepoint, timed */
SEC("tp_btf/softirq_entry")
int BPF_PROG(gap_start, unsigned int vec_nr)
{
	__u32 zero = 0;
	struct truth_cpu *c;

	if (vec_nr != NET_RX_VEC)
		return 0;
	c = bpf_map_lookup_elem(&truth_cpus, &zero);
	if (c)
		c->gap_start = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(gap_end, unsigned int vec_nr)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 zero = 0;
	struct truth_cpu *c;

	if (vec_nr != NET_RX_VEC)
		return 0;
	c = bpf_map_lookup_elem(&truth_cpus, &zero);
	if (!c || !c->gap_start)
		return 0;
	c->gap_ns += now - c->gap_start;
	c->gap_count++;
	c->gap_start = 0;
	return 0;
}
