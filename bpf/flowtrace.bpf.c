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
#include "flowtrace/common.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* The programs, by concern. Each part includes what it uses and compiles on its own
 * (tests/artifacts/test_build.py); the hot paths are skb.bpf.h and sampling.bpf.h. One object:
 * the parts are included, not linked. */
#include "flowtrace/skb.bpf.h"
#include "flowtrace/kthread.bpf.h"
#include "flowtrace/softirq.bpf.h"
#include "flowtrace/arrival.bpf.h"
#include "flowtrace/receive.bpf.h"
#include "flowtrace/drops.bpf.h"
#include "flowtrace/cpumap.bpf.h"
#include "flowtrace/sock.bpf.h"
#include "flowtrace/recvmsg.bpf.h"
#include "flowtrace/syscall.bpf.h"
#include "flowtrace/sampling.bpf.h"
#include "flowtrace/withheld.bpf.h"
#include "flowtrace/latency.bpf.h"
