"""Ctrl-C and SIGTERM as KeyboardInterrupt, never lost inside a callback that C calls.

Python runs a signal handler at the next bytecode of the main thread, and that can be one of a
ctypes callback's: libbpf calls steer's print callback for every line it logs, hundreds of times
in a program load. ctypes prints an exception raised in a callback ("Exception ignored on calling
ctypes callback function") and drops it, so the stop request would be lost and the process would
run on with its tracer attached and its lab up. steer's handlers call interrupt(): it raises
StopRequested (a KeyboardInterrupt) where that is safe, and inside a callback holds it instead;
the kernel package raises what is held as soon as the C call returns (raise_held()).

Python drops an exception the same way in the functions it calls itself, with nothing to raise it
afterwards: a weakref callback (importlib's module locks end in one at the end of every import, and
steer imports its heavy modules after its handlers are in) or a __del__. There interrupt() has
another thread send the signal again, so that its handler runs once that function has returned:
sent by the handler itself, it would run again at the handler's next bytecode, inside that same
function, and again, until the recursion limit.
"""
from __future__ import annotations

import _thread
import os
import signal
import threading

class StopRequested(KeyboardInterrupt):
    """Ctrl-C or SIGTERM, as steer's handlers raise it; caught as KeyboardInterrupt. Not that
    class itself: CPython (3.11) marks a KeyboardInterrupt raised inside exec() of a string
    (dataclasses make their methods so, when a module is imported) as unhandled for good, and the
    process then ends by SIGINT with no message, whatever caught it; it checks the exact type."""


_callbacks: set = set()        # code objects of the Python functions that C calls
_held = threading.local()      # .exception: raised when the C call returns


def called_from_c(fn):
    """Mark a function that C calls (before wrapping it in a ctypes CFUNCTYPE)."""
    _callbacks.add(fn.__code__)
    return fn


def _in_callback(frame) -> bool:
    while frame is not None:
        if frame.f_code in _callbacks:
            return True
        frame = frame.f_back
    return False


def _dropping(code) -> bool:
    """Python calls this function itself and reports, then drops, what it raises: importlib's
    module-lock weakref callback, the weakref module's own, a __del__."""
    return (code.co_name == "__del__"
            or (code.co_name == "cb" and code.co_filename == "<frozen importlib._bootstrap>")
            or (code.co_name in ("remove", "_remove")
                and os.path.basename(code.co_filename) in ("weakref.py", "_weakrefset.py")))


def _in_dropping(frame) -> bool:
    while frame is not None:
        if _dropping(frame.f_code):
            return True
        frame = frame.f_back
    return False


def hold(exc: BaseException) -> None:
    """Keep an exception raised inside a callback for raise_held(); the first one wins."""
    if getattr(_held, "exception", None) is None:
        _held.exception = exc


def raise_held() -> None:
    """After a C call that may have called back: raise what the callbacks held, once."""
    exc = getattr(_held, "exception", None)
    if exc is not None:
        _held.exception = None
        raise exc


def interrupt(frame, signum: int = signal.SIGINT) -> None:
    """For a signal handler: raise StopRequested, or hold it while a callback of C's runs, or have
    SIGNUM sent again while Python runs a function whose exceptions it drops (the thread gets the
    GIL when this one lets it go, within the switch interval: 5 ms)."""
    if _in_callback(frame):
        hold(StopRequested())
        return
    if _in_dropping(frame):
        _thread.start_new_thread(os.kill, (os.getpid(), signum))
        return
    raise StopRequested


def _on_sigint(signum, frame):
    interrupt(frame, signum)


def handle_sigint() -> None:
    """Ctrl-C through interrupt(), where it would raise KeyboardInterrupt (Python's default);
    a SIGINT the process inherited ignored (started in the background) stays ignored."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)
