// SPDX-License-Identifier: GPL-2.0
/* flowtrace: per-flow receive accounting.
 *
 * Kernel side: the time between consecutive netif_receive_skb events on a CPU is charged to the
 * flow of the earlier skb, the time before the first skb of a NET_RX softirq to the first skb, and
 * the tail to the last one, so that the flows' time plus the unattributed rest is exactly the CPU's
 * NET_RX time. Steered packets run up the stack in a cpumap kthread instead; that context is
 * bracketed the same way, from its first skb or its xdp_cpumap_kthread event until its next event,
 * softirq or context switch.
 *
 * Application side: sock_recv_length (kernel >= 6.3; before it the exit of tcp_recvmsg and
 * udp(v6)_recvmsg, by fexit or kretprobe) names the socket and the bytes; the receive syscall
 * around it gives the on-CPU time (segments split at sched_switch), minus the softirq time that
 * ran nested inside it, which the kernel side already counts.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "flowtrace.h"
#include "protocols.bpf.h"

char LICENSE[] SEC("license") = "GPL";

#define NET_RX_SOFTIRQ	3	/* enum in include/linux/interrupt.h; stable since 2.6 */
#define AF_INET		2
#define AF_INET6	10
#define MSG_PEEK	2

/* receive syscalls whose time is charged to the socket that sock_recv_length names */
#if defined(__TARGET_ARCH_x86)
#define NR_read		0
#define NR_readv	19
#define NR_recvfrom	45
#define NR_recvmsg	47
#define NR_recvmmsg	299
#elif defined(__TARGET_ARCH_arm64)
#define NR_read		63
#define NR_readv	65
#define NR_recvfrom	207
#define NR_recvmsg	212
#define NR_recvmmsg	243
#else
#error "receive syscall numbers are not known for this architecture"
#endif

const volatile struct ft_config cfg = {};

/* the bound is a load-time setting (steer --max-flows); LRU so a flood of flows evicts old ones
 * instead of failing, and userspace counts evictions as inserts minus live entries */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct ft_flow_cpu_key);
	__type(value, struct ft_flow_stats);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ft_cpu_stats);
} cpu_totals SEC(".maps");

/* one perf counter (LLC misses) per CPU, filled by userspace when a PMU exists */
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} llc_counters SEC(".maps");

/* the other events (enum ft_event), per CPU likewise; read by the sampler only */
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} ref_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} instruction_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} cycle_counters SEC(".maps");

/* what the current receive context on this CPU is charging to */
struct cpu_state {
	__u64 softirq_start;	/* start of the running softirq (any vector) */
	__u64 mark;		/* last boundary of the NET_RX or kthread interval */
	__u64 llc_mark;
	__u64 softirq_llc_start;
	__u64 kthread_start;	/* start of the running cpumap batch or threaded NAPI run */
	__u64 hardirq_start;	/* the running interrupt handler's start (handlers do not nest) */
	/* sampled timing: the network header of the last skb that went up the stack here (skb->data
	 * moves on as the layers pull their headers; the buffer stays) */
	__u64 hint_data;
	__u32 hint_len;
	__u32 hint_headlen;
	__u16 hint_proto;	/* Ethernet protocol, network order */
	__u8 skip_next;		/* the slot of skip_hash the next uncounted flow takes */
	__u8 hint_pad[1];
	/* sampled timing: skb->hash of the last two flows parsed whose transport is not counted
	 * here (0: none): two, because a CPU that takes in a flow's data also takes in the ACKs of
	 * what it sends, one skb of each in turn */
	__u32 skip_hash[2];
	__u64 sample_llc;	/* sampled timing: the LLC counter at the previous sample */
	__u64 sample_events[FT_EVENTS];	/* and the other events' */
	__u64 clock_ns;		/* sampled timing: bpf_ktime_get_ns() at the last sample, a clock
				 * good to one period for last_seen_ns (tracing programs may not
				 * call bpf_ktime_get_coarse_ns) */
	struct ft_flow_key cur;
	__u8 ctx;		/* CTX_* */
	__u8 cur_valid;		/* cur holds the flow of the last skb */
	__u8 skb_counted;	/* the last event counted an rx_skb for cur on this CPU */
	__u8 resume_ctx;	/* CTX_NAPI_THREAD: the softirq running interrupted that context */
	__u8 pad[4];
};

#define CTX_NONE	0
#define CTX_NET_RX	1
#define CTX_KTHREAD	2	/* a cpumap kthread: steered work, charged as kthread time */
#define CTX_NAPI_THREAD	3	/* a threaded NAPI kthread: the NET_RX work itself, out of softirq */

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_state);
} cpu_states SEC(".maps");

/* per reader thread: the receive syscall in progress */
struct recv_state {
	__u64 seg_start;	/* start of the current on-CPU segment, 0 while switched out */
	__u64 softirq_snap;	/* this CPU's softirq_ns at seg_start */
	__u64 softirq_llc_snap;
	__u64 llc_snap;
	__u64 acc_ns;
	__u64 acc_nested_ns;
	__u64 acc_llc;
	struct ft_flow_key flow;
	__u8 in_recv;
	__u8 have_flow;
	__u8 pad[6];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct recv_state);
} readers SEC(".maps");

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

/* sampled timing: whether ft_skb_hint counts the skbs of transport PROTO (cfg.skb_count) */
static __always_inline int skb_counted_proto(__u8 proto)
{
	return cfg.skb_count & (proto == IPPROTO_TCP ? FT_COUNT_TCP : FT_COUNT_UDP);
}

/* Where a flow's packets come in (device, namespace, RX queue, NAPI instance), for its NIC's
 * locality. The fields that depend on the kernel's configuration are read through flavours that
 * CO-RE checks: sk_rx_dst_ifindex (5.18+; an input route cached by an established socket),
 * sk_napi_id and skb->napi_id (CONFIG_NET_RX_BUSY_POLL), skc_rx_queue_mapping (CONFIG_XPS). */
struct sock___rx {
	int sk_rx_dst_ifindex;
	unsigned int sk_napi_id;
} __attribute__((preserve_access_index));

/* sk_rx_queue_mapping is a macro for this field of sock_common (4.18+) */
struct sock_common___rx {
	unsigned short skc_rx_queue_mapping;
} __attribute__((preserve_access_index));

struct sk_buff___rx {
	unsigned int napi_id;
} __attribute__((preserve_access_index));

#define NO_QUEUE_MAPPING 0xffff	/* sk_rx_queue_mapping before any packet recorded one */

/* at a socket flush: no per-packet work in the default mode */
static __always_inline void note_rx_path_sk(struct ft_flow_stats *st, struct sock *sk)
{
	struct sock___rx *x = (void *)sk;
	struct sock_common___rx *common = (void *)sk;
	int ifindex = 0;
	__u16 q;

	if (bpf_core_field_exists(x->sk_rx_dst_ifindex))
		ifindex = BPF_CORE_READ(x, sk_rx_dst_ifindex);
	if (ifindex <= 0)
		return;	/* no input route cached (yet, or a UDP socket): keep what was known */
	st->rx_ifindex = ifindex;
	st->rx_netns = BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
	if (bpf_core_field_exists(x->sk_napi_id))
		st->rx_napi_id = BPF_CORE_READ(x, sk_napi_id);
	if (bpf_core_field_exists(common->skc_rx_queue_mapping)) {
		q = BPF_CORE_READ(common, skc_rx_queue_mapping);
		st->rx_queue = q == NO_QUEUE_MAPPING ? 0 : q + 1;
	}
}

/* at netif_receive_skb, where the stack counts the skb: the device it arrived on (a VLAN's or a
 * bond's lower device; userspace resolves upper devices to it), read again only when the queue
 * changed, so a GRO batch costs one load */
static __always_inline void note_rx_path_skb(struct ft_flow_stats *st, struct sk_buff *skb)
{
	struct sk_buff___rx *x = (void *)skb;
	__u16 queue = skb->queue_mapping;
	struct net_device *dev;

	if (st->rx_ifindex && st->rx_queue == queue)
		return;
	dev = skb->dev;
	if (!dev)
		return;
	st->rx_ifindex = BPF_CORE_READ(dev, ifindex);
	st->rx_netns = BPF_CORE_READ(dev, nd_net.net, ns.inum);
	st->rx_queue = queue;
	if (bpf_core_field_exists(x->napi_id))
		st->rx_napi_id = BPF_CORE_READ(x, napi_id);
}

/* parse the network and transport headers at DATA, an skb's data of LEN bytes (HEADLEN of them
 * linear) and Ethernet protocol ETH_PROTO (netif_receive_skb runs after eth_type_trans, before the
 * network header offset is reset). Returns 0 and fills the key and the transport payload length,
 * or -1 for anything that is not TCP/UDP over IPv4/IPv6. */
