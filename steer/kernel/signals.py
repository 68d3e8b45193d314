"""Ctrl-C and SIGTERM as KeyboardInterrupt, never lost inside a callback that C calls.

Python runs a signal handler at the next bytecode of the main thread, and that can be one of a
ctypes callback's: libbpf calls steer's print callback for every line it logs, hundreds of times
in a program load. ctypes prints an exception raised in a callback ("Exception ignored on calling
ctypes callback function") and drops it, so the stop request would be lost and the process would
run on with its tracer attached and its lab up. steer's handlers call interrupt(): it raises
StopRequested (a KeyboardInterrupt) where that is safe, and inside a callback holds it instead;
the kernel gateway raises what is held as soon as the C call returns (raise_held()).
"""
from __future__ import annotations

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


def interrupt(frame) -> None:
    """For a signal handler: raise StopRequested, or hold it while a callback runs."""
    if _in_callback(frame):
        hold(StopRequested())
        return
    raise StopRequested


def _on_sigint(signum, frame):
    interrupt(frame)


def handle_sigint() -> None:
    """Ctrl-C through interrupt(), where it would raise KeyboardInterrupt (Python's default);
    a SIGINT the process inherited ignored (started in the background) stays ignored."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)
