"""The exporter's HTTP server on loopback with a stand-in collection: the web configuration
(TLS, client certificates, basic auth) in the exporter toolkit's format, the deadline on slow
clients, the bounded pool, and one collection shared by concurrent scrapes."""
import base64
import http.client
import socket
import ssl
import threading
import time

import bcrypt
import pytest

from steer.present.webserver import ExporterServer, WebConfig, WebConfigError
from tls import make_pki

BODY = b"# TYPE up gauge\nup 1\n"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def _server(web=None, render=lambda: BODY, **kw):
    return ExporterServer(render, [("127.0.0.1", 0)], web, **kw).bind().start()


def _config(tmp_path, text) -> WebConfig:
    p = tmp_path / "web.yml"
    p.write_text(text)
    return WebConfig.load(str(p))


def _get(port, context=None, headers=None, timeout=5):
    conn = (http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=timeout)
            if context else http.client.HTTPConnection("127.0.0.1", port, timeout=timeout))
    try:
        conn.request("GET", "/metrics", headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def _basic(user: str, password: str) -> dict:
    """An Authorization header with USER and PASSWORD."""
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _each_served(conns) -> None:
    """Each of CONNS (raw sockets whose request was sent) gets a 200, then is closed."""
    for c in conns:
        c.settimeout(5)
        assert c.recv(4096).startswith(b"HTTP/1.1 200")
        c.close()


def _client_context(pki, cert=None):
    ctx = ssl.create_default_context(cafile=str(pki["ca_crt"]))
    if cert:
        ctx.load_cert_chain(str(pki[f"{cert}_crt"]), str(pki[f"{cert}_key"]))
    return ctx


def test_plain_http_serves_metrics_and_nothing_else():
    s = _server()
    try:
        assert _get(s.port) == (200, BODY)
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=5)
        conn.request("GET", "/secret")
        assert conn.getresponse().status == 404
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=5)
        conn.request("POST", "/metrics", body=b"x")
        assert conn.getresponse().status == 501
    finally:
        s.close()


def test_tls_with_required_client_certificates(tmp_path, pki):
    web = _config(tmp_path, f"""
tls_server_config:
  cert_file: {pki['server_crt']}
  key_file: {pki['server_key']}
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: {pki['ca_crt']}
""")
    assert web.describe() == "TLS with client certificates required"
    s = _server(web)
    try:
        assert _get(s.port, _client_context(pki, "client")) == (200, BODY)
        for refused in (_client_context(pki), _client_context(pki, "stranger")):
            with pytest.raises((ssl.SSLError, ConnectionError)):
                _get(s.port, refused)
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            _get(s.port)   # plain HTTP to a TLS port
    finally:
        s.close()


def test_basic_auth_with_bcrypt_hashes(tmp_path, pki):
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    web = _config(tmp_path, f"""
tls_server_config:
  cert_file: server.crt
  key_file: server.key
basic_auth_users:
  prometheus: {hashed}
http_server_config:
  headers:
    X-Content-Type-Options: nosniff
""".replace("server.crt", str(pki["server_crt"])).replace("server.key", str(pki["server_key"])))
    s = _server(web)

    try:
        ctx = _client_context(pki)
        assert _get(s.port, ctx, _basic("prometheus", "s3cret")) == (200, BODY)
        assert _get(s.port, ctx, _basic("prometheus", "s3cret")) == (200, BODY)   # remembered
        for h in (None, _basic("prometheus", "wrong"), _basic("nobody", "s3cret"),
                  {"Authorization": "Basic !!!"}, {"Authorization": "Bearer x"}):
            assert _get(s.port, ctx, h)[0] == 401
    finally:
        s.close()


def test_paths_in_the_config_are_relative_to_it(tmp_path, pki):
    for name in ("server_crt", "server_key"):
        (tmp_path / pki[name].name).write_bytes(pki[name].read_bytes())
    web = _config(tmp_path, "tls_server_config: {cert_file: server.crt, key_file: server.key}\n")
    assert web.tls is not None


