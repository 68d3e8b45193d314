/* SPDX-License-Identifier: GPL-2.0 */
/* flowtrace, account: Accounting helpers every mode uses: this CPU's totals and context, the PMU counters'
 * current values, and the (flow, CPU) entry, created on first use. No program of its own. */
#ifndef FT_ACCOUNT_BPF_H
#define FT_ACCOUNT_BPF_H

#include "common.bpf.h"
#include "maps.bpf.h"

/* .rodata must hold the configuration alone (userspace writes it whole), so map keys are locals */
static __always_inline struct ft_cpu_stats *totals(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&cpu_totals, &zero);
}

static __always_inline struct cpu_state *this_cpu_state(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&cpu_states, &zero);
}

static __always_inline __u64 llc_now(void)
{
	struct bpf_perf_event_value v = {};

	if (!cfg.llc_enabled)
		return 0;
	if (bpf_perf_event_read_value(&llc_counters, BPF_F_CURRENT_CPU, &v, sizeof(v)))
		return 0;
	return v.counter;
}

/* EVENT's counter on this CPU (0 if userspace did not open it) */
static __always_inline __u64 event_now(void *counters, enum ft_event event)
{
	struct bpf_perf_event_value v = {};

	if (!(cfg.events & (1u << event)))
		return 0;
	if (bpf_perf_event_read_value(counters, BPF_F_CURRENT_CPU, &v, sizeof(v)))
		return 0;
	return v.counter;
}

/* the other events since the previous sample on this CPU, into D (0 at the first) */
static __always_inline void events_since_sample(struct cpu_state *s, __u64 d[FT_EVENTS])
{
	__u64 now[FT_EVENTS];
	int i;

	now[FT_EVENT_REFERENCES] = event_now(&ref_counters, FT_EVENT_REFERENCES);
	now[FT_EVENT_INSTRUCTIONS] = event_now(&instruction_counters, FT_EVENT_INSTRUCTIONS);
	now[FT_EVENT_CYCLES] = event_now(&cycle_counters, FT_EVENT_CYCLES);
	for (i = 0; i < FT_EVENTS; i++) {
		d[i] = s->sample_events[i] ? now[i] - s->sample_events[i] : 0;
		s->sample_events[i] = now[i];
	}
}

/* the (flow, this CPU) entry, created on first use */
static __always_inline struct ft_flow_stats *flow_entry(const struct ft_flow_key *k, __u32 cpu,
							struct ft_cpu_stats *tot)
{
	struct ft_flow_cpu_key fk = {};
	struct ft_flow_stats *st, empty = {};

	__builtin_memcpy(&fk.flow, k, sizeof(fk.flow));
	fk.cpu = cpu;
	st = bpf_map_lookup_elem(&flows, &fk);
	if (st)
		return st;
	if (bpf_map_update_elem(&flows, &fk, &empty, BPF_NOEXIST) == 0)
		__sync_fetch_and_add(&tot->flow_inserts, 1);
	st = bpf_map_lookup_elem(&flows, &fk);
	if (!st)
		__sync_fetch_and_add(&tot->flow_failures, 1);
	return st;
}

static __always_inline struct ft_window *this_window(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&windows, &zero);
}

/* What an event counts for: 1 without windows; in a window, the cycle over the window; 0 between
 * windows (a program still running as userspace takes it off its hook). The open window's seq
 * into *SEQ (0 without windows). */
static __always_inline __u32 window_scale(__u32 *seq)
{
	struct ft_window *w;

	*seq = 0;
	if (!cfg.windows)
		return 1;
	w = this_window();
	if (!w)
		return 0;
	*seq = w->seq;
	return w->scale;
}

/* sampled timing: whether ft_skb_hint counts the skbs of transport PROTO (cfg.skb_count; their
 * bytes too but for FT_COUNT_TCP_SKBS) */
static __always_inline int skb_counted_proto(__u8 proto)
{
	return cfg.skb_count & (proto == IPPROTO_TCP ? FT_COUNT_TCP | FT_COUNT_TCP_SKBS :
						       FT_COUNT_UDP);
}

#endif /* FT_ACCOUNT_BPF_H */
