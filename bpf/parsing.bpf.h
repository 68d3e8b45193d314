/* SPDX-License-Identifier: GPL-2.0 */
/* Packet parsing for XDP with a cursor.
 *
 * The contract: every parse_* helper takes the cursor and data_end, checks bounds before it reads,
 * advances the cursor past the header, and returns the next protocol (an EtherType or an IP
 * protocol number), or -1 when the packet is too short or malformed. A caller that gets -1 must
 * leave the packet alone.
 */
#ifndef __PARSING_BPF_H
#define __PARSING_BPF_H

#include <bpf/bpf_endian.h>
#include "protocols.bpf.h"

#define MAX_VLAN_TAGS	2	/* 802.1ad outer + 802.1Q inner: the stacks switches build */

struct cursor {
	void *pos;
};

struct vlan_tag {
	__be16 tci;
	__be16 proto;
};

static __always_inline int parse_ethhdr(struct cursor *c, void *end)
{
	struct ethhdr *eth = c->pos;
	__u16 proto;
	int i;

	if ((void *)(eth + 1) > end)
		return -1;
	c->pos = eth + 1;
	proto = eth->h_proto;
#pragma unroll
	for (i = 0; i < MAX_VLAN_TAGS; i++) {
		struct vlan_tag *v = c->pos;

		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		if ((void *)(v + 1) > end)
			return -1;
		proto = v->proto;
		c->pos = v + 1;
	}
	return bpf_ntohs(proto);
}

/* IPv4 with options; a fragment returns -1: only its first piece would carry the ports, and
 * steering the pieces of one datagram to different CPUs would reorder them */
static __always_inline int parse_iphdr(struct cursor *c, void *end, struct iphdr **out)
{
	struct iphdr *ip = c->pos;
	__u32 hl;

	if ((void *)(ip + 1) > end)
		return -1;
	if (ip->version != 4 || ip->ihl < 5)
		return -1;
	hl = ip->ihl * 4;
	if (c->pos + hl > end)
		return -1;
	if (bpf_ntohs(ip->tot_len) < hl)
		return -1;
	if (ip->frag_off & bpf_htons(0x3FFF))	/* MF or a fragment offset */
		return -1;
	c->pos += hl;
	*out = ip;
	return ip->protocol;
}

/* IPv6 with the common extension headers skipped; fragments return -1 as for IPv4 */
static __always_inline int parse_ip6hdr(struct cursor *c, void *end, struct ipv6hdr **out)
{
	struct ipv6hdr *ip6 = c->pos;
	__u8 next;
	int i;

	if ((void *)(ip6 + 1) > end)
		return -1;
	if (ip6->version != 6)
		return -1;
	c->pos = ip6 + 1;
	next = ip6->nexthdr;
#pragma unroll
	for (i = 0; i < MAX_IPV6_EXT; i++) {
		__u8 *h = c->pos;
		__u32 len;

		if (next == IPPROTO_FRAGMENT)
			return -1;
		if (next != IPPROTO_HOPOPTS && next != IPPROTO_ROUTING && next != IPPROTO_DSTOPTS &&
		    next != IPPROTO_AH)
			break;
		if ((void *)(h + 2) > end)
			return -1;
		len = ipv6_ext_len(next, h[1]);
		if (c->pos + len > end)
			return -1;
		next = h[0];
		c->pos += len;
	}
	*out = ip6;
	return next;
}

static __always_inline int parse_tcphdr(struct cursor *c, void *end, struct tcphdr **out)
{
	struct tcphdr *th = c->pos;
	__u32 hl;

	if ((void *)(th + 1) > end)
		return -1;
	hl = th->doff * 4;
	if (hl < sizeof(*th) || c->pos + hl > end)
		return -1;
	c->pos += hl;
	*out = th;
	return 0;
}

static __always_inline int parse_udphdr(struct cursor *c, void *end, struct udphdr **out)
{
	struct udphdr *uh = c->pos;

	if ((void *)(uh + 1) > end)
		return -1;
	if (bpf_ntohs(uh->len) < sizeof(*uh))
		return -1;
	c->pos = uh + 1;
	*out = uh;
	return 0;
}

#endif /* __PARSING_BPF_H */
