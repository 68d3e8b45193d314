"""What the kernel takes in on top of the tasks that no BPF program runs in: the bytes that no BPF
tracer, steer's or another, can count, measured by the kernel's own event tracing instead.

On this VM kind no BPF program runs while a thread of PID 1 (the VM's own agent) is the current
task, in its own context or in a softirq on top of it (2026-12-01, a TCP flow whose softirq RFS
puts on its reader's CPU: of the net:netif_receive_skb events the kernel's event tracing recorded
on top of those threads, 49 of 49 reached no BPF program, and 2 of 44,000 elsewhere, within the
matching's noise; a BPF program on sched:sched_switch saw the threads switched in, never out;
bpftrace's programs missed the same skbs). What a softirq takes in there reaches the socket
uncounted: with RFS, an IPI from the sending CPU lands while the agent runs 10-100 times in a 3 s
run, 0.02% to 0.3% of the flow's bytes. On a host where BPF runs in every task the same count is
what steer did see, and a bound widened by it is only that much looser.

Counted with an ftrace instance of its own (not the global buffer, which others may use):
net:netif_receive_skb in those threads, each event's length (the skb from its network header on:
the payload and at most its IP and transport headers), stamped with CLOCK_MONOTONIC."""

from __future__ import annotations

import os
import re

from steer.kernel.mounts import ensure_tracefs

INSTANCE = "steer-bench-unseen"
EVENT = "events/net/netif_receive_skb"
_LINE = re.compile(r"\s(\d+)\.(\d+): netif_receive_skb: dev=\S+ skbaddr=\S+ len=(\d+)")


def bytes_between(events: list[tuple[int, int]], since_ns: int = 0,
                  until_ns: int | None = None) -> int:
    """The bytes of EVENTS (UnseenReceive.events()) from SINCE_NS to UNTIL_NS, CLOCK_MONOTONIC."""
    return sum(n for t, n in events if t >= since_ns and (until_ns is None or t <= until_ns))


def agent_threads() -> list[int]:
    """PID 1's threads, where this VM kind runs no BPF program."""
    try:
        return sorted(int(t) for t in os.listdir("/proc/1/task"))
    except OSError:
        return []


class UnseenReceive:
    """From construction to close(): the skbs the kernel took in while one of agent_threads() was
    the current task, as (CLOCK_MONOTONIC ns, bytes) in events(). Where tracefs cannot be had,
    events() is empty and error says why (the bound it widens is then the plain one)."""

    def __init__(self):
        self.error = None
        self.dir = None
        pids = agent_threads()
        try:
            root = ensure_tracefs()
            path = os.path.join(root, "instances", INSTANCE)
            if os.path.isdir(path):
                os.rmdir(path)   # left by a run that was killed
            os.mkdir(path)
            self.dir = path
            self._write("trace_clock", "mono")
            self._write("buffer_size_kb", "2048")
            self._write(f"{EVENT}/filter",
                        " || ".join(f"common_pid == {p}" for p in pids) or "common_pid == -1")
            self._write(f"{EVENT}/enable", "1")
        except Exception as e:   # noqa: BLE001 -- a truth that cannot be had widens nothing
            self.error = f"ftrace instance: {e}"
            self.close()

    def _write(self, name: str, value: str) -> None:
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(value)

    def events(self) -> list[tuple[int, int]]:
        if not self.dir:
            return []
        with open(os.path.join(self.dir, "trace")) as f:
            return [(int(m[1]) * 10**9 + int(m[2]) * 1000, int(m[3]))
                    for m in map(_LINE.search, f) if m]

    def bytes(self, since_ns: int = 0, until_ns: int | None = None) -> int:
        return bytes_between(self.events(), since_ns, until_ns)

    def close(self) -> None:
        if not self.dir:
            return
        try:
            self._write(f"{EVENT}/enable", "0")
        except OSError:
            pass
        try:
            os.rmdir(self.dir)
        except OSError:
            pass
        self.dir = None
