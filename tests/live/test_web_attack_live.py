"""`steer export` under clients that hold its web server: 50 kept-alive clients that send a
request (with no password) every 3 s, 50 that send their request a byte a second (slow loris), and 100 wrong
passwords a second. A scraper whose password passed before must get every scrape, each well
within the web timeout (10 s). It catches a server that gives each connection a worker until it
closes (four kept-alive clients starve every scrape), one whose wrong passwords each take a
worker for a bcrypt, and one that queues requests without a known password for the workers
(the kept-alive clients' requests, arriving together every 3 s, fill the queue: a scrape got 503
in about one run in ten).

The bound is no statistic: a scrape is a collection of this idle host's maps (~20 ms here) plus
its wait; 2 s is the most one may take (five times what a kubelet probe's default timeout of 1 s
allows for twice), and the test fails on any 503, 401 or timeout of the scraper."""
import base64
import http.client
import os
import socket
import statistics
import subprocess
import threading
import time

from helpers import ROOT, STEER, alone, live
from web import free_port

pytestmark = [live, alone]
ENV = dict(os.environ, PYTHONPATH=ROOT)
KEPT_ALIVE, SLOW, WRONG_PER_SECOND, GUESSERS = 50, 50, 100, 8
SECONDS = 20
LONGEST = 2.0


def _auth(password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"prometheus:{password}".encode()).decode()}


def _status(port: int, password: str, path: str = "/metrics", timeout: float = 10) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers=_auth(password))
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


def test_scrapes_are_served_while_clients_hold_connections_and_guess_passwords(private_tmp):
    import bcrypt
    web = private_tmp / "web.yml"
    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=10)).decode()
    web.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    port = free_port()
    p = subprocess.Popen([*STEER, "export", "--listen", f"127.0.0.1:{port}", "--web-config",
                          str(web)], env=ENV, cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    stop = threading.Event()
    counts = {"kept_alive": 0, "kept_alive_failed": 0, "slow_closed": 0, "wrong": []}
    lock = threading.Lock()

    def kept_alive():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        while not stop.is_set():
            try:   # no password: a 401 each time, on a connection kept alive
                conn.request("GET", "/")
                conn.getresponse().read()
                with lock:
                    counts["kept_alive"] += 1
            except (OSError, http.client.HTTPException):
                with lock:
                    counts["kept_alive_failed"] += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
            stop.wait(3)
        conn.close()

    def slow_loris():
        request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10_000
        socks = {}
        while not stop.is_set():
            for i in range(SLOW):
                s, at = socks.get(i, (None, 0))
                if s is None:
                    try:
                        s = socket.create_connection(("127.0.0.1", port), timeout=1)
                    except OSError:
                        continue
                try:
                    s.send(request[at:at + 1])
                    socks[i] = (s, at + 1)
                except OSError:   # closed at the deadline: a new one
                    s.close()
                    socks.pop(i, None)
                    with lock:
                        counts["slow_closed"] += 1
            stop.wait(1)
        for s, _ in socks.values():
            s.close()

    def guesser():
        n, begun = 0, time.monotonic()
        while not stop.is_set():
            try:
                status = _status(port, f"guess{n}", timeout=10)
            except OSError:
                status = "error"
            with lock:
                counts["wrong"].append(status)
            n += 1
            # on a schedule, not after each answer: WRONG_PER_SECOND all together
            stop.wait(max(0.0, begun + n * GUESSERS / WRONG_PER_SECOND - time.monotonic()))

    try:
        assert "serving http://" in p.stdout.readline()
        assert _status(port, "right") == 200   # its password checked once, then remembered
        attackers = [threading.Thread(target=kept_alive) for _ in range(KEPT_ALIVE)] + \
            [threading.Thread(target=slow_loris)] + [threading.Thread(target=guesser)
                                                     for _ in range(GUESSERS)]
        for t in attackers:
            t.start()
        time.sleep(2)   # every attacker connected
        took, statuses = [], []
        end = time.monotonic() + SECONDS
        while time.monotonic() < end:
            start = time.monotonic()
            try:
                statuses.append(_status(port, "right", timeout=10))
            except OSError as e:
                statuses.append(type(e).__name__)
            took.append(time.monotonic() - start)
            health = _status(port, "right", "/-/healthy")
            assert health == 200, health
            time.sleep(max(0.0, 1 - (time.monotonic() - start)))
        stop.set()
        for t in attackers:
            t.join(timeout=20)
        wrong = counts["wrong"]
        print(f"scrapes: {len(took)}, {statuses.count(200)} served, median "
              f"{statistics.median(took) * 1e3:.0f} ms, longest {max(took) * 1e3:.0f} ms; kept-alive "
              f"requests {counts['kept_alive']} ({counts['kept_alive_failed']} failed); slow "
              f"clients closed at the deadline {counts['slow_closed']}; wrong passwords "
              f"{len(wrong)} in {SECONDS + 2} s: {wrong.count(401)} 401, {wrong.count(503)} 503, "
              f"{len(wrong) - wrong.count(401) - wrong.count(503)} other")
        assert statuses == [200] * len(statuses) and len(statuses) >= SECONDS - 2
        assert max(took) < LONGEST
        # the attack was real: the guesses came and were refused, the slow clients were cut off
        assert len(wrong) > 0.8 * WRONG_PER_SECOND * SECONDS and set(wrong) <= {401, 503}
        assert counts["slow_closed"] >= SLOW
        assert counts["kept_alive"] > KEPT_ALIVE * SECONDS / 4
        assert p.poll() is None
    finally:
        stop.set()
        p.terminate()
        p.wait(timeout=10)
