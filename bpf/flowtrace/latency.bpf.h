/* SPDX-License-Identifier: GPL-2.0 */
/* flowtrace, latency (--latency): how long each flow's received data waits in the host, from its
 * skb reaching the stack to the receive call that takes it. Loaded only when asked for: a program
 * per skb (a header parse and a hash lookup); TCP: one per copy of a queued skb to a reader
 * (skb:skb_copy_datagram_iovec), matched by sequence number; UDP, whose reads of a linear skb
 * pass no such tracepoint and whose skbs are freed later on another CPU (6.18), one per enqueue
 * on any socket (sock:sk_data_ready, 6.5+) and one per read of any socket (sock:sock_recv_length,
 * 6.3+), matched by the sampled skb leaving its socket's queue. */
#ifndef FT_LATENCY_BPF_H
#define FT_LATENCY_BPF_H

#include "common.bpf.h"
#include "skb.bpf.h"
#include "sock.bpf.h"

/* not preallocated per CPU: a flow's arrival and its reads run on different CPUs */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);	/* userspace sets it to --max-flows, at most 4096 */
	__type(key, struct ft_flow_key);
	__type(value, struct ft_lat_flow);
} lat_flows SEC(".maps");

/* a new flow's entry, all zero: too big for the stack */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ft_lat_flow);
} lat_zero SEC(".maps");

/* a UDP sample between its arrival and its enqueue, on the CPU that runs its stack; and the
 * flow of the last UDP skb there, sampled or not, which the wake-up its enqueue makes is of */
struct lat_arriving {
	__u64 skb;
	__u64 arrival_ns;
	struct ft_flow_key flow;
	struct ft_flow_key last_flow;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lat_arriving);
} lat_arriving SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct ft_lat_sock);
} lat_socks SEC(".maps");

/* A reader's wake-up by its flow's data: sock_def_readable wakes the socket's waiters right after
 * sock:sk_data_ready, on the same CPU, which notes the flow and the socket's last reader here
 * for the sched_waking of that reader that follows (within LAT_WAKE_WINDOW_NS: else it was not
 * waiting; other tasks' wake-ups in between, an interrupt's, do not take it); the woken reader
 * carries it to its next switch in. */
#define LAT_WAKE_WINDOW_NS	20000

struct lat_waking {
	struct ft_flow_key flow;
	__u64 ns;
	__u32 reader;		/* the socket's last reader: the one wake-up of it that counts */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lat_waking);
} lat_waking SEC(".maps");

struct lat_woken {
	struct ft_flow_key flow;
	__u64 ns;		/* woken at (0: not since its last switch in) */
	__u32 cpu;		/* by this CPU */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct lat_woken);
} lat_woken SEC(".maps");

/* the socket's reader: the thread in this read */
static __always_inline void note_reader(struct sock *sk)
{
	struct ft_lat_sock *q = bpf_sk_storage_get(&lat_socks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);

	if (q)
		q->reader = (__u32)bpf_get_current_pid_tgid();
}

/* 0-7 ns one bucket each; then 8 per power of two: [2^p + j 2^(p-3), 2^p + (j+1) 2^(p-3)) is
 * bucket 8 (p - 2) + j, so a bucket's midpoint is within 1/17 of any value in it */
static __always_inline __u32 lat_bucket(__u64 ns)
{
	__u32 p = 0, b;
	__u64 v = ns;

	if (ns < FT_LAT_SUB)
		return ns;
	if (v >> 32) { v >>= 32; p += 32; }
	if (v >> 16) { v >>= 16; p += 16; }
	if (v >> 8) { v >>= 8; p += 8; }
	if (v >> 4) { v >>= 4; p += 4; }
	if (v >> 2) { v >>= 2; p += 2; }
	if (v >> 1) p += 1;
	b = FT_LAT_SUB * (p - 2) + ((ns >> (p - 3)) & (FT_LAT_SUB - 1));
	return b < FT_LAT_BUCKETS ? b : FT_LAT_BUCKETS - 1;
}

/* A sample is taken where its slot is free: else the slot's sample is lost (counted) and the
 * flow's gate doubles, so that a flow whose data waits longer than FT_LAT_SLOTS gates is sampled
 * more thinly rather than cut short (a slot taken early would drop the longest waits, the ones
 * the figure is for); FT_LAT_CALM reads without a loss halve it again, down to FT_LAT_GATE_NS,
 * so that a reader late once is not sampled thinly for good. */
