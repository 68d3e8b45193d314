"""The default mode's per-packet work, held to a budget: its programs that run per skb and per NAPI
poll, by their size as the kernel runs them and by what they cost beyond an empty program on the
same tracepoint (bpf/floor.bpf.c), both attached at once under the same lab flow and timed by the
kernel's own per-program statistics (kernel.bpf_stats_enabled). Absolute times drift with the
VM's hour; the difference between two programs run by the same events drifts much less, and the
size not at all."""
import os

import pytest

from helpers import CALM, alone, live
from bench.event_cost import beyond_floor, floors_of, measure

pytestmark = [live, alone]

SECONDS, WINDOWS = 4, 4
# Instructions as the verifier leaves them (xlated), on the kernel they were counted on: any
# growth fails, so that a change to a per-packet program comes with its cost measured
# (python -m bench.event_cost) and this figure raised in the same commit.
# Raised 2026-11-29 from 670 and 152 for the windows' scale (each count times what it stands
# for): bench.event_cost --seconds 10 before and after, ft_skb_hint +31.5 and +31.9 ns beyond
# floor_skb, ft_napi_poll +14.0 and +19.4 beyond floor_napi (one run each).
BUDGET_INSNS = {"6.18": {"ft_skb_hint": 692, "ft_napi_poll": 171}}
# The default, in its windows (bench mode sampled-windows): the same programs built for the
# windows (their scale, and a TCP skb counted to its flow), which run a tenth of the time.
# 2026-11-30: ft_skb_hint 685 and ft_napi_poll 188 instructions. Beyond an empty program
# ft_skb_hint read +170..+253 ns in calm windows (a TCP skb's header parse and flow-map update:
# misses on the packet and the map, the key's hash), by the VM's kind and hour, which left a
# budget of absolute ns 12 ns of room in the last calm clone. So it is held beyond
# floor_skb_flow (bpf/floor.bpf.c), that work frozen and attached ahead of it, which pays the
# host's part as it does (itself +176..+207 beyond the empty program): ft_skb_hint then reads
# -36..+5 ns beyond it (the least of each run's two windows -8..-36, 10 runs), and with one
# clock read more in its windowed path (a mutation, 2026-11-30) +10..+45 (the least: +10, +20,
# +41 in 3 runs). Budget +15: 23 ns above the highest baseline (the least of two windows is
# judged, so a slow spell must last both); the clock read fails 2 runs in 3, 100 ns more every
# run. ft_napi_poll beyond the empty program +8..+13 here, +23..+42 on another VM: 85 as before
# Raised 2026-11-30 from 685 for the windows' seed of a CPU's ring (seed_pool, a subprogram called
# on a CPU's first skb of a window): ft_skb_hint beyond floor_skb_flow, the old and the new object
# side by side in 6 pairs (the least of two 2 s windows each), -29.5..-16.6 and -27.5..-1.9 ns,
# the new one +2.0..+14.7 ns above the old in each pair (median +5.3).
# Raised 2026-12-01 from 745 for the UDP reads' fallback's ring record, which carries the time
# of the datagram that rang (note_udp: a clock read and an 8-byte record where the flag was
# clear, once a second at most; the per-datagram path is the flag's load and test as before):
# the old and the new object side by side in 4 pairs, the least of two 2 s windows each, beyond
# floor_skb_flow -68.7/-34.8/-26.5/-32.7 ns old, -67.0/-68.4/-66.0/-46.2 new, on a host that
# stole 2-19% of the CPUs (no pair calm enough to be judged); --windows off 663 -> 666 (692)
WINDOWED_BUDGET_INSNS = {"6.18": {"ft_skb_hint": 748, "ft_napi_poll": 188}}
WINDOWED_BUDGET_NS = {"ft_skb_hint": 15.0, "ft_napi_poll": 85.0}
# ns per event beyond the empty program on the same tracepoint, the least of WINDOWS 1 s windows.
# 19 runs: ft_skb_hint 32-38 most of the time, up to 49 in the VM's slow spells (a neighbour in
# the host's caches slows a program that touches memory more than an empty one, and more than a
# fixed program doing a per-CPU lookup and three stores, which moved 3 ns where ft_skb_hint moved
# 10); ft_napi_poll 14-20, up to 24. A budget 11 ns above the slowest spell seen holds them
# and fails 25 ns more a packet outside them (a budget a 20 ns regression would fail everywhere
# would fail the slow spells themselves). On another kind of VM (kernel 6.18.44-fc-v657) the
# same figures read ft_napi_poll 35-55 with the floor attached after steer's programs: the first
# program on napi_poll to read the napi struct's device pays its cache miss (20-25 ns there), so
# bench.event_cost attaches the floor first, whose floor_napi_count reads it; so attached, 17-22
# and ft_skb_hint 22-35 there (4 runs), and a clock read more in ft_napi_poll's backlog branch
# read +59-65 (failed).
# On that kind of VM on 2026-12-01 (clean clone 163) ft_skb_hint read +66..+124 beyond the empty
# program in calm windows, at this commit and at an earlier one alike, ft_napi_poll +46..+67: the
# host's misses, not their work. So each is held beyond its work frozen, attached ahead of it in
# this mode (bench.event_cost.WINDOWS_OFF_FLOORS, bpf/floor.bpf.c): floor_skb_hint (the hint's
# stores and the hash's skip), floor_napi_count (a backlog poll's counts). There ft_skb_hint read
# -9.2..+11.0 (the least of each run's four windows -4.2, -9.2, -5.6; 3 runs) and, with one clock
# read more (a mutation), +39.1..+71.2 (the least +39.1, +49.1); ft_napi_poll +3.7..+36.8 (the
# least +3.7..+27.5, 5 runs). Budgets: ft_skb_hint +20, 24 ns above the highest least, under the
# mutation's least by 19; ft_napi_poll 35 as before, now beyond the reference.
BUDGET_NS = {"ft_skb_hint": 20.0, "ft_napi_poll": 35.0}
# The kernel times a program by a clock that runs on while the host has the CPU (steal), so that
# a preemption inside one run is that run's time: 1 ms of it inside ft_napi_poll in a 1 s window
# of 75,000 polls is +13 ns an event. A share S of the CPUs stolen in small pieces adds S times
# a program's own ns in expectation (+0.4 ns beyond the floor at 2%), and the caches the host's
# other work left cold on return add more to a program that touches more memory: clean clone
# 141 (130 CPU-s stolen over the run, 2.55 of them in one 3 s scenario of the matrix) read
# ft_napi_poll +43..+47 ns in all four windows, where 12-25 is usual; clean clone 144, on a VM
# whose calm hours read ft_skb_hint +205..+245 in windows, read +289 and +338 in two 2 s windows
# where the host took 4.0% and 1.5% (runs at two thirds of their usual rate). Windows where the
# host took more than CALM of the CPUs (helpers.CALM, 0.5%: a /proc/stat tick of steal a second
# of the two CPUs) are shown, not judged; where every window was so, the times are not judged
# (a skip that says why) and the instructions still are.
# events a window needs: the mean cost of 5,000 events moves by 1.4 ns for a spread of 100 ns
# an event between them, well inside the budget's 11 ns margin
MIN_EVENTS = 5_000


