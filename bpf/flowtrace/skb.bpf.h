/* SPDX-License-Identifier: GPL-2.0 */
/* flowtrace, skb: An skb's flow: where its packets come in (device, namespace, RX queue, NAPI instance),
 * its network and transport headers parsed with probe reads (Ethernet is not needed: the
 * network header is set by now), and the hint the sampler reads later. No program of its own;
 * the parse is the most expensive step of the per-skb programs that call it. */
#ifndef FT_SKB_BPF_H
#define FT_SKB_BPF_H

#include "common.bpf.h"
#include "maps.bpf.h"

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

/* The IPv4 header at DATA (HEADLEN bytes linear): the key's addresses, the transport header's
 * offset and protocol, whether this is a non-first fragment; *LEN cut to the datagram's own
 * length. -1 for anything else. */
static __always_inline int ipv4_header(unsigned char *data, __u32 *len, __u32 headlen,
				       struct ft_flow_key *k, __u32 *l4off, __u8 *proto,
				       int *frag_tail)
{
	struct iphdr iph;
	__u32 tot;

	if (headlen < sizeof(iph) || bpf_probe_read_kernel(&iph, sizeof(iph), data))
		return -1;
	if (iph.version != 4 || iph.ihl < 5)
		return -1;
	*l4off = iph.ihl * 4;
	*proto = iph.protocol;
	*frag_tail = (bpf_ntohs(iph.frag_off) & IP_OFFSET) != 0;
	tot = bpf_ntohs(iph.tot_len);
	/* short frames carry Ethernet padding; tot_len 0 means BIG TCP: trust skb->len */
	if (tot && tot < *len)
		*len = tot;
	__builtin_memcpy(k->saddr, &iph.saddr, 4);
	__builtin_memcpy(k->daddr, &iph.daddr, 4);
	k->family = 4;
	return 0;
}

/* The IPv6 header and its extension headers at DATA, as ipv4_header. */
static __always_inline int ipv6_header(unsigned char *data, __u32 *len, __u32 headlen,
				       struct ft_flow_key *k, __u32 *l4off, __u8 *proto,
				       int *frag_tail)
{
	struct ipv6hdr ip6;
	__u32 plen, off;
	__u8 next;
	int i;

	if (headlen < sizeof(ip6) || bpf_probe_read_kernel(&ip6, sizeof(ip6), data))
		return -1;
	if (ip6.version != 6)
		return -1;
	plen = bpf_ntohs(ip6.payload_len);
	if (plen && plen + sizeof(ip6) < *len)
		*len = plen + sizeof(ip6);
	off = sizeof(ip6);
	next = ip6.nexthdr;
	for (i = 0; i < MAX_IPV6_EXT; i++) {
		__u8 ext[8];

		if (next != IPPROTO_HOPOPTS && next != IPPROTO_ROUTING &&
		    next != IPPROTO_DSTOPTS && next != IPPROTO_FRAGMENT && next != IPPROTO_AH)
			break;
		if (off + 8 > headlen || bpf_probe_read_kernel(ext, 8, data + off))
			return -1;
		if (next == IPPROTO_FRAGMENT) {
			*frag_tail = ((ext[2] << 8 | ext[3]) & 0xFFF8) != 0;
			off += 8;
		} else {
			off += ipv6_ext_len(next, ext[1]);
		}
		next = ext[0];
	}
	*l4off = off;
	*proto = next;
	__builtin_memcpy(k->saddr, &ip6.saddr, 16);
	__builtin_memcpy(k->daddr, &ip6.daddr, 16);
	k->family = 6;
	return 0;
}

/* parse the network and transport headers at DATA, an skb's data of LEN bytes (HEADLEN of them
 * linear) and Ethernet protocol ETH_PROTO (netif_receive_skb runs after eth_type_trans, before the
 * network header offset is reset). Returns 0 and fills the key, the transport payload length and,
 * where TCP_SEQ is given, a TCP segment's sequence number; -1 for anything that is not TCP/UDP
 * over IPv4/IPv6. */
