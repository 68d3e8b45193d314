/* SPDX-License-Identifier: GPL-2.0 */
/* floor.bpf.c shares no types with userspace; this header exists for the build's pattern rule. */
#ifndef __FLOOR_H
#define __FLOOR_H
#endif
