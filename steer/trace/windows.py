"""Sampled timing in windows: the per-packet, per-read and per-interrupt programs on their hooks
for one window of each cycle (50 ms of every 500 ms by default), what they count there standing
for the whole cycle. The sampler runs all the time at its rate: the CPUs' times are its samples',
as without windows, and a receive sample between windows goes to a flow drawn from its CPU's
last receive samples inside windows (bpf/flowtrace/sampling.bpf.h), so only the flows' shares
are the windows', from a tenth of the samples.

Why: on a tracepoint, a BPF program costs its dispatch on every event even where it returns at
once; on this kind of VM (retpolines) an empty program on netif_receive_skb and one on napi_poll
add ~6% to a one-byte TCP round trip (bench/floor.bpf.c's programs attached in turns around
bench/roundtrip.c; CHANGELOG, 2026-11-29). No per-packet design fits a 1% budget while
attached; one attached a tenth of the time costs a tenth. (The sampler, at its rate all the time,
costs what it costs without windows; run inside the windows alone at ten times its rate, it
slowed what it measured there and read a CPU's NET_RX a third above its time over the whole.)

How the counts stay whole: the BPF side counts only while `windows[0].scale` is set, and each
event there for SCALE events (the cycle over the window, an integer). Userspace opens a window
after it put the programs on their hooks and closes it before it takes them off, and opens the
next one SCALE window-lengths after the last opened: so each window's counts, times SCALE, stand
for exactly the time from its opening to the next one's. A late wake-up leaves a gap, which the
next window covers by running longer. A read between windows (the tracer's reads wait for one)
then finds the cycles before it each counted whole; the figures of a flow that changes between
windows are the window's sample of it. A read asked for within FIRST_READ_WAIT of the start is
taken before the first window opens (nothing is counted in windows yet), so that a command's
first read, its baseline, does not wait out a cycle. Counts from the sockets' own counters (TCP
bytes) and the per-connection programs are exact as before.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

DEFAULT_WINDOW = 0.05
DEFAULT_CYCLE = 0.5
# how long the first window waits for a first read (a command reads its baseline right after
# the tracer starts): ~0.5 s a command of steer flows, top, sweep where it waited for the first
# boundary; the windows stand for the time from their first opening on, after the baseline
FIRST_READ_WAIT = 0.25


class WindowsError(ValueError):
    """A --windows value steer cannot use; str() is the one line to show."""


@dataclass(frozen=True)
class Windows:
    window: float   # seconds on the hooks in each cycle
    cycle: float    # seconds from one window's opening to the next

    @property
    def scale(self) -> int:
        """What an event in a window counts for: the cycle over the window."""
        return max(1, round(self.cycle / self.window))


DEFAULT_WINDOWS = Windows(DEFAULT_WINDOW, DEFAULT_CYCLE)   # the command line's, for sampled timing


def default_windows(timing: str) -> Windows | None:
    """The commands' windows for --timing TIMING: the default's where the timing may be sampled
    (auto takes sampled where the kernel runs it), none where every event is timed or counted."""
    return DEFAULT_WINDOWS if timing in ("sampled", "auto") else None


def parse_windows(text: str) -> Windows | None:
    """'off' (None: always on their hooks), or 'WINDOW/CYCLE' in milliseconds ('50/500'). The
    cycle a whole multiple of the window (the counts scale by an integer), 1 ms to 60 s."""
    text = text.strip()
    if text == "off":
        return None
    try:
        w, c = (float(x) for x in text.split("/"))
    except ValueError:
        raise WindowsError(f"--windows: 'off' or WINDOW/CYCLE in milliseconds such as "
                           f"{DEFAULT_WINDOW * 1e3:.0f}/{DEFAULT_CYCLE * 1e3:.0f}, not {text!r}")
    if not (1 <= w <= c <= 60_000):
        raise WindowsError(f"--windows {text}: the window from 1 ms to the cycle, the cycle up "
                           "to 60000 ms")
    if abs(c / w - round(c / w)) > 1e-6:
        raise WindowsError(f"--windows {text}: the cycle must be a whole multiple of the window "
                           "(each event in a window counts for cycle/window of them)")
    return Windows(w / 1e3, c / 1e3)


class Schedule:
    """When each window opens and how long it runs. The windows stand for the time from the first
    opening on, each for scale times its actual length, one after the other: the next opens where
    what they stand for ends. One that opens late (the thread woke late) runs longer by the gap
    over scale, and so also stands for the gap before it. Pure: the clock is the caller's."""

    def __init__(self, windows: Windows):
        self.windows = windows
        self.start: int | None = None   # ns, the first opening
        self.represented = 0            # ns the closed windows stand for, from start on
        self.opened: int | None = None  # ns, the open window's opening

    def length(self, now: int) -> int:
        """The window opening at NOW (ns): how long it should run, in ns."""
        if self.start is None:
            self.start = now
        self.opened = now
        base = self.windows.window * 1e9
        gap = (now - self.start) - self.represented   # time no window stood for
        return int(min(2 * base, base + max(0, gap) / self.windows.scale))

    def closed(self, now: int) -> int:
        """The open window closed at NOW: when the next should open (ns)."""
        self.represented += self.windows.scale * (now - self.opened)
        self.opened = None
        return self.start + self.represented