static __always_inline int headers_flow(unsigned char *data, __u32 len, __u32 headlen,
					__u16 eth_proto, struct ft_flow_key *k, __u64 *payload,
					__u32 *tcp_seq)
{
	__u32 l4off = 0;
	__u8 proto = 0;
	int frag_tail = 0;

	if (eth_proto == ETH_P_IP) {
		if (ipv4_header(data, &len, headlen, k, &l4off, &proto, &frag_tail))
			return -1;
	} else if (eth_proto == ETH_P_IPV6) {
		if (ipv6_header(data, &len, headlen, k, &l4off, &proto, &frag_tail))
			return -1;
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
		if (tcp_seq)
			*tcp_seq = (__u32)th[4] << 24 | th[5] << 16 | th[6] << 8 | th[7];
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

/* an skb the program was handed (typed: its fields are read directly), and where TCP_SEQ is
 * given a TCP segment's sequence number */
static __always_inline int skb_flow_seq(struct sk_buff *skb, struct ft_flow_key *k, __u64 *payload,
					__u32 *tcp_seq)
{
	return headers_flow(skb->data, skb->len, skb->len - skb->data_len, bpf_ntohs(skb->protocol),
			    k, payload, tcp_seq);
}

static __always_inline int skb_flow(struct sk_buff *skb, struct ft_flow_key *k, __u64 *payload)
{
	return skb_flow_seq(skb, k, payload, 0);
}

/* an skb past the layer that set its network header, wherever that layer left its data (a queued
 * skb's points at its payload, a dropped one's anywhere): its headers read from the network header */
static __always_inline int pulled_skb_flow(const struct sk_buff *skb, struct ft_flow_key *k,
					   __u64 *payload, __u32 *tcp_seq)
{
	__u64 data = (__u64)skb->data, nh;
	__u32 len = skb->len, headlen = skb->len - skb->data_len, shift;
	__u16 nh_off = skb->network_header;

	if (nh_off == (__u16)~0U)
		return -1;
	nh = (__u64)skb->head + nh_off;
	if (data >= nh) {		/* headers already pulled: count them back in */
		shift = data - nh;
		len += shift;
		headlen += shift;
	} else {			/* dropped below the network layer */
		shift = nh - data;
		if (shift > headlen)
			return -1;
		len -= shift;
		headlen -= shift;
	}
	return headers_flow((unsigned char *)nh, len, headlen, bpf_ntohs(skb->protocol), k,
			    payload, tcp_seq);
}

/* Task stacks are 16 KiB on x86_64 and arm64 (32 KiB under KASAN, where a context in a stack's
 * upper half is taken for a softirq's: a kthread's samples then go as with one slot) */
#define TASK_STACK_SURE		(16 << 10)

/* the hint slot of the receive context the current task is in, as the sampler sees it too: a
 * bpf_net_context held on another stack than the task's is a softirq's (net_rx_action's, on the
 * irq stack); none, or one on the task's stack, is task-context work (a cpumap kthread holds none
 * while its skbs go up; threaded NAPI and ksoftirqd hold one on their own stacks) */
static __always_inline int hint_slot(struct task_struct *task)
{
	__u64 held, base;

	if (!bpf_core_field_exists(task->bpf_net_context) || !cfg.softirq_stacks)
		return HINT_SOFTIRQ;
	held = (__u64)task->bpf_net_context;	/* a load: a probe read cost ~70 ns an skb */
	if (!held)
		return HINT_TASK;
	base = (__u64)task->stack;
	return held >= base && held < base + TASK_STACK_SURE ? HINT_TASK : HINT_SOFTIRQ;
}

/* the sampler's hint: what it needs to parse that skb's headers later, read while it is alive */
static __always_inline void set_hint(struct cpu_state *s, struct sk_buff *skb)
{
	int slot = hint_slot(bpf_get_current_task_btf());
	struct skb_hint *h = &s->hint[slot & 1];

	h->data = (__u64)skb->data;
	h->len = skb->len;
	h->headlen = skb->len - skb->data_len;
	h->proto = skb->protocol;
}

/* the flow of the last skb of the receive context the sample interrupted: its buffer may have
 * been freed since, so a wrong or unparsable result is possible (headers_flow reads with probe
 * reads; the sampler then charges no flow) */
static __always_inline int hint_flow(struct cpu_state *s, struct ft_flow_key *k)
{
	struct skb_hint *h = &s->hint[hint_slot(bpf_get_current_task_btf()) & 1];
	__u64 payload;

	if (!h->data)
		return -1;
	return headers_flow((unsigned char *)h->data, h->len, h->headlen, bpf_ntohs(h->proto), k,
			    &payload, 0);
}

#endif /* FT_SKB_BPF_H */