static __always_inline void take_slot(struct ft_lat_flow *f, struct ft_lat_slot *slot)
{
	if (slot->id) {
		__sync_fetch_and_add(&f->lost, 1);
		f->calm = 0;
		if (f->gate_ns < FT_LAT_GATE_MAX_NS)
			f->gate_ns *= 2;
	}
}

static __always_inline struct ft_lat_flow *lat_flow(struct ft_flow_key *k, int create)
{
	struct ft_lat_flow *f = bpf_map_lookup_elem(&lat_flows, k), *zero;
	__u32 z = 0;

	if (f || !create)
		return f;
	zero = bpf_map_lookup_elem(&lat_zero, &z);
	if (!zero)
		return 0;
	bpf_map_update_elem(&lat_flows, k, zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&lat_flows, k);
}

/* Arrival: a sample is the first skb with payload after the flow's gate opened. A TCP sample
 * waits in the flow's slots for the copy of its first byte; a UDP one on this CPU for its
 * enqueue, where its socket becomes known. */
SEC("tp_btf/netif_receive_skb")
int BPF_PROG(ft_lat_arrival, struct sk_buff *skb)
{
	struct lat_arriving *a;
	struct ft_lat_flow *f;
	struct ft_lat_slot *slot;
	struct ft_flow_key k = {};
	__u64 payload = 0, now;
	__u32 seq = 0, z = 0;

	if (skb_flow_seq(skb, &k, &payload, &seq) || !payload)
		return 0;
	a = 0;
	if (k.proto != IPPROTO_TCP) {
		a = bpf_map_lookup_elem(&lat_arriving, &z);
		if (a)
			a->last_flow = k;
	}
	f = lat_flow(&k, 1);
	if (!f)
		return 0;
	now = bpf_ktime_get_ns();
	if (now < f->next_ns)
		return 0;
	if (!f->gate_ns)
		f->gate_ns = FT_LAT_GATE_NS;
	f->next_ns = now + f->gate_ns;
	if (k.proto != IPPROTO_TCP) {
		if (a) {	/* one that never reached a socket (dropped) is replaced */
			a->skb = (__u64)skb;
			a->arrival_ns = now;
			a->flow = k;
		}
		return 0;
	}
	slot = &f->slot[f->head & (FT_LAT_SLOTS - 1)];
	f->head++;
	take_slot(f, slot);
	slot->arrival_ns = now;
	slot->queued_ns = 0;
	slot->id = FT_LAT_TCP | seq;
	return 0;
}

/* the receive queue's TCP socket: where the copy starts in its byte stream */
static __always_inline int tcp_copy_start(const struct sk_buff *skb, __u32 *start)
{
	struct tcp_sock *tp = (struct tcp_sock *)skb->sk;

	if (!tp)
		return -1;
	*start = BPF_CORE_READ(tp, copied_seq);
	return 0;
}

/* a sample read at NOW: its delay from arrival and, where its enqueue was seen, the two stages */
static __always_inline void record_delay(struct ft_lat_flow *f, struct ft_lat_slot *slot,
					 __u64 now)
{
	__u64 arrival = slot->arrival_ns, queued = slot->queued_ns;
	__u64 d = now > arrival ? now - arrival : 0;

	if (queued >= arrival && queued <= now) {
		__sync_fetch_and_add(&f->hist_stack[lat_bucket(queued - arrival) &
						    (FT_LAT_BUCKETS - 1)], 1);
		__sync_fetch_and_add(&f->hist_queue[lat_bucket(now - queued) & (FT_LAT_BUCKETS - 1)], 1);
		__sync_fetch_and_add(&f->staged, 1);
	}
	__sync_fetch_and_add(&f->hist[lat_bucket(d) & (FT_LAT_BUCKETS - 1)], 1);
	__sync_fetch_and_add(&f->samples, 1);
	__sync_fetch_and_add(&f->sum_ns, d);
	if (++f->calm >= FT_LAT_CALM && f->gate_ns > FT_LAT_GATE_NS) {
		f->gate_ns /= 2;
		f->calm = 0;
	}
}

/* TCP: each copy of a receive queue's skb to the reader (tcp_recvmsg). A copy runs from the
 * socket's copied_seq for LEN bytes: it takes the samples whose first byte is in that range,
 * whichever skb the sampled bytes were coalesced into. Only TCP's queue holds its socket in
 * skb->sk. */