static __always_inline int headers_flow(unsigned char *data, __u32 len, __u32 headlen,
					__u16 eth_proto, struct ft_flow_key *k, __u64 *payload)
{
	__u32 l4off;
	__u8 proto;
	int frag_tail = 0;

	if (eth_proto == ETH_P_IP) {
		struct iphdr iph;
		__u32 tot;

		if (headlen < sizeof(iph) || bpf_probe_read_kernel(&iph, sizeof(iph), data))
			return -1;
		if (iph.version != 4 || iph.ihl < 5)
			return -1;
		l4off = iph.ihl * 4;
		proto = iph.protocol;
		frag_tail = (bpf_ntohs(iph.frag_off) & IP_OFFSET) != 0;
		tot = bpf_ntohs(iph.tot_len);
		/* short frames carry Ethernet padding; tot_len 0 means BIG TCP: trust skb->len */
		if (tot && tot < len)
			len = tot;
		__builtin_memcpy(k->saddr, &iph.saddr, 4);
		__builtin_memcpy(k->daddr, &iph.daddr, 4);
		k->family = 4;
	} else if (eth_proto == ETH_P_IPV6) {
		struct ipv6hdr ip6;
		__u32 plen;
		int i;

		if (headlen < sizeof(ip6) || bpf_probe_read_kernel(&ip6, sizeof(ip6), data))
			return -1;
		if (ip6.version != 6)
			return -1;
		plen = bpf_ntohs(ip6.payload_len);
		if (plen && plen + sizeof(ip6) < len)
			len = plen + sizeof(ip6);
		l4off = sizeof(ip6);
		proto = ip6.nexthdr;
		for (i = 0; i < MAX_IPV6_EXT; i++) {
			__u8 ext[8];

			if (proto != IPPROTO_HOPOPTS && proto != IPPROTO_ROUTING &&
			    proto != IPPROTO_DSTOPTS && proto != IPPROTO_FRAGMENT && proto != IPPROTO_AH)
				break;
			if (l4off + 8 > headlen || bpf_probe_read_kernel(ext, 8, data + l4off))
				return -1;
			if (proto == IPPROTO_FRAGMENT) {
				frag_tail = ((ext[2] << 8 | ext[3]) & 0xFFF8) != 0;
				l4off += 8;
			} else {
				l4off += ipv6_ext_len(proto, ext[1]);
			}
			proto = ext[0];
		}
		__builtin_memcpy(k->saddr, &ip6.saddr, 16);
		__builtin_memcpy(k->daddr, &ip6.daddr, 16);
		k->family = 6;
	} else {
		return -1;
	}

	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return -1;
	k->proto = proto;
	if (frag_tail) {
		/* a non-first fragment has no ports: its bytes go to the port-less key */
		*payload = len > l4off ? len - l4off : 0;
		return 0;
	}
	if (proto == IPPROTO_TCP) {
		__u8 th[13];
		__u32 thl;

		if (l4off + sizeof(th) > headlen || bpf_probe_read_kernel(th, sizeof(th), data + l4off))
			return -1;
		k->sport = th[0] << 8 | th[1];
		k->dport = th[2] << 8 | th[3];
		thl = (th[12] >> 4) * 4;
		*payload = len > l4off + thl ? len - l4off - thl : 0;
	} else {
		__u8 uh[4];

		if (l4off + 8 > headlen || bpf_probe_read_kernel(uh, sizeof(uh), data + l4off))
			return -1;
		k->sport = uh[0] << 8 | uh[1];
		k->dport = uh[2] << 8 | uh[3];
		*payload = len > l4off + 8 ? len - l4off - 8 : 0;
	}
	return 0;
}

/* an skb the program was handed (typed: its fields are read directly) */
static __always_inline int skb_flow(struct sk_buff *skb, struct ft_flow_key *k, __u64 *payload)
{
	return headers_flow(skb->data, skb->len, skb->len - skb->data_len, bpf_ntohs(skb->protocol),
			    k, payload);
}

/* the sampler's hint: what it needs to parse that skb's headers later, read while it is alive */
static __always_inline void set_hint(struct cpu_state *s, struct sk_buff *skb)
{
	s->hint_data = (__u64)skb->data;
	s->hint_len = skb->len;
	s->hint_headlen = skb->len - skb->data_len;
	s->hint_proto = skb->protocol;
}

/* the hinted skb's flow: its buffer may have been freed since, so a wrong or unparsable result is
 * possible (headers_flow reads with probe reads; the sampler then charges no flow) */
static __always_inline int hint_flow(struct cpu_state *s, struct ft_flow_key *k)
{
	__u64 payload;

	if (!s->hint_data)
		return -1;
	return headers_flow((unsigned char *)s->hint_data, s->hint_len, s->hint_headlen,
			    bpf_ntohs(s->hint_proto), k, &payload);
}

/* close the interval [mark, now] of this CPU's receive context: charge it to the current flow,
 * whose entry the caller may have looked up already (KNOWN) */
static __always_inline void charge_interval(struct cpu_state *s, struct ft_cpu_stats *tot,
					    __u32 cpu, __u64 now, __u64 llc,
					    struct ft_flow_stats *known)
{
	__u64 dt = now - s->mark;
	__u64 dllc = llc - s->llc_mark;
	struct ft_flow_stats *st = known;

	if (!st && s->cur_valid)
		st = flow_entry(&s->cur, cpu, tot);
	if (st) {
		if (s->ctx == CTX_KTHREAD)
			st->kthread_ns += dt;
		else
			st->kernel_ns += dt;
		st->llc_kernel += dllc;
		st->last_seen_ns = now;
	} else if (s->ctx != CTX_KTHREAD) {
		tot->net_rx_unattributed_ns += dt;
	} else {
		tot->kthread_unattributed_ns += dt;
	}
	tot->llc_kernel += dllc;
	s->mark = now;
	s->llc_mark = llc;
}

static __always_inline int same_flow(const struct ft_flow_key *a, const struct ft_flow_key *b)
{
	__u64 x[5], y[5];	/* sizeof(struct ft_flow_key) == 40 */
	int i;

	__builtin_memcpy(x, a, sizeof(x));
	__builtin_memcpy(y, b, sizeof(y));
	for (i = 0; i < 5; i++)
		if (x[i] != y[i])
			return 0;
	return 1;
}

/* cpumap kthreads are named "cpumap/<cpu>/map:<id>" (kernel/bpf/cpumap.c) */
static __always_inline int comm_is_cpumap(const char *comm)
{
	return comm[0] == 'c' && comm[1] == 'p' && comm[2] == 'u' && comm[3] == 'm' &&
	       comm[4] == 'a' && comm[5] == 'p' && comm[6] == '/';
}

/* threaded NAPI kthreads are named "napi/<dev>-<napi id>" (net/core/dev.c) */
static __always_inline int comm_is_napi(const char *comm)
{
	return comm[0] == 'n' && comm[1] == 'a' && comm[2] == 'p' && comm[3] == 'i' && comm[4] == '/';
}

/* the receive kthread the current task is: CTX_KTHREAD (cpumap), CTX_NAPI_THREAD or CTX_NONE */
static __always_inline __u8 kthread_ctx(const char *comm)
{
	if (comm_is_cpumap(comm))
		return CTX_KTHREAD;
	return comm_is_napi(comm) ? CTX_NAPI_THREAD : CTX_NONE;
}

static __always_inline __u8 current_kthread_ctx(void)
{
	char comm[8];

	bpf_get_current_comm(comm, sizeof(comm));
	return kthread_ctx(comm);
}

/* A receive kthread's context on this CPU: the cpumap kthread's or a threaded NAPI poller's (CTX),
 * open from its first skb or when it comes on the CPU (and for cpumap at its xdp_cpumap_kthread
 * event), closed when it leaves the CPU or runs a softirq (at local_bh_enable), and for cpumap
 * when it next reaches that event: since 6.14 the event comes before its batch goes up the stack
 * (through GRO), so an interval that only the next event closed would span the kthread's sleep. */
static __always_inline void open_kthread(struct cpu_state *s, __u8 ctx, __u64 now, __u64 llc)
{
	s->ctx = ctx;
	s->cur_valid = 0;	/* the head of the interval goes to its first skb */
	s->kthread_start = now;
	s->mark = now;
	s->llc_mark = llc;
}

