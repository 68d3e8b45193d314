/* SPDX-License-Identifier: GPL-2.0 */
/* Protocol numbers and parsing limits shared by the tracer (flowtrace.bpf.c, which parses skbs
 * with probe reads) and the XDP steering parser (parsing.bpf.h, with a cursor): one place, so the
 * two agree on what they can see. vmlinux.h has the types but not these #defines. */
#ifndef __PROTOCOLS_BPF_H
#define __PROTOCOLS_BPF_H

#define ETH_P_IP	0x0800
#define ETH_P_IPV6	0x86DD
#define ETH_P_8021Q	0x8100
#define ETH_P_8021AD	0x88A8
#define IPPROTO_HOPOPTS	0
#define IPPROTO_TCP	6
#define IPPROTO_UDP	17
#define IPPROTO_ROUTING	43
#define IPPROTO_FRAGMENT 44
#define IPPROTO_AH	51
#define IPPROTO_DSTOPTS	60
#define IP_MF		0x2000
#define IP_OFFSET	0x1FFF
#define MAX_IPV6_EXT	6	/* enough for hop-by-hop, routing, two destination options, AH */

/* the length of an IPv6 extension header from its second byte: AH counts 4-byte units minus 2,
 * the others 8-byte units minus 1 */
static __always_inline __u32 ipv6_ext_len(__u8 proto, __u8 hdrlen)
{
	return proto == IPPROTO_AH ? ((__u32)hdrlen + 2) * 4 : ((__u32)hdrlen + 1) * 8;
}

#endif /* __PROTOCOLS_BPF_H */