SEC("tp_btf/skb_copy_datagram_iovec")
int BPF_PROG(ft_lat_read, const struct sk_buff *skb, int len)
{
	struct ft_flow_key k = {};
	struct ft_lat_flow *f;
	__u64 payload = 0, now, id;
	__u32 start, ahead;
	int i;

	if (len <= 0 || !skb->sk || pulled_skb_flow(skb, &k, &payload, 0) ||
	    k.proto != IPPROTO_TCP || tcp_copy_start(skb, &start))
		return 0;
	f = lat_flow(&k, 0);
	if (!f)
		return 0;
	note_reader((struct sock *)skb->sk);
	now = bpf_ktime_get_ns();
	for (i = 0; i < FT_LAT_SLOTS; i++) {
		struct ft_lat_slot *slot = &f->slot[i];

		id = slot->id;
		if (!(id & FT_LAT_TCP))
			continue;
		ahead = (__u32)id - start;
		if (ahead < (__u32)len) {
			record_delay(f, slot, now);
			slot->id = 0;
		} else if ((__s32)ahead < 0) {
			/* TCP reads in order, so a sampled byte behind this copy was read without a
			 * copy that took it (seen here: one flow in four of a same-core lab had such
			 * samples, never marked queued either). Left in its slot it would never be
			 * taken, and each wrap onto it would double the gate: 16 of them took a flow
			 * from thousands of samples to five. It is lost, not a slow reader's sign. */
			__sync_fetch_and_add(&f->lost, 1);
			slot->id = 0;
		}
	}
	return 0;
}

/* TCP, at data made readable on a socket (in order: rcv_nxt passed it), wherever that runs (the
 * softirq, or the reader's release of the socket for a segment that waited in its backlog): the
 * samples below rcv_nxt not marked yet reached the receive queue now */
static __always_inline void tcp_queued(struct sock *sk)
{
	struct ft_flow_key k = {};
	struct ft_lat_flow *f;
	__u32 rcv_nxt;
	__u64 now, id;
	int i;

	if (sock_flow(sk, &k))
		return;
	f = lat_flow(&k, 0);
	if (!f)
		return;
	rcv_nxt = BPF_CORE_READ((struct tcp_sock *)sk, rcv_nxt);
	now = bpf_ktime_get_ns();
	for (i = 0; i < FT_LAT_SLOTS; i++) {
		struct ft_lat_slot *slot = &f->slot[i];

		id = slot->id;
		if ((id & FT_LAT_TCP) && !slot->queued_ns && (__s32)((__u32)id - rcv_nxt) < 0)
			slot->queued_ns = now;
	}
}

static __always_inline void note_waking(struct sock *sk, struct ft_flow_key *flow)
{
	/* a key of its own, zeroed: sock_flow() writes an IPv4 flow's 4 bytes of each address
	 * only, and this CPU's slot held the last flow noted here, an IPv6 one's 16 (the IPv4 TCP
	 * readers' wake-ups went uncounted on a CPU that had noted an IPv6 flow) */
	struct ft_flow_key k = {};
	struct ft_lat_sock *q;
	struct lat_waking *w;
	struct socket_wq *wq;
	__u32 z = 0;

	/* sock_def_readable wakes only where someone waits on the socket (skwq_has_sleeper): a
	 * reader busy reading has no wake-up to note, and needs no lookups */
	wq = BPF_CORE_READ(sk, sk_wq);
	if (!wq || BPF_CORE_READ(wq, wait.head.next) == &wq->wait.head)
		return;
	q = bpf_sk_storage_get(&lat_socks, sk, 0, 0);
	w = bpf_map_lookup_elem(&lat_waking, &z);
	if (!w || !q || !q->reader)
		return;		/* no read of it seen yet: no reader to count a wake-up of */
	if (flow)
		k = *flow;
	else if (sock_flow(sk, &k))
		return;
	if (!lat_flow(&k, 0))
		return;		/* a flow --latency does not follow */
	w->reader = q->reader;
	w->flow = k;
	w->ns = bpf_ktime_get_ns();
}

/* At an enqueue: TCP's samples by sequence number (above); UDP's, this CPU's sampled datagram
 * into the socket's slots, once it is on its queue (linked: a read unlinks it) */