static __always_inline void close_kthread(struct cpu_state *s, struct ft_cpu_stats *tot, __u64 now)
{
	__u64 dt = now - s->kthread_start;

	if (s->ctx == CTX_KTHREAD) {
		tot->kthread_ns += dt;
	} else if (s->ctx == CTX_NAPI_THREAD) {
		tot->net_rx_ns += dt;
		tot->napi_thread_ns += dt;
	} else {
		return;
	}
	charge_interval(s, tot, bpf_get_smp_processor_id(), now, llc_now(), 0);
	s->ctx = CTX_NONE;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(ft_softirq_entry, unsigned int vec_nr)
{
	struct cpu_state *s = this_cpu_state();
	struct ft_cpu_stats *tot = totals();
	__u64 now = bpf_ktime_get_ns();

	if (!s || !tot)
		return 0;
	/* a softirq run by the kthread's local_bh_enable; a NAPI poller goes on polling after it */
	s->resume_ctx = s->ctx == CTX_NAPI_THREAD ? CTX_NAPI_THREAD : CTX_NONE;
	close_kthread(s, tot, now);
	/* softirqs do not nest on a CPU, so one start time serves every vector */
	s->softirq_start = now;
	s->softirq_llc_start = llc_now();
	if (vec_nr != NET_RX_SOFTIRQ)
		return 0;
	tot->net_rx_events++;
	s->ctx = CTX_NET_RX;
	s->cur_valid = 0;
	s->mark = now;
	s->llc_mark = s->softirq_llc_start;
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(ft_softirq_exit, unsigned int vec_nr)
{
	struct cpu_state *s = this_cpu_state();
	struct ft_cpu_stats *tot = totals();
	__u64 now = bpf_ktime_get_ns();
	__u64 llc = llc_now();

	if (!s || !tot || !s->softirq_start)
		return 0;	/* attached while this softirq was already running */
	tot->softirq_ns += now - s->softirq_start;
	tot->softirq_llc += llc - s->softirq_llc_start;
	if (vec_nr == NET_RX_SOFTIRQ && s->ctx == CTX_NET_RX) {
		tot->net_rx_ns += now - s->softirq_start;
		/* the tail goes to the last skb's flow */
		charge_interval(s, tot, bpf_get_smp_processor_id(), now, llc, 0);
		s->ctx = CTX_NONE;
	}
	s->softirq_start = 0;
	if (s->resume_ctx != CTX_NONE) {
		open_kthread(s, s->resume_ctx, now, llc);
		s->resume_ctx = CTX_NONE;
	}
	return 0;
}

/* Device interrupt handlers per CPU: where a NIC queue's interrupt lands is the arrival CPU, the
 * third CPU of a flow besides its softirq's and its reader's. One program pair per handler run,
 * none per packet. Handlers run with interrupts off and do not nest; time spent in them inside
 * a NET_RX softirq or a receive syscall stays part of that, as in /proc/stat. */
SEC("tp_btf/irq_handler_entry")
int BPF_PROG(ft_irq_handler_entry, int irq, struct irqaction *action)
{
	struct cpu_state *s = this_cpu_state();

	if (s)
		s->hardirq_start = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/irq_handler_exit")
int BPF_PROG(ft_irq_handler_exit, int irq, struct irqaction *action, int ret)
{
	struct cpu_state *s = this_cpu_state();
	struct ft_cpu_stats *tot = totals();

	if (!s || !tot || !s->hardirq_start)
		return 0;	/* attached while this handler was already running */
	tot->hardirq_ns += bpf_ktime_get_ns() - s->hardirq_start;
	tot->hardirqs++;
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

	if (!dev) {
		tot = totals();
		if (tot) {
			tot->backlog_polls++;
			tot->backlog_packets += work > 0 ? work : 0;
			tot->backlog_full_polls += full;
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
		if (!v)
			return 0;	/* more instances than entries: theirs go uncounted */
	}
	v->polls++;
	v->packets += work > 0 ? work : 0;
	v->full_polls += full;
	return 0;
}

/* the bytes and wire packets of SKB, whose transport payload is PAYLOAD bytes, into its entry */
static __always_inline void count_payload(struct ft_flow_stats *st, struct sk_buff *skb,
					  __u64 payload)
{
	__u16 segs;

	note_rx_path_skb(st, skb);
	st->rx_bytes += payload;
	/* a GRO aggregate stands for gso_segs wire packets (skb_shinfo: head + end offset) */
	segs = BPF_CORE_READ((struct skb_shared_info *)(skb->head + skb->end), gso_segs);
	st->rx_packets += segs ? segs : 1;
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(ft_netif_receive_skb, struct sk_buff *skb)
{
	struct cpu_state *s = this_cpu_state();
	struct ft_cpu_stats *tot = totals();
	struct ft_flow_key k = {};
	struct ft_flow_stats *st;
	__u32 cpu = bpf_get_smp_processor_id();
	__u64 now = bpf_ktime_get_ns(), payload = 0, llc;
	int parsed, second_pass = 0;
	__u8 kctx;

	if (!s || !tot)
		return 0;
	s->skb_counted = 0;
	parsed = skb_flow(skb, &k, &payload) == 0;

	if (s->ctx == CTX_NONE && s->softirq_start == 0) {
		kctx = current_kthread_ctx();
		if (kctx != CTX_NONE)
			open_kthread(s, kctx, now, llc_now());	/* first skb of a batch */
	}
	if (s->ctx == CTX_KTHREAD) {
		/* generic XDP already passed this skb through netif_receive_skb on the arrival CPU,
		 * which set skb_iif; an skb built from an xdp_frame (native XDP) arrives here fresh */
		second_pass = skb->skb_iif != 0;
	}

	/* this skb's entry: counted below, and charged with the interval when the previous skb was
	 * of the same flow (a GRO batch), which saves the second hash lookup */
	st = parsed ? flow_entry(&k, cpu, tot) : 0;
	if (s->ctx != CTX_NONE) {
		llc = llc_now();
		if (!s->cur_valid && parsed) {
			/* the head of the interval (driver, GRO) is work for this first skb */
			s->cur = k;
			s->cur_valid = 1;
		}
		charge_interval(s, tot, cpu, now, llc,
				s->cur_valid && parsed && same_flow(&s->cur, &k) ? st : 0);
		s->cur = k;
		s->cur_valid = parsed;
	} else {
		tot->untimed_skbs++;
	}

	if (!st)
		return 0;
	st->rx_skbs++;
	s->skb_counted = 1;
	st->last_seen_ns = now;
	if (second_pass)
		return 0;	/* bytes and packets were counted on the arrival CPU */
	count_payload(st, skb, payload);
	return 0;
}

/* Received skbs the kernel drops (a full socket buffer, a bad checksum, no socket, a netfilter
 * rule...), per flow and per CPU, with the reason of the latest: NDM'13 reads a starved same-core
 * reader's losses into its numbers. Only an skb that went through netif_receive_skb (skb_iif set)
 * is the receiver's: on a host that also sends, a dropped outgoing skb of a flow parses the same.
 * The headers are read from the network header, wherever the layer that dropped it left data. */
#define SKB_CONSUMED_REASON 1	/* enum skb_drop_reason: 0 not dropped yet, 1 consumed */

SEC("tp_btf/kfree_skb")
int BPF_PROG(ft_kfree_skb, struct sk_buff *skb, void *location, enum skb_drop_reason reason)
{
	struct ft_cpu_stats *tot;
	struct ft_flow_stats *st;
	struct ft_flow_key k = {};
	__u64 head, data, nh, payload;
	__u32 len, headlen, shift;
	__u16 nh_off;

	if ((__u32)reason <= SKB_CONSUMED_REASON || !skb->skb_iif)
		return 0;
	nh_off = skb->network_header;
	if (nh_off == (__u16)~0U)
		return 0;
	head = (__u64)skb->head;
	data = (__u64)skb->data;
	nh = head + nh_off;
	len = skb->len;
	headlen = skb->len - skb->data_len;
	if (data >= nh) {		/* headers already pulled: count them back in */
		shift = data - nh;
		len += shift;
		headlen += shift;
	} else {			/* dropped below the network layer */
		shift = nh - data;
		if (shift > headlen)
			return 0;
		len -= shift;
		headlen -= shift;
	}
	if (headers_flow((unsigned char *)nh, len, headlen, bpf_ntohs(skb->protocol), &k, &payload))
		return 0;
	tot = totals();
	if (!tot)
		return 0;
	tot->rx_drops++;
	st = flow_entry(&k, bpf_get_smp_processor_id(), tot);
	if (!st)
		return 0;
	st->rx_drops++;
	st->last_drop_reason = reason;
	st->last_seen_ns = bpf_ktime_get_ns();
	return 0;
}

/* generic XDP runs inside netif_receive_skb, after the event above: when it redirects that skb to
 * a cpumap, the stack work happens on the target CPU, which counts the skb in its own pass */
SEC("tp_btf/xdp_redirect")
int BPF_PROG(ft_xdp_redirect, const struct net_device *dev, const struct bpf_prog *xdp,
	     const void *tgt, int err, enum bpf_map_type map_type)
{
	struct cpu_state *s = this_cpu_state();
	struct ft_cpu_stats *tot = totals();
	struct ft_flow_stats *st;

	if (!s || !tot || err || map_type != BPF_MAP_TYPE_CPUMAP || !s->skb_counted || !s->cur_valid)
		return 0;
	if (!BPF_CORE_READ(dev, xdp_prog))
		return 0;	/* native XDP: no skb existed yet, nothing was counted */
	st = flow_entry(&s->cur, bpf_get_smp_processor_id(), tot);
	if (st) {
		st->rx_skbs--;
		st->redirected_skbs++;
	}
	s->skb_counted = 0;
	return 0;
}

SEC("tp_btf/xdp_cpumap_kthread")
int BPF_PROG(ft_xdp_cpumap_kthread, int map_id, unsigned int processed, unsigned int drops, int sched)
{
	struct cpu_state *s = this_cpu_state();
	struct ft_cpu_stats *tot = totals();
	__u64 now = bpf_ktime_get_ns();
	__u8 valid;

	if (!s || !tot || s->softirq_start)
		return 0;
	if (s->ctx == CTX_KTHREAD && !s->cur_valid)
		return 0;	/* no skb yet since the wake-up: the head goes on to the first one */
	valid = s->cur_valid;
	close_kthread(s, tot, now);
	/* what follows is this kthread's work: the rest of the loop before 6.14 (its tail goes to the
	 * last skb's flow, as a softirq's does), the batch's way up the stack since */
	open_kthread(s, CTX_KTHREAD, now, llc_now());
	s->cur_valid = valid;
	return 0;
}

/* fold v4-mapped IPv6 sockets (an IPv6 listener accepting IPv4) into IPv4 keys, as the packets
 * carry them. Probe reads, not direct access: the kprobe fallback hands in an untyped pointer. */
static __always_inline int sock_flow(struct sock *sk, struct ft_flow_key *k)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	__u8 proto = BPF_CORE_READ(sk, sk_protocol);

	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return -1;
	k->proto = proto;
	k->sport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	k->dport = BPF_CORE_READ(sk, __sk_common.skc_num);
	if (family == AF_INET6) {
		struct in6_addr d, r;
		__u32 *dw = (__u32 *)&d, *rw = (__u32 *)&r;
		int mapped;

		BPF_CORE_READ_INTO(&d, sk, __sk_common.skc_v6_daddr);
		BPF_CORE_READ_INTO(&r, sk, __sk_common.skc_v6_rcv_saddr);
		mapped = dw[0] == 0 && dw[1] == 0 && dw[2] == bpf_htonl(0xffff);
		if (!mapped) {
			__builtin_memcpy(k->saddr, &d, 16);
			__builtin_memcpy(k->daddr, &r, 16);
			k->family = 6;
			return 0;
		}
		__builtin_memcpy(k->saddr, &dw[3], 4);
		__builtin_memcpy(k->daddr, &rw[3], 4);
		k->family = 4;
		return 0;
	}
	if (family != AF_INET)
		return -1;
	BPF_CORE_READ_INTO((__u32 *)k->saddr, sk, __sk_common.skc_daddr);
	BPF_CORE_READ_INTO((__u32 *)k->daddr, sk, __sk_common.skc_rcv_saddr);
	k->family = 4;
	return 0;
}

/* sampled timing: what a TCP socket received and what its reader got reach the flow map at a
 * flush, from the socket's own storage:
 * - with a receive hook (tracepoint, fexit, kprobe), each read adds to read_bytes/read_calls in
 *   the socket's storage: a lookup and two additions, not a hash of the 4-tuple;
 * - with socket counters (cfg.app_counters) no program runs per read at all: what the reader got
 *   is the socket's own account (tcp_read_total), and the storage is made when the connection
 *   opens (ft_tcp_state) or, for a connection open before tracing began, when the tracer starts
 *   (ft_tcp_sockets), with what it had counted until then as its baseline.
 * Flushes: whenever userspace reads the map (the ft_flush_socks iterator), on the move to
 * TCP_CLOSE, when the socket is destroyed and, with a receive hook, when the reader changes CPU
 * or process and at end of file. rx bytes and segments are the
 * socket's own counters (tcp_sock.bytes_received, in-order payload, and segs_in) at the flush.
 * Flushers may race (a reader on one CPU, the iterator on another, a destroy): each counter is
 * cumulative, and a flush moves its flushed mark forward with a compare-and-swap, so each range
 * of a counter is flushed exactly once. */
struct sock_state {
	struct ft_flow_key flow;
	__u64 read_bytes;	/* receive hook: cumulative since the first read seen */
	__u64 read_calls;
	__u64 flushed_bytes;	/* how much of what the reader got is in the flow map */
	__u64 flushed_calls;
	__u64 bytes_received;	/* tcp_rx_total at the last flush */
	__u64 segs_in;		/* tcp_sock.segs_in (a __u32) at the last flush: 64 bits, because
				 * compare-and-swap on 32 bits needs a newer BPF ISA than -mcpu's
				 * default */
	__u32 cpu;		/* the CPU (and, with a receive hook, the process) of what is not
				 * flushed yet */
	__u32 pid;
	__u8 flow_ok;		/* 0 not parsed yet, 1 a TCP/UDP flow, 2 something else */
	__u8 fin;		/* the peer's FIN arrived: it takes a sequence number */
	__u8 pad[2];
	char comm[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sock_state);
} socks SEC(".maps");

/* the receive counts every timing mode keeps: bytes, calls, and who read */
static __always_inline void count_read(struct ft_flow_stats *st, int ret)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;

	if (ret > 0)
		st->app_bytes += ret;
	st->app_calls++;
	if (st->app_pid != pid) {
		st->app_pid = pid;
		bpf_get_current_comm(st->app_comm, sizeof(st->app_comm));
	}
}

/* move *MARK forward to NOW, and return by how much, unless another flusher moved it first (then
 * it flushes that range, and this one leaves it) or NOW is behind it (a count read while the
 * socket changed: the mark waits for the count to pass it) */
static __always_inline __u64 advance(__u64 *mark, __u64 now)
{
	__u64 old = *mark;

	if (now <= old || __sync_val_compare_and_swap(mark, old, now) != old)
		return 0;
	return now - old;
}

/* the same for a counter of 32 bits that wraps: the delta modulo 2^32 */
static __always_inline __u32 advance32(__u64 *mark, __u32 now)
{
	__u64 old = *mark;

	if (now == (__u32)old || __sync_val_compare_and_swap(mark, old, now) != old)
		return 0;
	return now - (__u32)old;
}

/* payload TP received in order since the connection opened: a FIN takes a sequence number, which
 * rcv_nxt and bytes_received count */
static __always_inline __u64 tcp_rx_total(struct tcp_sock *tp, struct sock_state *ss)
{
	__u64 received = *(volatile __u64 *)&tp->bytes_received;

	return received >= ss->fin ? received - ss->fin : 0;
}

/* what TP's reader has got since the connection opened, by the socket's own account: what it
 * received in order less what is still queued (rcv_nxt - copied_seq; the read that reaches a FIN
 * moves copied_seq over it too). Exact where the socket's lock is held (state change, destroy,
 * ft_tcp_sockets); read without it (ft_flush_socks) it may come out short while a segment is
 * being queued, and a later flush makes up for it. */
static __always_inline __u64 tcp_read_total(struct tcp_sock *tp, struct sock_state *ss)
{
	/* in this order: the receive path adds to bytes_received before it moves rcv_nxt, and
	 * copied_seq follows rcv_nxt, so a read racing them can only come out short (the flushed
	 * mark then waits), not long */
	__u64 rx = tcp_rx_total(tp, ss);
	__u32 rcv_nxt = *(volatile __u32 *)&tp->rcv_nxt;
	__u32 unread = rcv_nxt - *(volatile __u32 *)&tp->copied_seq;

	if ((__s32)unread < 0)
		unread = 0;
	if (ss->fin && unread)
		unread--;	/* the FIN is queued, not read */
	return rx >= unread ? rx - unread : 0;
}

/* SS describes SK from now on: its flow, and its counts from the baselines in NOW (a socket open
 * before tracing began) or from zero (NULL: a connection opening) */
static __always_inline void sock_init(struct sock *sk, struct sock_state *ss, struct tcp_sock *now,
				      int fin)
{
	ss->flow_ok = sock_flow(sk, &ss->flow) == 0 ? 1 : 2;
	ss->fin = fin;
	ss->read_bytes = ss->read_calls = ss->flushed_calls = 0;
	ss->flushed_bytes = now ? tcp_read_total(now, ss) : 0;
	ss->bytes_received = now ? tcp_rx_total(now, ss) : 0;
	ss->segs_in = now ? now->segs_in : 0;
	ss->cpu = bpf_get_smp_processor_id();
	ss->pid = 0;
}

/* put SK's reads and received data since the last flush into the flow map */
static __always_inline void flush_sock(struct sock *sk, struct sock_state *ss)
{
	struct ft_cpu_stats *tot = totals();
	struct ft_flow_stats *st;
	struct tcp_sock *tp;
	__u64 bytes = 0, calls = 0, rx = 0, rx_now;
	__u32 segs = 0;
	int incoming;

	if (!tot || ss->flow_ok != 1)
		return;
	tp = bpf_skc_to_tcp_sock(sk);
	if (tp) {
		rx_now = tcp_rx_total(tp, ss);
		if (rx_now < ss->bytes_received) {
			/* tcp_disconnect zeroed the counters (after its move to TCP_CLOSE, which
			 * flushed): count from the new zero */
			ss->bytes_received = rx_now;
			ss->segs_in = tp->segs_in;
			ss->flushed_bytes = cfg.app_counters ? tcp_read_total(tp, ss) : ss->flushed_bytes;
		}
		rx = advance(&ss->bytes_received, rx_now);
		segs = advance32(&ss->segs_in, tp->segs_in);
	}
	if (cfg.app_counters) {
		if (tp)
			bytes = advance(&ss->flushed_bytes, tcp_read_total(tp, ss));
	} else {
		bytes = advance(&ss->flushed_bytes, ss->read_bytes);
		calls = advance(&ss->flushed_calls, ss->read_calls);
	}
	if (cfg.skb_count & FT_COUNT_TCP)
		rx = segs = 0;	/* ft_skb_hint counts them, skb by skb */
	if (!bytes && !calls && !rx)
		return;	/* segments without payload (ACKs, a FIN) make no entry */
	if (cfg.app_counters) {
		/* no read says where the reader runs (the samples do): the bytes join the flow's
		 * entry on the CPU that last processed its packets, where its kernel time is */
		incoming = BPF_CORE_READ(sk, __sk_common.skc_incoming_cpu);
		ss->cpu = incoming >= 0 ? incoming : bpf_get_smp_processor_id();
	}
	st = flow_entry(&ss->flow, ss->cpu, tot);
	if (!st)
		return;
	/* the entry is another CPU's when the iterator or a destroy flushes: add atomically */
	__sync_fetch_and_add(&st->app_bytes, bytes);
	__sync_fetch_and_add(&st->app_calls, calls);
	__sync_fetch_and_add(&st->rx_bytes, rx);
	__sync_fetch_and_add(&st->rx_packets, segs);
	if (ss->pid && st->app_pid != ss->pid) {
		st->app_pid = ss->pid;
		__builtin_memcpy(st->app_comm, ss->comm, sizeof(st->app_comm));
	}
	note_rx_path_sk(st, sk);
	st->last_seen_ns = bpf_ktime_get_ns();
}

/* sampled timing, a UDP socket or a kprobe's untyped pointer (no socket storage): what the read
 * was handed is counted in the flow map at once, and taken for what the socket received unless
 * ft_skb_hint counts the transport's skbs */
static __always_inline void count_read_direct(struct sock *sk, struct ft_flow_key *k, int ret)
{
	struct ft_cpu_stats *tot = totals();
	struct cpu_state *s = this_cpu_state();
	struct ft_flow_stats *st;

	if (!tot)
		return;
	st = flow_entry(k, bpf_get_smp_processor_id(), tot);
	if (!st)
		return;
	count_read(st, ret);
	if (s)
		st->last_seen_ns = s->clock_ns;
	if (ret > 0 && !skb_counted_proto(k->proto)) {
		st->rx_bytes += ret;
		st->rx_packets++;
	}
	if (!st->rx_ifindex)
		note_rx_path_sk(st, sk);
}

/* sampled timing: no per-packet accounting. SK_STORAGE says whether SK is a typed pointer that
 * can carry socket storage (tracepoint, fexit) or not (kprobe). */
static __always_inline void on_receive_sampled(struct sock *sk, int ret, int flags, int sk_storage)
{
	struct sock_state *ss = 0;
	struct ft_flow_key k = {};
	struct tcp_sock *tp;
	__u32 cpu, pid;

	if (!sk || (flags & MSG_PEEK))
		return;
	if (sk_storage)
		ss = bpf_sk_storage_get(&socks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!ss) {
		if (sock_flow(sk, &k) == 0)
			count_read_direct(sk, &k, ret);
		return;
	}
	cpu = bpf_get_smp_processor_id();
	pid = bpf_get_current_pid_tgid() >> 32;
	if (!ss->flow_ok) {
		ss->flow_ok = sock_flow(sk, &ss->flow) == 0 ? 1 : 2;
		tp = ss->flow.proto == IPPROTO_TCP ? bpf_skc_to_tcp_sock(sk) : 0;
		if (tp) {
			/* the bytes this first read returned arrived while tracing; the rest of what
			 * the socket received before did not (or cannot be told apart) */
			ss->bytes_received = tp->bytes_received - (ret > 0 ? ret : 0);
			ss->segs_in = tp->segs_in;
		}
		ss->cpu = cpu;
		ss->pid = pid;
		bpf_get_current_comm(ss->comm, sizeof(ss->comm));
	}
	if (ss->flow_ok != 1)
		return;
	if (ss->flow.proto != IPPROTO_TCP) {
		count_read_direct(sk, &ss->flow, ret);
		return;
	}
	if (ss->cpu != cpu || ss->pid != pid) {
		/* the reads so far belong to the previous CPU or process */
		flush_sock(sk, ss);
		ss->cpu = cpu;
		if (ss->pid != pid) {
			ss->pid = pid;
			bpf_get_current_comm(ss->comm, sizeof(ss->comm));
		}
	}
	if (ret > 0)
		ss->read_bytes += ret;
	ss->read_calls++;
	if (ret == 0)
		flush_sock(sk, ss);	/* end of file: likely the last read */
}

#define SK_FLAG_DEAD	(1UL << SOCK_DEAD)	/* skc_flags (sk_flags): the process closed the socket */

/* sampled timing: a TCP socket's state changes. A connection that opens gets its storage here
 * (socket counters: counted from zero, so data that came with the handshake counts too); the
 * peer's FIN is noted; the final counts reach the flow map on the move to TCP_CLOSE (before
 * tcp_disconnect, or a reset on close, zeroes them). Once per state change of a connection, never
 * per packet or read. */
SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(ft_tcp_state, struct sock *sk, int oldstate, int newstate)
{
	int opened = (oldstate == TCP_SYN_SENT || oldstate == TCP_SYN_RECV) && newstate != TCP_CLOSE;
	struct sock_state *ss;

	if (sk->sk_protocol != IPPROTO_TCP)
		return 0;
	ss = bpf_sk_storage_get(&socks, sk, 0,
				opened && cfg.app_counters ? BPF_SK_STORAGE_GET_F_CREATE : 0);
	if (!ss)
		return 0;
	if (opened && cfg.app_counters)
		sock_init(sk, ss, 0, 0);
	/* tcp_fin moves ESTABLISHED to CLOSE_WAIT, FIN_WAIT1 to CLOSING, and FIN_WAIT2 through
	 * tcp_time_wait to CLOSE; that last move is also a reset's (sk_err set) or an orphan's
	 * timeout (the process closed it: nothing reads it any more) */
	if (newstate == TCP_CLOSE_WAIT || newstate == TCP_CLOSING || newstate == TCP_TIME_WAIT ||
	    (oldstate == TCP_FIN_WAIT2 && newstate == TCP_CLOSE && !sk->sk_err &&
	     !(sk->__sk_common.skc_flags & SK_FLAG_DEAD)))
		ss->fin = 1;
	if (newstate == TCP_CLOSE)
		flush_sock(sk, ss);
	return 0;
}

SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(ft_tcp_destroy, struct sock *sk)
{
	struct sock_state *ss = bpf_sk_storage_get(&socks, sk, 0, 0);

	if (ss)
		flush_sock(sk, ss);
	return 0;
}

/* sampled timing: run by userspace before it reads the flow map, over every socket with storage,
 * in every network namespace */
SEC("iter/bpf_sk_storage_map")
int ft_flush_socks(struct bpf_iter__bpf_sk_storage_map *ctx)
{
	struct sock_state *ss = ctx->value;
	struct sock *sk = ctx->sk;

	if (sk && ss)
		flush_sock(sk, ss);
	return 0;
}

/* run by userspace in each network namespace (a TCP iterator walks its own), over the TCP sockets
 * there, each under its lock. With socket counters, once when the tracer starts: a connection open
 * before tracing began gets its storage here, and is counted from now on. Where the kernel refused
 * ft_flush_socks or ft_tcp_state, also before each read of the flow map: it flushes the sockets
 * that have storage in ft_flush_socks' place, and gives the connections opened since the last walk
 * their storage in ft_tcp_state's (counted from then) */
SEC("iter/tcp")
int ft_tcp_sockets(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct sock_state *ss;
	struct tcp_sock *tp;
	struct sock *sk;
	int state;

	if (!skc)
		return 0;
	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp)
		return 0;	/* request and timewait sockets: nothing to read, no storage */
	sk = (struct sock *)tp;
	ss = bpf_sk_storage_get(&socks, sk, 0, 0);
	if (ss) {
		flush_sock(sk, ss);
		return 0;
	}
	state = sk->__sk_common.skc_state;
	if (!cfg.app_counters || state == TCP_LISTEN || state == TCP_CLOSE || state == TCP_SYN_SENT)
		return 0;	/* ft_tcp_state sees a SYN_SENT socket open */
	ss = bpf_sk_storage_get(&socks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (ss && !ss->flow_ok)
		sock_init(sk, ss, tp, state == TCP_CLOSE_WAIT || state == TCP_LAST_ACK ||
				      state == TCP_CLOSING);
	return 0;
}

/* one receive call returned RET bytes (or an error) from SK to the current thread */
static __always_inline void on_receive(struct sock *sk, int ret, int flags, int sk_storage)
{
	struct ft_cpu_stats *tot = totals();
	struct task_struct *task = bpf_get_current_task_btf();
	struct ft_flow_key k = {};
	struct ft_flow_stats *st;
	struct recv_state *r;

	if (cfg.timing == FT_TIMING_SAMPLED) {
		on_receive_sampled(sk, ret, flags, sk_storage);
		return;
	}
	if (!tot || !sk || (flags & MSG_PEEK) || sock_flow(sk, &k))
		return;
	/* bytes are counted here, in every context; time needs the enclosing syscall */
	st = flow_entry(&k, bpf_get_smp_processor_id(), tot);
	if (st) {
		count_read(st, ret);
		st->last_seen_ns = bpf_ktime_get_ns();
	}
	/* first sighting makes this thread a known reader: its next receive syscalls get timed */
	r = bpf_task_storage_get(&readers, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (r && r->in_recv) {
		r->flow = k;
		r->have_flow = 1;
	}
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(ft_sock_recv_length, struct sock *sk, int ret, int flags)
{
	on_receive(sk, ret, flags, 1);
	return 0;
}

/* Kernels before 6.3 have no sock_recv_length: the protocols' recvmsg functions say the same.
 * Their signature changed (noblock went in 5.19, addr_len in 6.17), so the flags argument's
 * position comes from userspace, read off the kernel's BTF, and the return value from
 * bpf_get_func_ret. inet6_recvmsg calls tcp_recvmsg too: one hook serves both families. */
static __always_inline int on_recvmsg_exit(void *ctx, struct sock *sk)
{
	__u64 flags = 0, ret = 0;

	if (bpf_get_func_arg(ctx, cfg.recv_flags_arg, &flags) || bpf_get_func_ret(ctx, &ret))
		return 0;
	on_receive(sk, (int)ret, (int)flags, 1);
	return 0;
}

/* the first parameter is `struct sock *sk` in every signature: declared, it arrives typed */
SEC("fexit/tcp_recvmsg")
int BPF_PROG(ft_tcp_recvmsg_exit, struct sock *sk)
{
	return on_recvmsg_exit(ctx, sk);
}

SEC("fexit/udp_recvmsg")
int BPF_PROG(ft_udp_recvmsg_exit, struct sock *sk)
{
	return on_recvmsg_exit(ctx, sk);
}

SEC("fexit/udpv6_recvmsg")
int BPF_PROG(ft_udpv6_recvmsg_exit, struct sock *sk)
{
	return on_recvmsg_exit(ctx, sk);
}

/* where there is no BPF trampoline (fentry) either, a kprobe keeps the arguments for the
 * kretprobe, per thread: a thread is in one receive call at a time. LRU, because a return the
 * kretprobe missed (too many threads blocked inside at once) leaves its entry behind. */
struct recv_args {
	__u64 sk;
	__s32 flags;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, struct recv_args);
} recv_calls SEC(".maps");

static __always_inline void recv_call_enter(struct pt_regs *regs)
{
	__u64 tid = bpf_get_current_pid_tgid();
	/* both read, then chosen: a computed offset into the context is refused by the verifier */
	__u64 p4 = PT_REGS_PARM4(regs), p5 = PT_REGS_PARM5(regs);
	struct recv_args a = { .sk = PT_REGS_PARM1(regs) };

	barrier_var(p4);
	barrier_var(p5);
	a.flags = cfg.recv_flags_arg == 4 ? p5 : p4;

	bpf_map_update_elem(&recv_calls, &tid, &a, BPF_ANY);
}

static __always_inline void recv_call_exit(int ret)
{
	__u64 tid = bpf_get_current_pid_tgid();
	struct recv_args *a = bpf_map_lookup_elem(&recv_calls, &tid);

	if (!a)
		return;
	on_receive((struct sock *)a->sk, ret, a->flags, 0);
	bpf_map_delete_elem(&recv_calls, &tid);
}

SEC("kprobe/tcp_recvmsg")
int ft_tcp_recvmsg_entry(struct pt_regs *regs)
{
	recv_call_enter(regs);
	return 0;
}

SEC("kretprobe/tcp_recvmsg")
int BPF_KRETPROBE(ft_tcp_recvmsg_return, int ret)
{
	recv_call_exit(ret);
	return 0;
}

SEC("kprobe/udp_recvmsg")
int ft_udp_recvmsg_entry(struct pt_regs *regs)
{
	recv_call_enter(regs);
	return 0;
}

SEC("kretprobe/udp_recvmsg")
int BPF_KRETPROBE(ft_udp_recvmsg_return, int ret)
{
	recv_call_exit(ret);
	return 0;
}

SEC("kprobe/udpv6_recvmsg")
int ft_udpv6_recvmsg_entry(struct pt_regs *regs)
{
	recv_call_enter(regs);
	return 0;
}

SEC("kretprobe/udpv6_recvmsg")
int BPF_KRETPROBE(ft_udpv6_recvmsg_return, int ret)
{
	recv_call_exit(ret);
	return 0;
}

static __always_inline void segment_start(struct recv_state *r, struct ft_cpu_stats *tot, __u64 now)
{
	r->seg_start = now;
	r->softirq_snap = tot->softirq_ns;
	r->softirq_llc_snap = tot->softirq_llc;
	r->llc_snap = llc_now();
}

static __always_inline void segment_end(struct recv_state *r, struct ft_cpu_stats *tot, __u64 now)
{
	__u64 nested = tot->softirq_ns - r->softirq_snap;
	__u64 nested_llc = tot->softirq_llc - r->softirq_llc_snap;
	__u64 dt = now - r->seg_start, dllc = llc_now() - r->llc_snap;

	if (!r->seg_start)
		return;
	r->acc_ns += dt > nested ? dt - nested : 0;
	r->acc_nested_ns += nested;
	r->acc_llc += dllc > nested_llc ? dllc - nested_llc : 0;
	r->seg_start = 0;
}

static __always_inline int is_recv_syscall(long id)
{
	return id == NR_read || id == NR_readv || id == NR_recvfrom || id == NR_recvmsg ||
	       id == NR_recvmmsg;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(ft_sys_enter, struct pt_regs *regs, long id)
{
	struct ft_cpu_stats *tot;
	struct recv_state *r;

	if (!is_recv_syscall(id))
		return 0;
	r = bpf_task_storage_get(&readers, bpf_get_current_task_btf(), 0, 0);
	if (!r)
		return 0;	/* not a socket reader (yet) */
	tot = totals();
	if (!tot)
		return 0;
	r->in_recv = 1;
	r->have_flow = 0;
	r->acc_ns = r->acc_nested_ns = r->acc_llc = 0;
	segment_start(r, tot, bpf_ktime_get_ns());
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(ft_sys_exit, struct pt_regs *regs, long ret)
{
	struct ft_cpu_stats *tot;
	struct ft_flow_stats *st;
	struct recv_state *r;
	__u64 now;

	r = bpf_task_storage_get(&readers, bpf_get_current_task_btf(), 0, 0);
	if (!r || !r->in_recv)
		return 0;
	tot = totals();
	if (!tot)
		return 0;
	now = bpf_ktime_get_ns();
	segment_end(r, tot, now);
	r->in_recv = 0;
	if (!r->have_flow)
		return 0;	/* read() of a pipe or file by a socket reader */
	/* charged to the CPU the syscall returns on: where the data was copied */
	st = flow_entry(&r->flow, bpf_get_smp_processor_id(), tot);
	if (!st)
		return 0;
	st->app_ns += r->acc_ns;
	st->app_nested_ns += r->acc_nested_ns;
	st->llc_app += r->acc_llc;
	st->last_seen_ns = now;
	tot->app_ns += r->acc_ns;
	tot->app_nested_ns += r->acc_nested_ns;
	tot->llc_app += r->acc_llc;
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(ft_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct ft_cpu_stats *tot = totals();
	struct cpu_state *s;
	struct recv_state *r;
	__u64 now;
	__u8 kctx;

	if (!tot)
		return 0;
	now = bpf_ktime_get_ns();
	s = this_cpu_state();
	if (s) {
		close_kthread(s, tot, now);	/* the receive kthread sleeps or is preempted */
		kctx = kthread_ctx(next->comm);
		if (kctx != CTX_NONE)
			open_kthread(s, kctx, now, llc_now());
	}
	/* a reader that blocks or is preempted inside its receive syscall is off-CPU until it
	 * comes back: only its on-CPU segments count */
	r = bpf_task_storage_get(&readers, prev, 0, 0);
	if (r && r->in_recv)
		segment_end(r, tot, now);
	r = bpf_task_storage_get(&readers, next, 0, 0);
	if (r && r->in_recv)
		segment_start(r, tot, now);
	return 0;
}

/* ---- sampled timing ------------------------------------------------------------------------
 * A cpu-clock perf event per CPU fires every period; ft_sample charges that period to what the
 * CPU was doing: NET_RX processing (or a cpumap/NAPI kthread) of the flow whose skb went up the
 * stack last on this CPU, or a receive syscall of a socket, found from the syscall's fd. The only
 * per-packet work left is ft_skb_hint's one store; the cost grows with the sample rate instead of
 * the packet and syscall rates, and unrelated syscalls pay nothing. */

/* A sample in a task stands for the time that task ran since its own previous sample, by the
 * scheduler's account of it (sum_exec_runtime), not for one nominal period: a timer that fires
 * late (interrupts off, or a virtual CPU woken late from a halt, where the kernel forwards the
 * timer and drops the periods it missed) would otherwise lose that time, and a task that shares
 * its CPU with others would be charged theirs. But never for more than the time since the
 * previous sample on its CPU: where tasks take turns on a busy CPU, a task's run time since its
 * own previous sample spans periods that other tasks' samples stand for, and charging all of it
 * to where this one sample landed only adds noise (a busy CPU is sampled every period, so one
 * period each is the unbiased count there). A sample taken on the idle task's stack (a softirq
 * on an idle CPU) stands for one period.
 * sum_exec_runtime is brought up to date only at scheduler events (a tick, a switch, a wake-up),
 * so a sample reads it late by up to a tick, and by how much depends on the context: receive
 * processing wakes readers, which updates the interrupted task's runtime, so a NET_RX sample
 * read it fresh and a sample in the task's own code stale, which gave NET_RX ~10% more than
 * its time (against libbpf-tools softirqs) and the tasks as much less. So the runtime is taken
 * as of the sample: sum_exec_runtime + (now - exec_start), where exec_start is the scheduler
 * clock at that last update. Only differences of it are used, so the constant offset between
 * the scheduler clock and bpf_ktime_get_ns() cancels. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);	/* task_runtime() at the task's previous sample */
} sampled_runtime SEC(".maps");

/* How far the scheduler's task clock of this CPU's run queue (what exec_start and
 * sum_exec_runtime are in) is behind its clock: the time the hypervisor took the CPU away (steal)
 * and, where the kernel accounts it, hard and soft irq time, since boot. The run queue is reached
 * through the task's CFS run queue (group scheduling, which every distribution kernel has):
 * `runqueues` is a per-CPU variable that kallsyms lists only with CONFIG_KALLSYMS_ALL. */
static __always_inline __u64 task_clock_lag(struct task_struct *task)
{
	struct rq *rq;

	if (!bpf_core_field_exists(struct cfs_rq, rq))
		return 0;
	rq = BPF_CORE_READ(task, se.cfs_rq, rq);
	if (!rq)
		return 0;
	return BPF_CORE_READ(rq, clock) - BPF_CORE_READ(rq, clock_task);
}

/* the longest task time one sample may stand for: beyond it something stopped the sampler
 * (throttling, a CPU coming back online), and the task's context is not known for that long */
#define MAX_SAMPLE_WEIGHT_PERIODS	100
#define SAMPLE_WEIGHT_CPU_PERIODS	4

static __always_inline __u64 sample_weight(__u64 period, __u64 now, __u64 cpu_elapsed)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 *last, runtime, w;

	if (!task->pid)
		return period;
	last = bpf_task_storage_get(&sampled_runtime, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!last)
		return period;
	/* the task's run time up to now, plus a constant (the two clocks' offset): now - exec_start
	 * alone would count the steal since exec_start's clock last moved (and across CPUs, the
	 * difference of their steal since boot) as run time, which doubled a cpumap kthread's time
	 * on a VM whose vCPUs the host preempts */
	runtime = task->se.sum_exec_runtime + now - task->se.exec_start - task_clock_lag(task);
	w = !*last ? period : runtime > *last ? runtime - *last : 0;
	*last = runtime;
	if (w > SAMPLE_WEIGHT_CPU_PERIODS * cpu_elapsed)
		w = SAMPLE_WEIGHT_CPU_PERIODS * cpu_elapsed;
	return w < period * MAX_SAMPLE_WEIGHT_PERIODS ? w : period * MAX_SAMPLE_WEIGHT_PERIODS;
}

/* Sampled timing's per-skb program: the hint for the sampler and, for the transports in
 * cfg.skb_count, the skb's bytes and packets. skb->hash (the NIC's RSS hash, or the one the
 * sending socket put on it) tells an skb of one of the last two uncounted flows on this CPU
 * (TCP, where the sockets count it) without a look at its headers: a few loads and compares;
 * another flow, or no hash, costs the headers' parse. A counted flow whose hash collides with one
 * of those two goes uncounted while they last (1 in 2^31). */
SEC("tp_btf/netif_receive_skb")
int BPF_PROG(ft_skb_hint, struct sk_buff *skb)
{
	struct cpu_state *s = this_cpu_state();
	struct ft_flow_key k = {};
	struct ft_cpu_stats *tot;
	struct ft_flow_stats *st;
	__u32 hash;
	__u64 payload = 0;

	if (!s)
		return 0;
	set_hint(s, skb);
	if (!cfg.skb_count)
		return 0;
	hash = skb->hash;
	if (hash && (hash == s->skip_hash[0] || hash == s->skip_hash[1]))
		return 0;
	if (skb_flow(skb, &k, &payload))
		return 0;
	if (!skb_counted_proto(k.proto)) {
		s->skip_hash[s->skip_next & 1] = hash;
		s->skip_next ^= 1;
		return 0;
	}
	tot = totals();
	if (!tot)
		return 0;
	st = flow_entry(&k, bpf_get_smp_processor_id(), tot);
	if (!st)
		return 0;
	st->rx_skbs++;
	/* the sampler's clock, good to a period on a CPU that takes packets in, saves a clock read
	 * (~50 ns on this VM) an skb; before this CPU's first sample, the clock */
	st->last_seen_ns = s->clock_ns ? s->clock_ns : bpf_ktime_get_ns();
	if (skb->skb_iif && current_kthread_ctx() == CTX_KTHREAD)
		return 0;	/* generic XDP counted it on the arrival CPU */
	count_payload(st, skb, payload);
	return 0;
}

/* frames of the interrupted kernel stack looked at: net_rx_action sits ~15-25 frames below the
 * deepest TCP function, and a softirq that interrupted a syscall adds the syscall's frames below */
#define FT_STACK_DEPTH	24

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64[FT_STACK_DEPTH]);
} stack_scratch SEC(".maps");

#define WHERE_TASK	0	/* none of the ranges below: task context (or hardirq, idle) */
#define WHERE_NET_RX	1
#define WHERE_SOFTIRQ	2	/* a softirq other than NET_RX */
#define WHERE_NET_CONTEXT 3	/* a bpf_net_context is held: NET_RX, or a kthread's own work */

#define PF_KTHREAD	0x00200000	/* include/linux/sched.h */
#define S_IFMT		00170000
#define S_IFSOCK	0140000

static __always_inline int in_text(__u64 ip, int which)
{
	return ip >= cfg.text[which][0] && ip < cfg.text[which][1];
}

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

/* the innermost of net_rx_action / threaded NAPI / softirq handling on the interrupted stack.
 * Walking it is the sampler's main cost: ~16 us a sample on this VM, a fixed ~7 us plus ~0.5 us a
 * frame (bench.event_cost), so where_sampled walks only when the cheap signs below cannot tell. */
static __always_inline int where_on_stack(struct bpf_perf_event_data *ctx)
{
	__u64 *ips;
	long n = sampled_frames(ctx, &ips);
	int i;

	if (!n)
		return WHERE_TASK;
	for (i = 0; i < FT_STACK_DEPTH; i++) {
		if (i >= n)
			break;
		if (in_text(ips[i], FT_TEXT_NET_RX) || in_text(ips[i], FT_TEXT_NAPI_THREAD))
			return WHERE_NET_RX;
		if (in_text(ips[i], FT_TEXT_SOFTIRQ))
			return WHERE_SOFTIRQ;
	}
	return WHERE_TASK;
}

/* Whether the interrupted context ran on its task's stack (task context; ksoftirqd's softirqs)
 * or off it (a softirq, on the CPU's irq stack: the sampling interrupt cannot interrupt a
 * hardirq). Task stacks are 16 KiB on x86_64 and arm64, 32 KiB under KASAN: in between the
 * answer is not known. */
#define TASK_STACK_SURE		(16 << 10)
#define TASK_STACK_MAX		(32 << 10)
#define ON_TASK_STACK		0
#define OFF_TASK_STACK		1
#define STACK_NOT_KNOWN		2

static __always_inline int sampled_stack(struct bpf_perf_event_data *ctx, struct task_struct *task)
{
	__u64 sp = ctx->regs.sp, base = (__u64)task->stack;

	if (!cfg.softirq_stacks || sp < base || sp >= base + TASK_STACK_MAX)
		return cfg.softirq_stacks ? OFF_TASK_STACK : STACK_NOT_KNOWN;
	return sp < base + TASK_STACK_SURE ? ON_TASK_STACK : STACK_NOT_KNOWN;
}

static __always_inline int comm_is_ksoftirqd(const char *comm)
{
	return comm[0] == 'k' && comm[1] == 's' && comm[2] == 'o' && comm[3] == 'f' &&
	       comm[4] == 't' && comm[5] == 'i' && comm[6] == 'r' && comm[7] == 'q';
}

/* NET_RX processing, another softirq, or neither (task context, a kthread, idle), with the
 * stack walk only where cheaper signs cannot tell:
 * - From 6.11, net_rx_action holds a bpf_net_context in the task it runs on (current, whatever
 *   it interrupted) for exactly as long as it runs: set at its start, cleared at its one exit.
 *   Other holders set one only with bottom halves off, in task context: threaded NAPI and busy
 *   polling (receive processing too), the cpumap kthread (which ft_sample tells by its name), XDP
 *   on tun and netkit's transmit. A softirq that a holder runs when it enables bottom halves
 *   (the cpumap kthread's, after each batch: the ACKs its TCP sent through a veth) is on the irq
 *   stack, and counts as NET_RX, as in the exact mode.
 * - The stack pointer tells a softirq from task context, and before 6.11 spares the walk in
 *   task context, outside ksoftirqd. */
static __always_inline int where_sampled(struct bpf_perf_event_data *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	int stack = sampled_stack(ctx, task);
	char comm[16];

	if (bpf_core_field_exists(task->bpf_net_context)) {
		/* off the task's stack it is net_rx_action's own context (or a softirq on top of a
		 * holder, most likely NET_RX itself); on it, the holder's work */
		if (task->bpf_net_context)
			return stack == OFF_TASK_STACK ? WHERE_NET_RX : WHERE_NET_CONTEXT;
		if (stack != STACK_NOT_KNOWN)
			return stack == ON_TASK_STACK ? WHERE_TASK : WHERE_SOFTIRQ;
		return where_on_stack(ctx);
	}
	if (stack == ON_TASK_STACK) {
		bpf_get_current_comm(comm, sizeof(comm));
		if (!comm_is_ksoftirqd(comm))
			return WHERE_TASK;
	}
	return where_on_stack(ctx);
}

static __always_inline int sampled_user_mode(struct bpf_perf_event_data *ctx)
{
#if defined(__TARGET_ARCH_x86)
	/* the context allows whole-word reads only, and cs shares its word with FRED bits */
	__u64 *regs = (__u64 *)&ctx->regs;

	return (regs[__builtin_offsetof(struct pt_regs, cs) / 8] & 3) != 0;
#else
	return (ctx->regs.pstate & 0xf) == 0;	/* PSR_MODE_EL0t */
#endif
}

/* the flow of the socket the current task is receiving from, if it is inside a receive syscall:
 * the syscall number and the fd come from its user registers, the socket from its fd table */
static __always_inline int current_recv_flow(struct ft_flow_key *k)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct pt_regs *regs;
	struct fdtable *fdt;
	struct file **fds, *file;
	struct socket *sock;
	long nr;
	__u32 fd;

	if (task->flags & PF_KTHREAD)
		return -1;
	regs = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!regs)
		return -1;
#if defined(__TARGET_ARCH_x86)
	nr = BPF_CORE_READ(regs, orig_ax);
#else
	nr = BPF_CORE_READ(regs, syscallno);
#endif
	if (!is_recv_syscall(nr))
		return -1;
	fd = PT_REGS_PARM1_CORE_SYSCALL(regs);
	fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
		return -1;
	fds = BPF_CORE_READ(fdt, fd);
	if (bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]) || !file)
		return -1;
	if ((BPF_CORE_READ(file, f_inode, i_mode) & S_IFMT) != S_IFSOCK)
		return -1;
	sock = BPF_CORE_READ(file, private_data);
	return sock_flow(BPF_CORE_READ(sock, sk), k);
}

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
		 * category)) drops the sample, and nothing counts the drop yet */
		bpf_map_update_elem(&profile, &pk, &fresh, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&profile, &pk);
		if (!v)
			return;
	}
	/* only this CPU writes an entry with its number in the key, and a sample does not nest */
	v->samples++;
	v->ns += weight;
}

