// SPDX-License-Identifier: GPL-2.0
/* A truth for the benchmarks, not part of steer: each CPU's NET_RX softirq time, from brackets
 * of the softirq_entry and softirq_exit tracepoints, as libbpf-tools `softirqs` and bpftrace take
 * it, and what the brackets add to it themselves, measured beside them. The brackets read the
 * run clock (run_clock.bpf.h), as steer's exact mode does: the time the host took the vCPU away
 * (steal) is no CPU's NET_RX time; those tools count it. That steal inside the brackets is
 * counted apart, for a peer's reading to be held to them.
 *
 * A bracket holds part of its own cost: the entry program's return and the exit program's call,
 * from one clock read to the other (80-160 ns a softirq on this VM, retpolines; bpftrace's
 * brackets, with their hash map, ~400: 10-20% of a CPU's NET_RX time at 100,000 softirqs a
 * second). The clock is read last on entry and first on exit, so that part is one program's
 * return, the next one's call and a clock read. gap_start and gap_end, the same code on another
 * half of the record, attached before the bracket's on softirq_entry (outside the bracket), time
 * exactly that on every NET_RX softirq; userspace takes their mean off each bracket
 * (bench/peer.py).
 *
 * And the same brackets counted apart while a gate is open (truth.h): with steer's window map as
 * the gate, the NET_RX time inside the windows of its sampled timing, which the windows' figures
 * stand for. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "run_clock.bpf.h"
#include "truth.h"

char LICENSE[] SEC("license") = "GPL";

#define NET_RX_VEC	3	/* NET_RX_SOFTIRQ */

/* run_clock.bpf.h's STEAL_OFF, set by userspace (bench/peer.py) as for steer's programs */
const volatile __s64 steal_off = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct truth_cpu);
} truth_cpus SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct truth_gate);
} gate SEC(".maps");

static __always_inline int gate_open(void)
{
	__u32 zero = 0;
	struct truth_gate *g = bpf_map_lookup_elem(&gate, &zero);

	return g && g->scale;
}

static __always_inline struct truth_cpu *net_rx_record(unsigned int vec_nr)
{
	__u32 zero = 0;

	return vec_nr == NET_RX_VEC ? bpf_map_lookup_elem(&truth_cpus, &zero) : 0;
}

/* The truth's brackets and the gap pair beside them are the same two functions, on the two
 * halves of the record: a bracket opens with a clock read as its last work and closes with one as
 * its first, so that what it holds of its own is a return, a call and a clock read. The truth's
 * half also counts apart the brackets opened with the gate open; the gate is read before the
 * clock, and the gated count kept after it. */
static __always_inline void open_bracket(unsigned int vec_nr, int gap)
{
	int gated = !gap && gate_open();
	struct truth_cpu *c = net_rx_record(vec_nr);
	struct truth_steal_in *s;
	struct truth_bracket *b;

	if (!c)
		return;
	b = gap ? &c->gap : &c->net_rx;
	s = gap ? &c->gap_steal : &c->steal;
	b->start = bpf_ktime_get_ns();
	s->start = cpu_steal_ns(steal_off);
	b->start -= s->start;	/* run_clock_ns(), with its steal kept */
	if (!gap)
		c->gated.start = gated ? b->start : 0;
}

