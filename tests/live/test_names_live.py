"""Names from the host, live: readers that named themselves "[/x]" (a closing tag to rich) and an
ESC sequence that would clear a terminal and retitle it, reading real TCP flows in the lab's
namespaces. Their names go through `steer flows` (text and --json), `steer top` in a terminal and
the exporter as the kernel gave them: shown as text with the escapes written out, a label value
that Prometheus' own parser reads back unchanged, and nothing that a terminal acts on."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers import CPU_A, CPU_B, ROOT, STEER, live, screen_until, steer, tmux
from steer.experiment.lab import RECEIVER_ADDR, Lab
from web import free_port, http_get, wait_http

pytestmark = live

# port -> the name its reader gives itself (a comm holds 15 bytes)
HOSTILE = {5301: "[/x]", 5302: "\x1b[2J\x1b]0;pwn\x07"}
ESCAPED = {5301: "[/x]", 5302: "\\x1b[2J\\x1b]0;pwn\\x07"}   # as steer shows it
# the default timing, at the rate `--sample-hz` offers for short windows: a light reader gets
# its samples (at 99 Hz a 3 s window may hold none of it, and the flow then has no reader)
HZ = ("--sample-hz", "999")
TRAFFIC_SECONDS = 90   # an upper bound: the module ends the senders when it is done

READER = r"""
import socket, sys
port, name = int(sys.argv[1]), sys.argv[2]
with open("/proc/self/comm", "w") as f:   # prctl(PR_SET_NAME), as any process may
    f.write(name)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[3], port))
s.listen(1)
print("listening", flush=True)
c, _ = s.accept()
while c.recv(4096):   # small reads: a reader that sampled timing sees
    pass
"""

SENDER = r"""
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
end, buf = time.monotonic() + float(sys.argv[3]), b"x" * (1 << 16)
while time.monotonic() < end:
    s.sendall(buf)
    time.sleep(0.002)   # ~250 Mbit/s: a flow every view shows, not one that fills the CPUs
s.close()
"""


def _in(ns: str, cpu: int, code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(["ip", "netns", "exec", ns, "taskset", "-c", str(cpu), sys.executable,
                             "-c", code, *args], stdout=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def readers():
    """The lab's namespaces with a hostile-named reader on each port, and a sender each, running
    until the module is done: {port: reader pid}."""
    with Lab([]) as lab:
        procs, pids = [], {}
        try:
            for port, name in HOSTILE.items():
                r = _in(lab.rx, CPU_A, READER, str(port), name, RECEIVER_ADDR)
                procs.append(r)
                assert r.stdout.readline().strip() == "listening"
                pids[port] = r.pid   # ip netns exec and taskset exec: the pid is the reader's
                with open(f"/proc/{r.pid}/comm") as f:
                    assert f.read().rstrip("\n") == name
            for port in HOSTILE:
                procs.append(_in(lab.tx, CPU_B, SENDER, RECEIVER_ADDR, str(port),
                                 str(TRAFFIC_SECONDS)))
            yield pids
        finally:
            for p in procs:
                p.kill()
                p.wait()


def _no_terminal_codes(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text, repr(text[:2000])


def test_flows_shows_the_names_as_text(readers):
    r = steer("flows", "--duration", "3", *HZ, env={"COLUMNS": "220"})
    assert r.returncode == 0, r.stderr
    print(r.stdout)
    _no_terminal_codes(r.stdout)
    for port, pid in readers.items():
        row = next(l for l in r.stdout.splitlines() if f":{port} " in l)
        assert f"{ESCAPED[port]}/{pid}" in row, row


def test_flows_json_carries_the_names_as_the_kernel_gave_them(readers):
    r = steer("flows", "--duration", "3", "--json", *HZ)
    assert r.returncode == 0, r.stderr
    flows = {f["dport"]: f for f in json.loads(r.stdout)["flows"] if f["dport"] in HOSTILE}
    assert {p: (f["app_comm"], f["app_pid"]) for p, f in flows.items()} == \
        {p: (HOSTILE[p], readers[p]) for p in HOSTILE}
    _no_terminal_codes(r.stdout)   # JSON writes them as \u001b


def test_top_in_a_terminal_shows_them_and_the_terminal_does_not_act_on_them(readers):
    if not shutil.which("tmux"):
        pytest.skip("tmux not installed")
    session = f"steernames{os.getpid()}"
    cmd = (f"env -u COLUMNS -u LINES PYTHONPATH={ROOT} {' '.join(STEER)} top --interval 1 "
           f"{' '.join(HZ)}; sleep 60")
    tmux("new-session", "-d", "-s", session, "-x", "220", "-y", "40", cmd)
    try:
        screen = screen_until(session, lambda s: all(ESCAPED[p][:8] in s for p in HOSTILE))
        print(screen)
        for port in readers:
            row = next((l for l in screen.splitlines() if f":{port} " in l), None)
            assert row and ESCAPED[port][:8] in row, screen
        # ESC ] 0 ; pwn BEL would have set the pane's title, ESC [ 2 J cleared the screen
        assert tmux("display-message", "-p", "-t", session, "#{pane_title}").strip() != "pwn"
        _no_terminal_codes(screen)
    finally:
        tmux("kill-session", "-t", session)


def test_the_exporter_labels_read_back_unchanged(readers):
    port = free_port()
    p = subprocess.Popen([*STEER, "export", "--listen", f"127.0.0.1:{port}", *HZ], cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        wait_http(url, p)
        time.sleep(2)
        body = http_get(url).decode()
    finally:
        p.terminate()
        p.wait(timeout=10)
    comms = {int(s.labels["dport"]): s.labels["app_comm"]
             for fam in text_string_to_metric_families(body) if fam.name == "steer_flow_info"
             for s in fam.samples if s.labels.get("dport", "").isdigit()
             and int(s.labels["dport"]) in HOSTILE}
    assert comms == HOSTILE, [l for l in body.splitlines() if l.startswith("steer_flow_info")]