def _kernel() -> str:
    return ".".join(os.uname().release.split(".")[:2])


@pytest.mark.parametrize("mode", ["sampled-windows", "sampled"],
                         ids=["default-in-windows", "windows-off"])
def test_the_default_modes_per_packet_work_stays_in_its_budget(mode, held):
    """The sampled tracer's ft_skb_hint (per skb) and ft_napi_poll (per poll) against
    BUDGET_INSNS and BUDGET_NS (--windows off), WINDOWED_BUDGET_* in the default's windows,
    where they run a tenth of the time: two measurement windows of SECONDS / 2, which hold
    15,000 to 19,000 skbs between them there. Judged: the least of the windows the host left
    calm (CALM). Checked by mutation once, with --windows off: ft_skb_hint with a
    compare and a store more (10 instructions) failed the first; with a bpf_ktime_get_ns()
    more, the second (+86 ns beyond the floor, against 35-50). In windows (2026-11-30, the
    instructions' budget set aside): ft_skb_hint with three clock reads more read +323..+392
    ns (against +205..+245 that hour) and failed 2 of 2 runs; with one more, +261..+340, and
    failed 2 of 3 (the instructions, 691 against 685, fail it every time). Since ft_skb_hint is
    held beyond floor_skb_flow in windows, one clock read more read +10..+45 and failed 2 of 3
    by its ns (WINDOWED_BUDGET_NS). With --windows off ft_skb_hint is held beyond floor_skb_hint
    (its work frozen) since 2026-12-01: one clock read more read +39 and +49 (the least of four
    windows, 2 runs) against a budget of +20, and failed both."""
    windowed = mode == "sampled-windows"
    parts, res, sizes, steal = measure(mode, SECONDS, windows=2 if windowed else WINDOWS)
    assert res.error is None, res.error
    beyond = [beyond_floor(p, floors_of(mode)) for p in parts]
    budgets = WINDOWED_BUDGET_NS if windowed else BUDGET_NS
    # judged: the windows the host left calm that hold enough events for their mean (a window
    # the host slowed holds fewer: clean clone 173, whose host took 28 CPU-s over the run, had
    # 4,770 skbs in one, where 7,500-9,500 is usual)
    calm = [b for b, s, p in zip(beyond, steal, parts)
            if s <= CALM and all(p[prog]["runs"] > MIN_EVENTS for prog in budgets)]
    insns = (WINDOWED_BUDGET_INSNS if windowed else BUDGET_INSNS).get(_kernel())
    for prog, budget in budgets.items():
        runs = [p[prog]["runs"] for p in parts]
        print(f"{prog}: {sizes[prog][0]} instructions, {sizes[prog][1]} bytes jited; {runs} runs, "
              f"beyond {floors_of(mode)[prog]} {', '.join(f'{b[prog]:+.1f}' for b in beyond)} ns "
              f"(budget {budget:g}); the host took {', '.join(f'{s:.1%}' for s in steal)}")
        # the lab ran: a thousand events in a window at least, which a host's steal does not
        # take away (a clean clone whose host took 217 CPU-s over the run had 8,530 polls in a
        # 1 s window, where 10,000-24,000 is usual; clean clone 188, the host taking 27% and
        # 40% of the CPUs, 4,486 and 2,925 skbs in windows, where 7,500-9,500 is usual). Whether
        # a window holds enough for its mean to be judged is MIN_EVENTS, above
        assert max(runs) > MIN_EVENTS / 5, (prog, runs)
        if insns:
            assert sizes[prog][0] <= insns[prog], (
                f"{prog} grew to {sizes[prog][0]} instructions (budget {insns[prog]}): measure "
                "its cost with python -m bench.event_cost and raise BUDGET_INSNS with it")
    if not calm:
        took = ", ".join(f"{x:.1%}" for x in steal)
        pytest.skip(f"no window both calm and full: the host took {took} of the CPUs (calm: "
                    f"{CALM:.1%}), and a window needs {MIN_EVENTS:,} events of each program: "
                    "ns per event not judged, instructions held")
    for prog, budget in budgets.items():
        floor = floors_of(mode)[prog]
        held(f"{prog}{' in windows' if windowed else ''}: ns per event beyond "
             f"{'an empty program' if floor in ('floor_skb', 'floor_napi') else floor}",
             min(b[prog] for b in calm), -100.0, budget)