SEC("tp_btf/sk_data_ready")
int BPF_PROG(ft_lat_queued, struct sock *sk)
{
	struct lat_arriving *a;
	struct ft_lat_sock *q;
	struct ft_lat_flow *f;
	struct ft_lat_slot *slot;
	struct sk_buff *skb;
	__u32 z = 0, i;

	if (sk->sk_protocol == IPPROTO_TCP) {
		tcp_queued(sk);
		note_waking(sk, 0);
		return 0;
	}
	if (sk->sk_protocol != IPPROTO_UDP)
		return 0;
	a = bpf_map_lookup_elem(&lat_arriving, &z);
	/* the flow of the datagram this CPU took in last (a socket may serve many peers) */
	note_waking(sk, a ? &a->last_flow : 0);
	if (!a || !a->skb)
		return 0;
	skb = (struct sk_buff *)a->skb;
	if (!BPF_CORE_READ(skb, prev))
		return 0;	/* not queued yet: another socket's enqueue */
	a->skb = 0;
	q = bpf_sk_storage_get(&lat_socks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	f = lat_flow(&a->flow, 0);
	if (!q || !f)
		return 0;
	i = q->head++ & (FT_LAT_SLOTS - 1);
	slot = &q->slot[i];
	take_slot(f, slot);
	slot->id = (__u64)skb;
	slot->arrival_ns = a->arrival_ns;
	slot->queued_ns = bpf_ktime_get_ns();
	q->flow[i] = a->flow;
	return 0;
}

/* UDP, at a read: the sampled datagrams no longer on the socket's queue are the ones this read
 * took (a datagram is unlinked by the read that takes it, or by a drop at close, or an error) */
SEC("tp_btf/sock_recv_length")
int BPF_PROG(ft_lat_udp_read, struct sock *sk, int ret, int flags)
{
	struct ft_lat_sock *q;
	struct ft_lat_flow *f;
	__u64 now;
	int i;

	if (sk->sk_protocol != IPPROTO_UDP || ret < 0 || (flags & MSG_PEEK))
		return 0;
	q = bpf_sk_storage_get(&lat_socks, sk, 0, 0);
	if (!q)
		return 0;
	q->reader = (__u32)bpf_get_current_pid_tgid();
	now = bpf_ktime_get_ns();
	for (i = 0; i < FT_LAT_SLOTS; i++) {
		struct ft_lat_slot *slot = &q->slot[i];
		struct sk_buff *skb = (struct sk_buff *)slot->id;

		if (!skb || BPF_CORE_READ(skb, prev))
			continue;
		f = lat_flow(&q->flow[i], 0);
		if (f)
			record_delay(f, slot, now);
		slot->id = 0;
	}
	return 0;
}

SEC("tp_btf/sched_waking")
int BPF_PROG(ft_lat_waking, struct task_struct *p)
{
	struct lat_waking *w;
	struct lat_woken *t;
	__u64 now;
	__u32 z = 0;

	w = bpf_map_lookup_elem(&lat_waking, &z);
	if (!w || !w->ns)
		return 0;
	now = bpf_ktime_get_ns();
	if (now - w->ns > LAT_WAKE_WINDOW_NS) {
		w->ns = 0;
		return 0;
	}
	if (p->pid != w->reader)
		return 0;
	w->ns = 0;
	t = bpf_task_storage_get(&lat_woken, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!t)
		return 0;
	t->flow = w->flow;
	t->ns = now;
	t->cpu = bpf_get_smp_processor_id();
	return 0;
}

/* the woken reader running at last: its wake-up delay, and whether another CPU woke it */
SEC("tp_btf/sched_switch")
int BPF_PROG(ft_lat_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct lat_woken *t;
	struct ft_lat_flow *f;
	__u64 now, d;

	t = bpf_task_storage_get(&lat_woken, next, 0, 0);
	if (!t || !t->ns)
		return 0;
	now = bpf_ktime_get_ns();
	d = now > t->ns ? now - t->ns : 0;
	t->ns = 0;
	f = lat_flow(&t->flow, 0);
	if (!f)
		return 0;
	__sync_fetch_and_add(&f->hist_wake[lat_bucket(d) & (FT_LAT_BUCKETS - 1)], 1);
	__sync_fetch_and_add(&f->wakes, 1);
	__sync_fetch_and_add(&f->wake_sum_ns, d);
	if (t->cpu != bpf_get_smp_processor_id())
		__sync_fetch_and_add(&f->cross_wakes, 1);
	return 0;
}

#endif /* FT_LATENCY_BPF_H */
