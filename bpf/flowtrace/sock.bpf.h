/* SPDX-License-Identifier: GPL-2.0 */
/* flowtrace, sock: A socket's own counts (sampled timing, --app-hook counters): socket storage given when a
 * connection opens (inet_sock_set_state: once per connection), flushed into the flow map at each
 * read of the maps (the iterator over the storage, or a walk of iter/tcp where the kernel refuses
 * it), at TCP_CLOSE and when the socket is destroyed. Nothing runs per packet or per read. */
#ifndef FT_SOCK_BPF_H
#define FT_SOCK_BPF_H

#include "common.bpf.h"
#include "maps.bpf.h"
#include "account.bpf.h"
#include "skb.bpf.h"

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
	__u64 cgroup;		/* the reader's cgroup v2 id, with pid and comm */
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sock_state);
} socks SEC(".maps");

/* the receive counts every timing mode keeps: bytes, calls, and who read; each read counting
 * for SCALE (window_scale) */
static __always_inline void count_read(struct ft_flow_stats *st, int ret, __u32 scale)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;

	if (ret > 0)
		st->app_bytes += (__u64)ret * scale;
	st->app_calls += scale;
	if (st->app_pid != pid) {
		st->app_pid = pid;
		bpf_get_current_comm(st->app_comm, sizeof(st->app_comm));
		st->app_cgroup = bpf_get_current_cgroup_id();
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
		st->app_cgroup = ss->cgroup;
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
	__u32 seq, scale = window_scale(&seq);

	if (!tot || !scale)
		return;
	st = flow_entry(k, bpf_get_smp_processor_id(), tot);
	if (!st)
		return;
	count_read(st, ret, scale);
	if (s)
		st->last_seen_ns = s->clock_ns;
	if (ret > 0 && !skb_counted_proto(k->proto)) {
		st->rx_bytes += (__u64)ret * scale;
		st->rx_packets += scale;
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
	__u32 cpu, pid, seq, scale;

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
	/* a UDP socket's peer is the one its last connect() named: a server that reads a first
	 * datagram unconnected and then connects to its sender (iperf3's, one socket a stream)
	 * gets its key again. (The peer's port tells; a reconnect to the same port of another
	 * address keeps the old key.) */
	if (ss->flow_ok == 1 && ss->flow.proto == IPPROTO_UDP &&
	    ss->flow.sport != bpf_ntohs(sk->__sk_common.skc_dport))
		ss->flow_ok = 0;
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
		ss->cgroup = bpf_get_current_cgroup_id();
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
			ss->cgroup = bpf_get_current_cgroup_id();
		}
	}
	scale = window_scale(&seq);	/* a read program is on its hook in windows alone */
	if (ret > 0)
		ss->read_bytes += (__u64)ret * scale;
	ss->read_calls += scale;
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

#endif /* FT_SOCK_BPF_H */