@pytest.mark.parametrize("text, fragment", [
    ("- a list\n", "expected a mapping at the top"),
    ("tls_server_config: {cert_file: a}\n", "needs cert_file and key_file"),
    ("tls_server_config: {cert_file: /nonexistent, key_file: /nonexistent}\n", "No such file"),
    ("tls_server_config: {cert_file: x, key_file: y, cipher_suites: [A]}\n",
     "cipher_suites is not supported"),
    ("tls_server_config: {cert_file: x, key_file: y, min_version: TLS99}\n", "min_version: one of"),
    ("basic_auth_users: {alice: plaintext}\n", "expected a bcrypt hash"),
    # what the toolkit refuses too, and steer would have taken: a hash that fails at the first
    # login, in a worker; a version that is not a name; a header outside the toolkit's five
    ("basic_auth_users: {alice: $2y$10$short}\n", "expected a bcrypt hash of cost 4 to 31"),
    ("basic_auth_users: {alice: $2y$99$" + "a" * 53 + "}\n", "expected a bcrypt hash"),
    ("basic_auth_users: {alice: $2y$10$" + "a" * 52 + "!}\n", "expected a bcrypt hash"),
    ("tls_server_config: {cert_file: x, key_file: y, min_version: [TLS12]}\n", "min_version: one of"),
    ("tls_server_config: {cert_file: x, key_file: y, max_version: {a: 1}}\n", "max_version: one of"),
    ("http_server_config: {headers: {Set-Cookie: a=b}}\n", "'Set-Cookie' cannot be set"),
    ("http_server_config: {headers: {X-Frame-Options: allow-from x}}\n",
     "X-Frame-Options: one of deny, sameorigin"),
    ("web: {}\n", "unknown key 'web'"),
    ("tls_server_config: [\n", "not valid YAML"),
    ("http_server_config: {headers: {X-A: \"a\\nb\"}}\n", "one-line strings"),
])
def test_a_web_config_steer_cannot_serve_is_one_line(tmp_path, text, fragment):
    with pytest.raises(WebConfigError, match=fragment) as e:
        _config(tmp_path, text)
    assert "\n" not in str(e.value)


def test_client_auth_type_that_is_not_a_name_is_one_line(tmp_path, pki):
    with pytest.raises(WebConfigError, match="client_auth_type: one of"):
        _config(tmp_path, f"tls_server_config: {{cert_file: {pki['server_crt']}, key_file: "
                          f"{pki['server_key']}, client_auth_type: [a]}}\n")


def test_client_auth_without_verification_is_refused_with_why(tmp_path, pki):
    with pytest.raises(WebConfigError, match="cannot ask for a certificate without verifying"):
        _config(tmp_path, f"tls_server_config: {{cert_file: {pki['server_crt']}, key_file: "
                          f"{pki['server_key']}, client_auth_type: RequireAnyClientCert}}\n")


def test_a_slow_client_is_cut_off_at_the_deadline_and_others_are_served():
    """A client sending a byte every 0.2 s never trips a per-read timeout; the deadline on the
    whole request (1 s here) does. Meanwhile the other worker serves."""
    s = _server(workers=2, timeout=1.0)
    try:
        # Before connecting: the server starts the deadline at its accept, which can come before
        # create_connection returns (the handshake completes in the kernel first).
        start, closed = time.monotonic(), None
        slow = socket.create_connection(("127.0.0.1", s.port))
        slow.settimeout(0.2)
        for c in b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 100:
            try:
                slow.send(bytes([c]))
                if slow.recv(1) == b"":   # closed by the server
                    closed = time.monotonic() - start
                    break
            except socket.timeout:
                pass                      # not closed yet: the next byte
            except OSError:
                closed = time.monotonic() - start
                break
            if c == ord("/"):
                assert _get(s.port) == (200, BODY)
        assert closed is not None and 1.0 <= closed < 3.0, closed
    finally:
        s.close()


def test_connections_that_send_nothing_or_wait_between_requests_hold_no_worker():
    """One worker: twelve connections that never send, and eight kept alive that send a request
    now and then, leave it free for every other scrape (the old pool gave each connection a
    worker until it closed: four kept-alive clients starved every scrape)."""
    s = _server(workers=1, timeout=5.0)
    try:
        idle = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(12)]
        kept = [http.client.HTTPConnection("127.0.0.1", s.port, timeout=5) for _ in range(8)]
        for _ in range(3):
            for k in kept:
                k.request("GET", "/metrics")
                assert k.getresponse().read() == BODY
            start = time.monotonic()
            assert _get(s.port) == (200, BODY)
            # held behind a connection, it would wait its whole timeout (5 s); half of it is
            # more than this loopback request takes on a loaded host (the guests beside it)
            assert time.monotonic() - start < 2.5
        assert s.refused == 0
        for c in idle + kept:
            c.close()
    finally:
        s.close()


