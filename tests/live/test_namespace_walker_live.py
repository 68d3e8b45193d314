"""The exporter on a kernel that refuses the sockets' flush iterator (iter/bpf_sk_storage_map, as
some VMs of this kind do; STEER_TEST_REFUSE makes every kernel one): its walk of iter/tcp in each
network namespace runs from a process of its own that keeps setns' privilege, so the exporter,
which gives every capability up, still counts the TCP bytes of namespaces other than its own."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from helpers import CPU_A, ROOT, STEER, assert_unprivileged, live, settled
from steer.experiment.lab import Lab, LabFlow
from steer.kernel.privileges import CAP_SYS_ADMIN, CAP_SYS_PTRACE
from steer.trace.walker import NamespaceWalker, WalkerGone
from web import free_port, http_get, metric_sum, wait_http

pytestmark = [live]
ENV = dict(os.environ, PYTHONPATH=ROOT, STEER_TEST_REFUSE="ft_flush_socks")
WALKER = re.compile(r"a process of steer's \(pid (\d+)\) keeps CAP_SYS_ADMIN")


def _rchar(pid: int) -> int:
    with open(f"/proc/{pid}/io") as f:
        return int(re.search(r"^rchar: (\d+)", f.read(), re.M).group(1))


def _status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def _sockets(pid: int) -> list[str]:
    fds = f"/proc/{pid}/fd"
    return [t for t in (os.readlink(f"{fds}/{fd}") for fd in os.listdir(fds)) if t.startswith("socket:")]


def test_a_walker_counts_the_labs_namespace_for_an_exporter_without_privileges():
    """Mid-flow, the exporter's TCP bytes of the lab's flow (its namespace is not the
    exporter's) lie between what the lab's reader had read just before the scrape (rchar: the
    socket received at least that) and just after it plus the socket's receive buffer at most
    (what arrived and waits unread); the exporter holds no capability, the walker only
    CAP_SYS_ADMIN and CAP_SYS_PTRACE and no socket, and a SIGKILL of the exporter takes the
    walker with it. Before the walker, the exporter counted 0 bytes of that flow mid-flow."""
    port = free_port()
    with Lab([LabFlow(CPU_A, CPU_A)], seconds=8) as lab:
        lab.start_servers()
        ex = subprocess.Popen([*STEER, "export", "--listen", f"127.0.0.1:{port}"], env=ENV,
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        walker = None
        try:
            url = f"http://127.0.0.1:{port}/metrics"
            wait_http(url, ex)
            # said before the exporter serves: in its stderr by now
            os.set_blocking(ex.stderr.fileno(), False)
            try:
                said = os.read(ex.stderr.fileno(), 65536).decode()
            except BlockingIOError:
                said = ""
            assert WALKER.search(said), said
            walker = int(WALKER.search(said).group(1))
            assert_unprivileged(ex.pid)
            st = _status(walker)
            assert int(st["CapEff"], 16) == (1 << CAP_SYS_ADMIN) | (1 << CAP_SYS_PTRACE), st["CapEff"]
            assert st["PPid"] == str(ex.pid) and st["NoNewPrivs"] == "1"
            assert _sockets(walker) == []
            lab.start_clients()
            time.sleep(3)
            reader = lab.receiver_pid(lab.flows[0].port)
            before = _rchar(reader)
            body = http_get(url).decode()
            after = _rchar(reader)
            counted = metric_sum(body, "steer_class_rx_bytes_total")
            rcvbuf = int(open("/proc/sys/net/ipv4/tcp_rmem").read().split()[2])
            print(f"the reader had read {before:,}..{after:,} B, the exporter counted {counted:,.0f} B "
                  f"(receive buffer at most {rcvbuf:,} B)")
            assert before <= counted <= after + rcvbuf
            lab.wait(timeout=30)
        finally:
            ex.send_signal(signal.SIGKILL)
            ex.communicate(timeout=30)
    assert walker is not None
    assert not settled(lambda: os.path.exists(f"/proc/{walker}")), "the walker outlived the exporter"


def test_a_walker_answers_each_walk_and_one_that_died_is_said():
    """The walker's protocol alone: a walk answered (every namespace entered, as root), the
    walker gone at close(); one whose walk kills it raises WalkerGone, which the tracer turns
    into its own walk and the reason in its figures."""
    w = NamespaceWalker(lambda: None).start()
    pid = w.pid
    assert w.walk() == (0, "") and w.walk() == (0, "")
    w.close()
    assert not os.path.exists(f"/proc/{pid}")
    dying = NamespaceWalker(lambda: os._exit(3)).start()
    with pytest.raises(WalkerGone, match="exited"):
        dying.walk()
    assert dying.pid == 0
    # an exporter started without CAP_SYS_ADMIN (the systemd unit's, the DaemonSet's) forks no
    # walker that could enter nothing: its own walk says what it did not reach
    code = ("from steer.kernel.privileges import CAP_BPF, drop_privileges; "
            "from steer.trace.walker import can_walk_apart; "
            "print(can_walk_apart()); drop_privileges(None, (CAP_BPF,)); print(can_walk_apart())")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=ENV, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["True", "False"], out
