"""What ran beside a benchmark: the CPU time of the tasks outside its own process tree, read at
two moments. A bench's truths and figures assume the lab's CPUs were the lab's; the host's steal
says when the hypervisor took them (bench.peer.steal_seconds), and this says when another task of
this machine did (clean clone 201: ~35 CPU-s of the two CPUs' idle time went over the accuracy
matrix with 0.07 CPU-s of steal, and no record said to what).

Kernel threads are counted apart: the lab's own traffic runs some (ksoftirqd, the cpumap and NAPI
kthreads, kworkers), so their time is the workload's as often as a bystander's."""
from __future__ import annotations

import os

PF_KTHREAD = 0x00200000
TOP = 3   # the tasks named beside the total


def read_tasks(proc: str = "/proc") -> dict[int, tuple[str, int, int, bool]]:
    """Every process: pid -> (comm, parent pid, CPU ticks of its threads, whether a kernel
    thread)."""
    tasks = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat", "rb") as f:
                text = f.read().decode(errors="replace")
        except OSError:
            continue   # gone between the listing and its read
        tasks[int(name)] = parse_stat(text)
    return tasks


def parse_stat(text: str) -> tuple[str, int, int, bool]:
    """A /proc/PID/stat line: (comm, parent pid, CPU ticks of its threads, whether a kernel
    thread). The command name may hold spaces and parentheses: it ends at the last ')'."""
    comm = text[text.find("(") + 1:text.rfind(")")]
    rest = text[text.rfind(")") + 2:].split()
    return comm, int(rest[1]), int(rest[11]) + int(rest[12]), bool(int(rest[6]) & PF_KTHREAD)


def descendants(root: int, parents: dict[int, int]) -> set[int]:
    """ROOT and every process below it, by PARENTS (pid -> parent pid)."""
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo += children.get(pid, [])
    return out


def ran_beside(before: dict, after: dict, root: int, tick: float) -> dict:
    """What the processes outside ROOT's tree ran between the reads BEFORE and AFTER
    (read_tasks), in seconds of TICK each: {"seconds", "top": [(name, seconds)], and the same
    for kernel threads: "kthread_seconds", "kthread_top"}. A process that began between them
    counts whole; one that ended is not seen."""
    ours = descendants(root, {pid: t[1] for pid, t in {**before, **after}.items()})
    ran = {False: {}, True: {}}
    for pid, (comm, _, ticks, kthread) in after.items():
        if pid in ours:
            continue
        was = before.get(pid)
        d = ticks - (was[2] if was and was[0] == comm else 0)
        if d > 0:
            ran[kthread][f"{comm}[{pid}]"] = d * tick

    def summary(d: dict) -> tuple[float, list]:
        return (round(sum(d.values()), 2),
                [(k, round(v, 2)) for k, v in sorted(d.items(), key=lambda kv: -kv[1])[:TOP]])
    (s, top), (ks, ktop) = summary(ran[False]), summary(ran[True])
    return {"seconds": s, "top": top, "kthread_seconds": ks, "kthread_top": ktop}


class Bystanders:
    """Started before a measurement, stop() after it: ran_beside for this process's tree."""

    def __init__(self) -> None:
        self._before = read_tasks()

    def stop(self) -> dict:
        return ran_beside(self._before, read_tasks(), os.getpid(), 1 / os.sysconf("SC_CLK_TCK"))


def text(ran: dict) -> str:
    """RAN (ran_beside) in a few words, or '' where nothing outside the tree ran."""
    parts = []
    if ran["seconds"]:
        parts.append(f"other tasks {ran['seconds']:.2f} CPU-s ("
                     + ", ".join(f"{k} {v:.2f}" for k, v in ran["top"]) + ")")
    if ran["kthread_seconds"]:
        parts.append(f"kernel threads {ran['kthread_seconds']:.2f} ("
                     + ", ".join(f"{k} {v:.2f}" for k, v in ran["kthread_top"]) + ")")
    return "; ".join(parts)
