"""The walk of iter/tcp in every network namespace, from a process of its own that keeps the
privilege to enter them, for a tracer whose process gives that privilege up.

Where the kernel refuses the flush iterator (iter/bpf_sk_storage_map), the sockets' counts reach
the flow map by a walk of iter/tcp in each network namespace before each read, and a TCP
iterator walks the namespace of the thread that creates it: setns(), which needs CAP_SYS_ADMIN.
`steer export` serves HTTP and gives every capability up once it has started; without this, it
counted no TCP byte outside its own namespace (every pod's) on such a kernel. So, before it
gives them up, it forks this walker: a process with no socket and no thread, whose one input is
a byte on a pipe ("walk now") and whose one output is a line back (the namespaces it could not
enter, and why). It keeps CAP_SYS_ADMIN (setns, bpf) and CAP_SYS_PTRACE (another user's
/proc/PID/ns/net) and nothing else, dies with its parent (PR_SET_PDEATHSIG) or at the pipe's
end, and never runs the parent's exit code: the links it shares are the parent's to close."""
from __future__ import annotations

import json
import os
import select
import time
from typing import Callable

from steer.kernel.errors import KernelError
from steer.kernel.namespaces import netns_of, network_namespaces
from steer.kernel.privileges import CAP_SYS_ADMIN, CAP_SYS_PTRACE, drop_privileges, effective_caps
from steer.kernel.process import die_with_parent

WALK_TIMEOUT = 30.0   # seconds a walk may take before the walker counts as gone
# setns (and bpf), and another user's /proc/PID/ns/net: what the walker keeps of what it holds
WALKER_CAPS = (CAP_SYS_ADMIN, CAP_SYS_PTRACE)


def can_walk_apart() -> bool:
    """Whether a walker would enter other namespaces: this process holds CAP_SYS_ADMIN (the
    systemd unit and the DaemonSet give the exporter no such thing: it says what it did not
    reach)."""
    return bool(effective_caps() >> CAP_SYS_ADMIN & 1)


class WalkerGone(Exception):
    """The walker exited or stopped answering; str() says which."""


def walk_namespaces(run_iter: Callable[[], object]) -> tuple[int, str]:
    """RUN_ITER() in every network namespace some process is in: this thread's own first, without
    setns; returns how many could not be entered (the last process left, or setns refused) and
    the first such error."""
    unreached, why = 0, ""
    for i, path in enumerate(network_namespaces()):
        if i == 0:
            run_iter()
            continue
        try:
            with netns_of(path):
                run_iter()
        except (KernelError, OSError) as e:
            unreached += 1
            why = why or str(e)
    return unreached, why


class NamespaceWalker:
    """The walker process. start() forks it (call it with no other thread running); walk()
    asks for a walk and waits for its answer; close() ends it."""

    def __init__(self, run_iter: Callable[[], object]):
        self._run_iter = run_iter
        self.pid = 0
        self._ask = self._answer = -1

    def start(self) -> "NamespaceWalker":
        ask_r, ask_w = os.pipe()
        ans_r, ans_w = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            os.close(ask_w)
            os.close(ans_r)
            self._serve(parent, ask_r, ans_w)   # never returns
        os.close(ask_r)
        os.close(ans_w)
        self.pid, self._ask, self._answer = pid, ask_w, ans_r
        return self

    def _serve(self, parent: int, ask: int, answer: int) -> None:
        code = 1
        try:
            die_with_parent(parent)
            _close_all_but_bpf((ask, answer))
            held = effective_caps()
            drop_privileges(None, tuple(c for c in WALKER_CAPS if held >> c & 1))
            while os.read(ask, 1):
                try:
                    unreached, why = walk_namespaces(self._run_iter)
                except (KernelError, OSError) as e:
                    unreached, why = -1, str(e)
                os.write(answer, (json.dumps([unreached, why]) + "\n").encode())
            code = 0
        finally:
            os._exit(code)   # not the parent's exit code: it would close the parent's links

    def walk(self) -> tuple[int, str]:
        """A walk in every namespace: (namespaces not entered, the first error). Raises
        WalkerGone where the walker exited or took longer than WALK_TIMEOUT."""
        if self._ask < 0:
            raise WalkerGone("the namespace walker is not running")
        try:
            os.write(self._ask, b"w")
            ready, _, _ = select.select([self._answer], [], [], WALK_TIMEOUT)
            line = _read_line(self._answer) if ready else b""
        except OSError as e:
            self.close()
            raise WalkerGone(f"the namespace walker is gone: {e.strerror}") from None
        if not line:
            self.close()
            raise WalkerGone("the namespace walker exited" if ready else
                             f"the namespace walker took over {WALK_TIMEOUT:.0f} s")
        unreached, why = json.loads(line)
        if unreached < 0:
            raise KernelError(why)
        return unreached, why

    def close(self) -> None:
        """The pipe's end ends the walker (a parent that gave up its privileges cannot signal
        it), after the walk under way; one that does not end in WALK_TIMEOUT dies with this
        process."""
        for fd in (self._ask, self._answer):
            if fd >= 0:
                os.close(fd)
        self._ask = self._answer = -1
        deadline = time.monotonic() + WALK_TIMEOUT
        while self.pid and time.monotonic() < deadline:
            try:
                if os.waitpid(self.pid, os.WNOHANG)[0]:
                    break
            except ChildProcessError:
                break
            time.sleep(0.01)
        self.pid = 0


def _read_line(fd: int) -> bytes:
    out = b""
    while not out.endswith(b"\n"):
        chunk = os.read(fd, 4096)
        if not chunk:
            return b""
        out += chunk
    return out


def _close_all_but_bpf(keep: tuple[int, ...]) -> None:
    """Close every file of this process but stdio, KEEP and its BPF objects (the iterator's link
    among them) and perf events: the parent's listening socket and pipes are not the walker's
    to hold open."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd <= 2 or fd in keep:
            continue
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue   # the listing's own descriptor, closed since
        if not (target.startswith("anon_inode:") and ("bpf" in target or "perf_event" in target)):
            os.close(fd)
