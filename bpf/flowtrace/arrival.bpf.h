/* SPDX-License-Identifier: GPL-2.0 */
/* flowtrace, arrival: The arrival CPU: device interrupt handlers (a program pair per handler run, none per
 * packet) and NAPI polls (one program per poll, ~67 ns here: a NIC's poll takes in up to 64
 * packets, a veth's backlog about one). Every mode. */
#ifndef FT_ARRIVAL_BPF_H
#define FT_ARRIVAL_BPF_H

#include "common.bpf.h"
#include "maps.bpf.h"
#include "account.bpf.h"

/* Device interrupt handlers per CPU: where a NIC queue's interrupt lands is the arrival CPU, the
 * third CPU of a flow besides its softirq's and its reader's. One program pair per handler run,
 * none per packet. Handlers run with interrupts off and do not nest; time spent in them inside
 * a NET_RX softirq or a receive syscall stays part of that, as in /proc/stat. */
SEC("tp_btf/irq_handler_entry")
int BPF_PROG(ft_irq_handler_entry, int irq, struct irqaction *action)
{
	struct cpu_state *s = this_cpu_state();
	__u32 seq;

	if (s && window_scale(&seq)) {
		s->hardirq_start = bpf_ktime_get_ns();
		s->hardirq_window = seq;
	}
	return 0;
}

SEC("tp_btf/irq_handler_exit")
int BPF_PROG(ft_irq_handler_exit, int irq, struct irqaction *action, int ret)
{
	struct cpu_state *s = this_cpu_state();
	struct ft_cpu_stats *tot = totals();
	__u32 seq, scale = window_scale(&seq);

	if (!s || !tot || !s->hardirq_start)
		return 0;	/* attached while this handler was already running */
	/* a start from before this window (its exit ran after the last one closed) is not this run's */
	if (scale && s->hardirq_window == seq) {
		tot->hardirq_ns += (bpf_ktime_get_ns() - s->hardirq_start) * scale;
		tot->hardirqs += scale;
	}
	s->hardirq_start = 0;
	return 0;
}

/* preallocated per CPU: 512 x 24 bytes a CPU (3 MB on 256 CPUs), for the NICs' queues and the
 * veths polled by NAPI (with GRO or XDP on) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 512);
	__type(key, struct ft_napi_key);
	__type(value, struct ft_napi_stats);
} napi_polls SEC(".maps");

/* One program per NAPI poll: a NIC's takes in up to a budget of packets, a veth's with GRO tens,
 * but the backlog's (loopback, a veth without GRO) about one. So the backlog, which has no
 * device, only adds to this CPU's totals (an array slot), and the hash lookup is for devices. */
SEC("tp_btf/napi_poll")
int BPF_PROG(ft_napi_poll, struct napi_struct *napi, int work, int budget)
{
	struct ft_napi_stats zero = {};	/* a local: .rodata holds the configuration alone */
	struct ft_napi_key k = {};
	struct ft_napi_stats *v;
	struct ft_cpu_stats *tot;
	struct net_device *dev = napi->dev;
	int full = budget > 0 && work >= budget;	/* netpoll polls with budget 0 */
	__u32 seq, scale = window_scale(&seq);

	if (!scale)
		return 0;
	if (!dev) {
		tot = totals();
		if (tot) {
			tot->backlog_polls += scale;
			tot->backlog_packets += (work > 0 ? work : 0) * scale;
			tot->backlog_full_polls += full * scale;
		}
		return 0;
	}
	k.netns = BPF_CORE_READ(dev, nd_net.net, ns.inum);
	k.ifindex = BPF_CORE_READ(dev, ifindex);
	if (bpf_core_field_exists(napi->napi_id))
		k.napi_id = BPF_CORE_READ(napi, napi_id);
	v = bpf_map_lookup_elem(&napi_polls, &k);
	if (!v) {
		bpf_map_update_elem(&napi_polls, &k, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&napi_polls, &k);
		if (!v) {	/* more instances than entries: their polls are counted as lost */
			tot = totals();
			if (tot)
				tot->napi_map_full++;
			return 0;
		}
	}
	v->polls += scale;
	v->packets += (work > 0 ? work : 0) * scale;
	v->full_polls += full * scale;
	return 0;
}

#endif /* FT_ARRIVAL_BPF_H */
