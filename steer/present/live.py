"""The live view's loop: a new snapshot every interval, keys in between (sort, filter, idle
flows, pause, help, quit), as htop reads them; or, off a terminal, one plain table per interval."""
from __future__ import annotations

import os
import re
import select
import sys
import termios
import time
import tty
from contextlib import contextmanager
from typing import Callable

from rich.console import Console
from rich.live import Live

from steer.model.reports import Snapshot
from steer.model.topology import Topology
from steer.present.view import DEFAULT_LIMIT, History, ViewState, render, screen

SORT_KEYS = {"r": "rate", "k": "kernel", "a": "app", "c": "class", "w": "workload"}
ESC, ENTER, BACKSPACE = "\x1b", ("\r", "\n"), ("\x7f", "\b")


def make_console(stderr: bool = False) -> Console:
    """A console for the views: off a terminal (logs, pipes) wide enough that no column folds."""
    c = Console(stderr=stderr)
    return c if c.is_terminal else Console(stderr=stderr, width=200)


def handle_key(state: ViewState, key: str) -> bool:
    """Apply KEY to STATE; False when it means quit."""
    if state.editing:
        if key in ENTER:
            state.editing = False
        elif key == ESC:
            state.editing, state.filter = False, ""
        elif key in BACKSPACE:
            state.filter = state.filter[:-1]
        elif key.isprintable():
            state.filter += key
        return True
    if state.help:
        state.help = False   # any key leaves the help
        return key != "q"
    if key in ("q", "Q"):
        return False
    if key in SORT_KEYS:
        state.sort = SORT_KEYS[key]
    elif key == "/":
        state.editing, state.filter = True, ""
    elif key == ESC:
        state.filter = ""
    elif key == "i":
        state.show_idle = not state.show_idle
    elif key in ("p", " "):
        state.paused = not state.paused
    elif key in ("?", "h"):
        state.help = True
    return True


@contextmanager
def _keys():
    """stdin in cbreak mode (keys arrive one by one, unechoed) while the view runs, when stdin is
    a terminal; yields a function that waits up to a timeout for keys (None: none came)."""
    fd = sys.stdin.fileno() if sys.stdin and sys.stdin.isatty() else None
    if fd is None:
        yield lambda timeout: (time.sleep(max(timeout, 0.0)), None)[1]
        return
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def read(timeout: float) -> str | None:
        ready, _, _ = select.select([fd], [], [], max(timeout, 0.0))
        if not ready:
            return None
        data = os.read(fd, 64).decode(errors="replace")
        # keys typed (or pasted) faster than a redraw arrive together; an arrow or function key
        # is an escape sequence, of which one Esc is enough
        return re.sub(r"\x1b(\[[0-9;]*[A-Za-z~]|O.)?", ESC, data) or None

    try:
        yield read
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def run_live(next_snapshot: Callable[[], Snapshot], topo: Topology, *, interval: float,
             duration: float | None, limit: int = DEFAULT_LIMIT, console: Console | None = None,
             keep_going: Callable[[], bool] = lambda: True,
             state: ViewState | None = None) -> bool:
    """Refresh the view every INTERVAL seconds until DURATION (None: until q or Ctrl-C), or until
    KEEP_GOING says stop. True when the person quit (q) before that.

    On a terminal the view takes the screen and follows its size, and keys change it; anywhere
    else each interval is printed once, as plain text, so logs and pipes stay readable."""
    console = console or make_console()
    state = state or ViewState()
    end = None if duration is None else time.monotonic() + duration

    def running() -> bool:
        return (end is None or time.monotonic() < end) and keep_going()

    if not console.is_terminal:
        while running():
            time.sleep(interval if end is None else min(interval, max(0.0, end - time.monotonic())))
            console.print(render(next_snapshot(), topo, limit, console.width, state))
            sys.stdout.flush()
        return False

    history = History()
    snap: Snapshot | None = None

    def draw(live: Live) -> None:
        if snap is not None:
            w, h = console.size
            live.update(screen(snap, topo, state, w, h, history), refresh=True)

    quit = False
    with _keys() as read_key, Live(console=console, auto_refresh=False, screen=True,
                                   transient=True) as live:
        live.update(f"steer: first interval of {interval:g} s…", refresh=True)
        due = time.monotonic() + interval
        while running():
            wait = due - time.monotonic()
            if end is not None:
                wait = min(wait, end - time.monotonic())
            keys = read_key(wait)
            if keys is not None:
                quit = not all(handle_key(state, k) for k in keys)
                if quit:
                    break
                draw(live)
                continue
            if time.monotonic() < due:
                continue
            due = time.monotonic() + interval
            fresh = next_snapshot()
            if not state.paused:
                snap = fresh
                history.add(snap)
                draw(live)
    if snap is not None:
        # what was on the screen stays on the terminal after the alternate screen goes
        console.print(screen(snap, topo, state, console.size.width, console.size.height,
                             history, keys=False))
    return quit