def test_requests_beyond_the_workers_and_their_queue_are_answered_503_at_once():
    """Whole requests beyond one worker's collection and four waiting: 503 with Retry-After,
    not held; /-/healthy is answered by the loop meanwhile."""
    hold, collecting = threading.Event(), threading.Event()

    def render():
        collecting.set()
        return hold.wait(10) and BODY
    s = _server(render=render, workers=1, timeout=5.0)
    try:
        waiting = []
        for i in range(5):   # the first with the worker (collecting), four in its queue
            c = socket.create_connection(("127.0.0.1", s.port))
            c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            waiting.append(c)
            if i == 0:
                assert collecting.wait(5)
        deadline = time.monotonic() + 5
        while s._queue.qsize() < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        start = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=5)
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        assert (r.status, r.getheader("Retry-After")) == (503, "1")
        assert time.monotonic() - start < 2.5 and s.refused == 1   # not queued (5 s)
        conn.close()
        health = http.client.HTTPConnection("127.0.0.1", s.port, timeout=5)
        for _ in range(2):   # kept alive
            health.request("GET", "/-/healthy")
            r = health.getresponse()
            assert (r.status, r.read()) == (200, b"OK\n")
        health.close()
        hold.set()
        _each_served(waiting)
    finally:
        hold.set()
        s.close()


def test_a_new_connection_takes_the_slot_of_the_one_held_longest():
    s = _server(workers=1, timeout=5.0, max_connections=8)
    try:
        idle = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(8)]
        time.sleep(0.2)
        assert _get(s.port) == (200, BODY) and s.evicted >= 1
        idle[0].settimeout(2)
        assert idle[0].recv(1) == b""   # the eldest, closed
        for c in idle:
            c.close()
    finally:
        s.close()


def test_wrong_passwords_take_one_check_at_a_time_and_a_known_scraper_is_served(tmp_path):
    """Wrong passwords from many clients at once: one bcrypt at a time (the others 503 at once,
    or 401), and a scraper whose password passed before is served throughout."""
    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=12)).decode()   # ~0.2 s a check
    s = _server(_config(tmp_path, f"basic_auth_users: {{prometheus: {hashed}}}\n"), workers=4)

    def auth(password):
        return _basic("prometheus", password)
    try:
        assert _get(s.port, None, auth("right")) == (200, BODY)   # checked once, remembered
        statuses, stop = [], threading.Event()

        def attack():
            while not stop.is_set():
                statuses.append(_get(s.port, None, auth("wrong"))[0])
        attackers = [threading.Thread(target=attack) for _ in range(8)]
        for t in attackers:
            t.start()
        time.sleep(0.3)
        served = []
        for _ in range(5):
            start = time.monotonic()
            served.append(_get(s.port, None, auth("right")))
            assert time.monotonic() - start < 2.5   # not behind the guesses' checks
        stop.set()
        for t in attackers:
            t.join()
        assert served == [(200, BODY)] * 5
        assert set(statuses) <= {401, 503} and statuses.count(503) > statuses.count(401)
    finally:
        s.close()


def test_requests_without_a_known_password_never_wait_for_a_scrape_worker(tmp_path):
    """The one worker held by a collection: requests with no credentials are answered 401 by
    the loop (kept alive), a password not seen before is checked beside the workers (401), and
    a known scraper's request still waits for the worker instead of finding its queue taken by
    them. The old server queued all of them for the worker: 50 kept-alive clients without a
    password, arriving together, filled its queue and a known scraper got 503."""
    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=4)).decode()
    hold, collecting, blocking = threading.Event(), threading.Event(), threading.Event()

    def render():
        if blocking.is_set():
            collecting.set()
            hold.wait(10)
        return BODY
    s = _server(_config(tmp_path, f"basic_auth_users: {{prometheus: {hashed}}}\n"),
                render=render, workers=1, timeout=5.0)

    def auth(password):
        return _basic("prometheus", password)
    try:
        assert _get(s.port, None, auth("right")) == (200, BODY)   # checked once, remembered
        blocking.set()
        token = auth("right")["Authorization"].encode()
        known = []
        for i in range(5):   # one collecting, four waiting for the worker
            c = socket.create_connection(("127.0.0.1", s.port))
            c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: " + token + b"\r\n\r\n")
            known.append(c)
            if i == 0:
                assert collecting.wait(5)
        start = time.monotonic()
        anonymous = http.client.HTTPConnection("127.0.0.1", s.port, timeout=5)
        for _ in range(20):
            anonymous.request("GET", "/metrics")
            r = anonymous.getresponse()
            assert (r.status, r.getheader("WWW-Authenticate")) == (401, 'Basic realm="steer"')
            r.read()
        anonymous.close()
        assert _get(s.port, None, auth("wrong"))[0] == 401
        assert _get(s.port, None, {"Authorization": "Bearer x"})[0] == 401
        assert time.monotonic() - start < 2.5   # behind the collection they would wait 5 s
        assert s.refused == 0
        hold.set()
        _each_served(known)
    finally:
        hold.set()
        s.close()