static __always_inline void close_bracket(unsigned int vec_nr, int gap)
{
	__u64 now = bpf_ktime_get_ns(), steal = cpu_steal_ns(steal_off);
	struct truth_cpu *c = net_rx_record(vec_nr);
	struct truth_steal_in *s;
	struct truth_bracket *b;

	now -= steal;	/* run_clock_ns() */
	if (!c)
		return;
	b = gap ? &c->gap : &c->net_rx;
	s = gap ? &c->gap_steal : &c->steal;
	if (!b->start)
		return;
	b->ns += now - b->start;
	if (steal > s->start)
		s->ns += steal - s->start;
	b->count++;
	if (!gap) {
		c->landed.count += c->landed.open;
		if (c->polled.start)
			c->landed.polled += c->landed.open;
		c->landed.open = 0;
	}
	if (!gap && c->polled.start) {
		c->polled.ns += now - b->start;
		c->polled.count++;
		c->polled.start = 0;
	}
	b->start = 0;
	if (!gap && c->gated.start) {
		c->gated.ns += now - c->gated.start;
		c->gated.count++;
		c->gated.start = 0;
	}
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(truth_entry, unsigned int vec_nr)
{
	open_bracket(vec_nr, 0);
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(truth_exit, unsigned int vec_nr)
{
	close_bracket(vec_nr, 0);
	return 0;
}

/* Which brackets took packets in: where RPS hands a CPU's packets to another, the NET_RX
 * softirqs of the CPU that took them off the device (here: the sender's, through the veth)
 * only send the other CPU an IPI, and take none in. The poll's tracepoint fires as it ends,
 * inside the bracket, so its cost (a lookup and a store) sits in the bracket's time. */
SEC("tp_btf/napi_poll")
int BPF_PROG(truth_poll, struct napi_struct *napi, int work, int budget)
{
	__u32 zero = 0;
	struct truth_cpu *c = bpf_map_lookup_elem(&truth_cpus, &zero);

	if (c && c->net_rx.start && work > 0)
		c->polled.start = 1;
	return 0;
}

/* the return of one program and the call of the next on the same tracepoint, timed */
SEC("tp_btf/softirq_entry")
int BPF_PROG(gap_start, unsigned int vec_nr)
{
	open_bracket(vec_nr, 1);
	return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(gap_end, unsigned int vec_nr)
{
	close_bracket(vec_nr, 1);
	return 0;
}

/* For the test that holds the run clock's live steal to /proc/stat
 * (tests/live/test_run_clock_live.py); the benchmarks do not attach it. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct truth_steal);
} truth_steals SEC(".maps");

SEC("tp_btf/sched_switch")
int BPF_PROG(truth_steal_read, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct truth_steal *t;
	__u32 zero = 0;
	struct rq *rq;

	if (!bpf_core_field_exists(struct rq, prev_steal_time_rq))
		return 0;
	rq = task->se.cfs_rq->rq;
	t = bpf_map_lookup_elem(&truth_steals, &zero);
	if (!rq || !t)
		return 0;
	t->live = steal_off ? live_steal_ns(rq, steal_off) : 0;
	t->counted = rq->prev_steal_time_rq;
	return 0;
}

/* For the test of the sampler's clock (tests/live/test_withheld_live.py): each CPU's expiries of
 * the timer of the perf events that run the program truth_clock's prog_id (steer's ft_sample),
 * counted as they begin, whether perf then runs that program or not. And, with the brackets in
 * the same object, those that began inside a NET_RX softirq: the accuracy matrix holds the
 * sampled NET_RX to them count for count, apart from where the clock lands (in this VM, at
 * 9,973 Hz, 31% short to 17% over NET_RX's share of the time: docs/testing.md). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct truth_clock);
} truth_clock SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} truth_expiries SEC(".maps");

SEC("tp_btf/hrtimer_expire_entry")
int BPF_PROG(truth_clock_expiry, struct hrtimer *timer, ktime_t *now)
{
	struct truth_clock *c;
	struct truth_cpu *cpu;
	struct perf_event *ev;
	__u32 zero = 0;
	__u64 *n;

	c = bpf_map_lookup_elem(&truth_clock, &zero);
	if (!c || !c->function || (__u64)timer->function != c->function)
		return 0;
	ev = (void *)timer - bpf_core_field_offset(struct perf_event, hw.hrtimer);
	if (BPF_CORE_READ(ev, prog, aux, id) != c->prog_id)
		return 0;
	n = bpf_map_lookup_elem(&truth_expiries, &zero);
	if (n)
		(*n)++;
	cpu = bpf_map_lookup_elem(&truth_cpus, &zero);
	if (cpu && cpu->net_rx.start)
		cpu->landed.open++;
	return 0;
}
