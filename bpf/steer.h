/* SPDX-License-Identifier: GPL-2.0 */
/* Types and constants shared by steer.bpf.c and steer/abi/xdp.py: tests/artifacts/test_build.py checks
 * the structs against the object's BTF and the constants by compiling this header. */
#ifndef __STEER_H
#define __STEER_H

enum steer_limits {
	STEER_MAX_RULES = 16384,	/* rule ids index rule_stats; 10,000 rules is the benchmark's top */
	STEER_MAX_MASKS = 32,		/* one per subset of the five fields */
};

/* which fields of a rule must match */
enum steer_field {
	STEER_F_PROTO = 0x01,
	STEER_F_SRC = 0x02,
	STEER_F_SPORT = 0x04,
	STEER_F_DST = 0x08,
	STEER_F_DPORT = 0x10,
};

/* the packet's receive-direction tuple with the fields outside MASK zeroed; family is zero unless
 * an address is in the mask, so "dport=5201" matches IPv4 and IPv6 alike */
struct steer_rule_key {
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport;		/* host byte order */
	__u16 dport;
	__u8 proto;
	__u8 family;		/* 4, 6, or 0 */
	__u8 mask;		/* STEER_F_* */
	__u8 pad;
};

struct steer_rule {
	__u32 cpu;
	__u32 id;		/* index into rule_stats */
};

struct steer_rule_stats {
	__u64 packets;
	__u64 bytes;
};

struct steer_counters {
	__u64 passed;		/* parsed, no rule matched */
	__u64 unparsed;		/* not Ethernet/IP/TCP/UDP as we understand them, or fragments */
	__u64 redirected;
	__u64 redirect_failed;	/* a rule matched but its CPU has no cpumap entry */
};

/* the masks in use, most specific first: a packet is looked up once per mask, and the first
 * match wins. Userspace rewrites the whole entry in one update when rules change. */
struct steer_masks {
	__u32 count;
	__u8 mask[STEER_MAX_MASKS];
};

#endif /* __STEER_H */
