/* SPDX-License-Identifier: GPL-2.0 */
/* flowtrace, withheld: the sampler's clock expiries for which the kernel runs no program. */
#ifndef FT_WITHHELD_BPF_H
#define FT_WITHHELD_BPF_H

#include "common.bpf.h"
#include "maps.bpf.h"
#include "account.bpf.h"
#include "sampling.bpf.h"

/* Some kernels run no BPF program for a cpu-clock event's expiry while the CPU's idle task is
 * current: the VMs steer is built on (6.18.44) on every CPU but the first, though the timer
 * fires at its rate there (hrtimer_expire_entry counts it) and perf reads the event's count.
 * That includes a NET_RX softirq that runs on the idle task, at the exit of the interrupt that
 * woke an idle CPU: where a NIC's receive work runs between packets, and where RPS or RFS puts
 * a flow's on an idle reader's CPU. In a lab flow whose softirq RFS put on that CPU, 64% of
 * its NET_RX expiries reached no program (1,110 of 1,745 in 3 s at 9,973 Hz; 2026-12-01), so
 * the sampler read its NET_RX at a third.
 *
 * This program runs at the end of each perf hrtimer expiry. For the sampler's own event (its
 * program's id in sampler_prog) where ft_sample did not run for this expiry, it counts the
 * expiry and charges it as ft_sample would have. Did not run: perf did not take the expiry as
 * an overflow (the event's count of this tick's overflows, hw.interrupts with its tick,
 * interrupts_seq, is where the previous expiry left it), or took it and ran no program (where
 * another BPF program held bpf_prog_active: ft_sample sets the CPU's sample_ran, which this
 * program clears at each expiry's end). A stamp of ft_sample's clock within half a period
 * did not do: a run that the host preempted, or that walked a long stack, ended past it, and
 * its expiry was counted twice (25 of 29,851 on CPU 0 in one run of the live test, on a
 * host that took 30-60% of the CPUs at times). Charged as
 * ft_sample would have: on the idle task, NET_RX where net_rx_action
 * holds its bpf_net_context (nothing else sets one on the idle task) to the CPU's last skb's
 * flow for one period, as for any sample on the idle task; idle itself is no one's. What it
 * cannot tell (a task current, or a kernel before 6.11) it counts apart and charges to no
 * one. Its cost: a load and a compare on every hrtimer expiry of the host (TCP's pacing timers
 * among them: ~9,500 a second in the lab), 62 ns each here, 57 of them the tracepoint's own
 * dispatch (bench.event_cost against an empty program); three reads of the event on the perf
 * ones. */
SEC("tp_btf/hrtimer_expire_exit")
int BPF_PROG(ft_sample_withheld, struct hrtimer *timer)
{
	struct task_struct *task;
	struct ft_cpu_stats *tot;
	struct ft_flow_key k = {};
	struct ft_sampled x = {};
	struct perf_event *ev;
	struct cpu_state *s;
	__u32 zero = 0, *want, window, in_window;
	__u64 now, period, interrupts, seq;
	int taken;

	if (!in_text((__u64)timer->function, FT_TEXT_PERF_HRTIMER))
		return 0;
	ev = (void *)timer - bpf_core_field_offset(struct perf_event, hw.hrtimer);
	want = bpf_map_lookup_elem(&sampler_prog, &zero);
	if (!want || !*want || BPF_CORE_READ(ev, prog, aux, id) != *want)
		return 0;
	period = BPF_CORE_READ(ev, hw.sample_period);
	s = this_cpu_state();
	tot = totals();
	if (!s || !tot || !period)
		return 0;
	interrupts = BPF_CORE_READ(ev, hw.interrupts);
	seq = BPF_CORE_READ(ev, hw.interrupts_seq);
	taken = (interrupts != s->clock_interrupts || seq != s->clock_interrupts_seq) &&
		s->sample_ran;
	s->clock_interrupts = interrupts;
	s->clock_interrupts_seq = seq;
	s->sample_ran = 0;
	now = bpf_ktime_get_ns();
	if (taken)
		return 0;	/* ft_sample took this one */
	tot->samples_withheld++;
	task = bpf_get_current_task_btf();
	if (task->pid || !bpf_core_field_exists(task->bpf_net_context)) {
		tot->samples_withheld_unknown++;
		s->clock_ns = now;
		return 0;
	}
	x.cpu = bpf_get_smp_processor_id();
	sample_begin(period, s, tot, &x, 0);	/* on the idle task: one period */
	tot->samples_kernel_mode++;
	if (task->bpf_net_context) {
		in_window = window_scale(&window) != 0;
		charge_receive(s, tot, &x, 0, 0, &k, window, in_window, 0);
	}
	return 0;
}

#endif /* FT_WITHHELD_BPF_H */
