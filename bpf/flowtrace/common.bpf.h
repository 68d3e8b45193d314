/* SPDX-License-Identifier: GPL-2.0 */
/* flowtrace, common: what every part of flowtrace includes first: the kernel's types (vmlinux.h,
 * for CO-RE), libbpf's helpers, the structs shared with userspace (flowtrace.h) and the
 * protocols' constants. */
#ifndef FT_COMMON_BPF_H
#define FT_COMMON_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "flowtrace.h"
#include "protocols.bpf.h"
#include "../run_clock.bpf.h"

#endif