SEC("perf_event")
int ft_sample(struct bpf_perf_event_data *ctx)
{
	struct cpu_state *s = this_cpu_state();
	struct ft_cpu_stats *tot = totals();
	struct ft_flow_key k = {}, rk = {};
	struct ft_flow_stats *st;
	__u64 period = ctx->sample_period, llc, dllc, now, dev[FT_EVENTS];
	__u32 cpu = bpf_get_smp_processor_id(), pid;
	int where, kthread, napi_thread;
	char comm[8];

	if (!s || !tot)
		return 0;
	/* LLC misses since the previous sample are charged with its period, to the same side */
	llc = llc_now();
	dllc = s->sample_llc ? llc - s->sample_llc : 0;
	s->sample_llc = llc;
	events_since_sample(s, dev);
	tot->samples++;
	now = bpf_ktime_get_ns();
	/* the first sample on this CPU: as if the previous one were a period ago */
	period = sample_weight(period, now, s->clock_ns ? now - s->clock_ns : period);
	s->clock_ns = now;
	if (sampled_user_mode(ctx))
		return 0;
	tot->samples_kernel_mode++;
	where = where_sampled(ctx);
	kthread = napi_thread = 0;
	if (where == WHERE_TASK || where == WHERE_NET_CONTEXT) {
		bpf_get_current_comm(comm, sizeof(comm));
		/* threaded NAPI (napi/<dev>-<id>) runs the NET_RX work in a kthread, bh disabled */
		if (comm_is_napi(comm))
			where = WHERE_NET_RX, napi_thread = 1;
		else if (comm_is_cpumap(comm))
			kthread = 1;
		else if (where == WHERE_NET_CONTEXT)
			where = WHERE_NET_RX;
	}

	if (where == WHERE_NET_RX || kthread) {
		st = hint_flow(s, &k) == 0 ? flow_entry(&k, cpu, tot) : 0;
		if (st) {
			if (kthread)
				st->kthread_ns += period;
			else
				st->kernel_ns += period;
			st->kernel_samples++;
			st->llc_kernel += dllc;
			st->refs_kernel += dev[FT_EVENT_REFERENCES];
			st->instructions_kernel += dev[FT_EVENT_INSTRUCTIONS];
			st->cycles_kernel += dev[FT_EVENT_CYCLES];
			st->last_seen_ns = s->clock_ns;
		} else if (kthread) {
			tot->kthread_unattributed_ns += period;
		} else {
			tot->net_rx_unattributed_ns += period;
		}
		if (kthread) {
			tot->kthread_ns += period;
		} else if (napi_thread) {
			tot->net_rx_ns += period;
			tot->napi_thread_ns += period;
		} else {
			tot->net_rx_ns += period;
			tot->softirq_ns += period;
		}
		tot->llc_kernel += dllc;
		tot->refs_kernel += dev[FT_EVENT_REFERENCES];
		tot->instructions_kernel += dev[FT_EVENT_INSTRUCTIONS];
		tot->cycles_kernel += dev[FT_EVENT_CYCLES];
		if (cfg.profile_ranges)
			profile_sample(ctx, st ? &k : 0, cpu, kthread ? FT_SIDE_KTHREAD : FT_SIDE_KERNEL,
				       period);
	} else if (where == WHERE_SOFTIRQ) {
		tot->softirq_ns += period;
		tot->softirq_llc += dllc;
	}
	if (kthread || current_recv_flow(&rk))
		return 0;
	/* the current task is in a receive syscall: its own time, or softirq time nested in it */
	st = flow_entry(&rk, cpu, tot);
	if (!st)
		return 0;
	pid = bpf_get_current_pid_tgid() >> 32;
	if (st->app_pid != pid) {
		/* with socket counters no read names the reader: the samples do */
		st->app_pid = pid;
		bpf_get_current_comm(st->app_comm, sizeof(st->app_comm));
	}
	if (where == WHERE_TASK) {
		st->app_ns += period;
		st->app_samples++;
		st->llc_app += dllc;
		st->refs_app += dev[FT_EVENT_REFERENCES];
		st->instructions_app += dev[FT_EVENT_INSTRUCTIONS];
		st->cycles_app += dev[FT_EVENT_CYCLES];
		tot->app_ns += period;
		tot->llc_app += dllc;
		tot->refs_app += dev[FT_EVENT_REFERENCES];
		tot->instructions_app += dev[FT_EVENT_INSTRUCTIONS];
		tot->cycles_app += dev[FT_EVENT_CYCLES];
		if (cfg.profile_ranges)
			profile_sample(ctx, &rk, cpu, FT_SIDE_APP, period);
	} else {
		st->app_nested_ns += period;
		tot->app_nested_ns += period;
	}
	st->last_seen_ns = s->clock_ns;
	return 0;
}
