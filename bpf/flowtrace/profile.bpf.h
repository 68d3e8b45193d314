/* SPDX-License-Identifier: GPL-2.0 */
/* flowtrace, profile: steer profile's half of the sampler: each sample of receive work charged
 * to its flow, side and the category of kernel text it landed in (Cai et al., SIGCOMM'21). Off
 * (one range, nothing looked up) unless userspace loads the category ranges. */
#ifndef FT_PROFILE_BPF_H
#define FT_PROFILE_BPF_H

#include "common.bpf.h"
#include "account.bpf.h"
#include "stack.bpf.h"

/* steer profile: the category ranges of kernel text (sized by userspace: 1 entry when not
 * profiling) and the samples per (flow, CPU, side, category) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ft_text_category);
} profile_text SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct ft_profile_key);
	__type(value, struct ft_profile_value);
} profile SEC(".maps");

/* 2^FT_SEARCH_STEPS ranges at most: a distribution kernel with its modules has ~100k functions,
 * merged into far fewer ranges */
#define FT_SEARCH_STEPS	20

/* the category of the range that IP falls in: a binary search for the last start <= ip */
static __always_inline __u32 text_category(__u64 ip)
{
	__u32 lo = 0, hi = cfg.profile_ranges, mid, j;
	struct ft_text_category *e;

	for (j = 0; j < FT_SEARCH_STEPS; j++) {
		if (lo + 1 >= hi)
			break;
		mid = lo + (hi - lo) / 2;
		e = bpf_map_lookup_elem(&profile_text, &mid);
		if (!e)
			return FT_CATEGORY_NONE;
		if (e->start <= ip)
			lo = mid;
		else
			hi = mid;
	}
	e = bpf_map_lookup_elem(&profile_text, &lo);
	return e && e->start <= ip ? e->category : FT_CATEGORY_NONE;
}

/* the category of the sampled kernel stack: its innermost frame with one (Cai et al. charge a
 * sample to the function it landed in; a helper without a rule, such as a usercopy check, is
 * charged to the caller that has one) */
static __always_inline __u32 stack_category(struct bpf_perf_event_data *ctx)
{
	__u64 *ips;
	long n = sampled_frames(ctx, &ips);
	__u32 c;
	int i;

	if (!n)
		return FT_CATEGORY_OTHER;
	for (i = 0; i < FT_STACK_DEPTH; i++) {
		if (i >= n)
			break;
		c = text_category(ips[i]);
		if (c != FT_CATEGORY_NONE)
			return c;
	}
	return FT_CATEGORY_OTHER;
}

static __always_inline void profile_sample(struct bpf_perf_event_data *ctx,
					   const struct ft_flow_key *flow, __u32 cpu, __u32 side,
					   __u64 weight)
{
	struct ft_profile_key pk = {};
	struct ft_profile_value *v, fresh = {};

	if (flow)
		__builtin_memcpy(&pk.flow, flow, sizeof(pk.flow));
	pk.cpu = cpu;
	pk.side = side;
	pk.category = stack_category(ctx);
	v = bpf_map_lookup_elem(&profile, &pk);
	if (!v) {
		/* a full map (PROFILE_ENTRIES in tracer.py: 32768 counts of (flow, CPU, side,
		 * category)) drops the sample, and counts it */
		bpf_map_update_elem(&profile, &pk, &fresh, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&profile, &pk);
		if (!v) {
			struct ft_cpu_stats *tot = totals();

			if (tot)
				tot->profile_map_full++;
			return;
		}
	}
	/* only this CPU writes an entry with its number in the key, and a sample does not nest */
	v->samples++;
	v->ns += weight;
}

#endif /* FT_PROFILE_BPF_H */