class WindowRunner(threading.Thread):
    """Opens and closes the windows of TRACER until stop(); serves reads between windows."""

    def __init__(self, windows: Windows, open_window, close_window, clock=time.monotonic_ns):
        # (the clock is CLOCK_MONOTONIC, bpf_ktime_get_ns()'s)
        super().__init__(name="steer-windows", daemon=True)
        self.schedule = Schedule(windows)
        self._open, self._close, self._clock = open_window, close_window, clock
        self._halt = threading.Event()
        self._cv = threading.Condition()
        self._requests: list[list] = []   # [fn, result, error, done]
        self.error: BaseException | None = None
        self.windows_opened = 0
        self.open_ns = 0   # how long the closed windows were open, in all

    def stop(self) -> None:
        self._halt.set()
        with self._cv:
            self._cv.notify_all()
        if self is not threading.current_thread() and self.is_alive():
            self.join()
        self._fail_requests(RuntimeError("the windows stopped"))

    def between_windows(self, fn, timeout: float):
        """FN() run by this thread between two windows (the counts then stand for whole cycles),
        its result returned here; TimeoutError after TIMEOUT seconds."""
        req = [fn, None, None, False]
        with self._cv:
            if not self.is_alive() or self._halt.is_set():
                raise RuntimeError("the windows are not running")
            self._requests.append(req)
            self._cv.notify_all()
            if not self._cv.wait_for(lambda: req[3], timeout):
                self._requests = [r for r in self._requests if r is not req]
                raise TimeoutError("no gap between windows came")
        if req[2] is not None:
            raise req[2]
        return req[1]

    def _serve(self) -> None:
        with self._cv:
            requests, self._requests = self._requests, []
        for req in requests:
            try:
                req[1] = req[0]()
            except BaseException as e:   # handed to the caller, who raises it
                req[2] = e
            with self._cv:
                req[3] = True
                self._cv.notify_all()

    def _fail_requests(self, error: BaseException) -> None:
        with self._cv:
            for req in self._requests:
                req[2], req[3] = error, True
            self._requests = []
            self._cv.notify_all()

    def _sleep_until(self, when: int) -> None:
        """Sleep until WHEN (ns) or stop()."""
        while not self._halt.is_set():
            left = (when - self._clock()) / 1e9
            if left <= 0:
                return
            with self._cv:
                self._cv.wait(left)

    def run(self) -> None:
        """OPEN(seq, scale) attaches and opens a window, returning its opening (ns); CLOSE()
        closes it and detaches, returning its closing. Attaching takes milliseconds: the thread
        starts it that much before the window is due."""
        lead, next_open = 0, None
        with self._cv:
            self._cv.wait_for(lambda: self._requests or self._halt.is_set(), FIRST_READ_WAIT)
        try:
            while not self._halt.is_set():
                if next_open is not None:
                    # reads wait for the boundary: one taken earlier in the gap would find the
                    # last window standing for time still to come
                    self._sleep_until(next_open - lead)
                    if self._halt.is_set():
                        break
                self._serve()
                t0 = self._clock()
                opened = self._open(self.windows_opened + 1, self.schedule.windows.scale)
                lead = max(0, opened - t0)
                self.windows_opened += 1
                length = self.schedule.length(opened)
                self._sleep_until(opened + length)
                closed = self._close()   # closed even when stopping
                self.open_ns += closed - opened
                next_open = self.schedule.closed(closed)
        except BaseException as e:   # a kernel error: the readers say so (Tracer: TracerError)
            self.error = e
            self._fail_requests(RuntimeError(f"the windows stopped: {e}"))