def test_concurrent_scrapes_share_one_collection():
    calls = []

    def render():
        calls.append(1)
        time.sleep(0.5)
        return BODY
    s = _server(render=render, workers=4)
    try:
        results = []
        threads = [threading.Thread(target=lambda: results.append(_get(s.port))) for _ in range(4)]
        for t in threads:
            t.start()
            time.sleep(0.02)
        for t in threads:
            t.join()
        assert results == [(200, BODY)] * 4 and len(calls) == 1
        assert _get(s.port) == (200, BODY) and len(calls) == 2   # the next one collects anew
    finally:
        s.close()


def test_a_failed_collection_is_a_500_and_the_server_lives_on():
    state = {"fail": True}

    def render():
        if state["fail"]:
            raise OSError("map gone")
        return BODY
    s = _server(render=render)
    try:
        status, body = _get(s.port)
        assert status == 500 and b"map gone" in body
        state["fail"] = False
        assert _get(s.port) == (200, BODY)
    finally:
        s.close()


def test_the_reapers_shutdown_never_lets_a_worker_write_plaintext(pki, monkeypatch):
    """The reaper shuts a late connection down from its own thread while the worker may be
    writing the reply. SSLSocket.shutdown() drops the TLS state before it shuts the socket down,
    and a write that comes in between goes out as plaintext. The write is put right there (in
    the socket's own shutdown, which runs after): the peer's raw bytes never hold it."""
    from steer.present import webserver
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(pki["server_crt"]), str(pki["server_key"]))
    a, b = socket.socketpair()
    client = _client_context(pki)
    client.check_hostname = False
    peer = []   # the client's end: its bytes are read raw, as they cross the wire
    done = threading.Thread(target=lambda: peer.append(client.wrap_socket(
        b, server_hostname="localhost")))
    done.start()
    server = ctx.wrap_socket(a, server_side=True)
    done.join(timeout=10)
    real = socket.socket.shutdown
    secret = b"steer_secret_metric 1\n" * 4

    def shutdown_with_a_write_first(sock, how):
        try:
            server.sendall(secret)   # the worker's reply, between the two steps
        except (OSError, ValueError):
            pass
        real(sock, how)
    monkeypatch.setattr(socket.socket, "shutdown", shutdown_with_a_write_first)
    webserver._shutdown(server)
    monkeypatch.setattr(socket.socket, "shutdown", real)
    import os
    import select
    raw = b""
    fd = peer[0].fileno()
    while select.select([fd], [], [], 1)[0]:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        raw += chunk
    server.close()
    peer[0].close()
    assert raw, "the write went nowhere: the test shows nothing"
    assert b"steer_secret_metric" not in raw, raw[:200]


def test_reload_serves_new_connections_by_the_new_config(tmp_path):
    """A new web config (changed users here; a rotated certificate alike) serves every
    connection made after the reload, and a kept-alive one made before keeps its own."""
    def users(name):
        hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()
        return _config(tmp_path, f"basic_auth_users: {{{name}: {hashed}}}\n")

    def auth(user):
        return _basic(user, "pw")
    s = _server(users("alice"))
    try:
        before = http.client.HTTPConnection("127.0.0.1", s.port, timeout=5)
        before.request("GET", "/metrics", headers=auth("alice"))
        assert before.getresponse().read() == BODY
        s.reload(users("bob"))
        assert _get(s.port, None, auth("alice"))[0] == 401
        assert _get(s.port, None, auth("bob")) == (200, BODY)
        before.request("GET", "/metrics", headers=auth("alice"))
        r = before.getresponse()
        assert (r.status, r.read()) == (200, BODY)
        before.close()
    finally:
        s.close()


def test_a_fault_in_the_loop_ends_that_connection_not_the_server(monkeypatch):
    """An unexpected error while the loop reads one client's request closes that connection; the
    loop, which holds every other connection, goes on."""
    s = _server()
    real, faults = s._readable, []

    def faulty(c):
        if not faults:
            faults.append(c)
            raise RuntimeError("a bug")
        return real(c)
    monkeypatch.setattr(s, "_readable", faulty)
    try:
        bad = socket.create_connection(("127.0.0.1", s.port))
        bad.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        bad.settimeout(5)
        try:
            closed = bad.recv(1) == b""
        except ConnectionResetError:   # closed with the request unread: a reset
            closed = True
        assert closed and faults
        bad.close()
        assert _get(s.port) == (200, BODY)
    finally:
        s.close()
