/* SPDX-License-Identifier: GPL-2.0 */
/* flowtrace, recvmsg: The reader's side, a program per receive call (--app-hook tracepoint, fexit, kprobe; UDP
 * in the sampled mode where fexit loads): sock_recv_length (6.3+), else the exit of tcp_recvmsg
 * and udp(v6)_recvmsg. Bytes, calls and the reader's CPU at each read. */
#ifndef FT_RECVMSG_BPF_H
#define FT_RECVMSG_BPF_H

#include "common.bpf.h"
#include "maps.bpf.h"
#include "account.bpf.h"
#include "sock.bpf.h"

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
		count_read(st, ret, 1);
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

/* The sampled mode's UDP reads where the kernel refuses fexit on udp(v6)_recvmsg: the same
 * tracepoint, which every receive call of every socket passes, so a TCP read (counted by its
 * socket's own counters) leaves at the first test. */
SEC("tp_btf/sock_recv_length")
int BPF_PROG(ft_udp_recv_length, struct sock *sk, int ret, int flags)
{
	if (sk->sk_protocol == IPPROTO_UDP)
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

	if (!a) {
		struct ft_cpu_stats *tot = totals();

		if (tot)
			tot->recv_calls_lost++;
		return;
	}
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

#endif /* FT_RECVMSG_BPF_H */
