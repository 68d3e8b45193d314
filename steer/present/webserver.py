"""The exporter's HTTP server, fit to face a network: TLS, client certificates and basic auth from
a web configuration file in the Prometheus exporter toolkit's format (node_exporter's
--web.config.file), an event loop that holds every connection not being answered (idle,
handshaking, sending its request slowly) so that only whole requests take one of a bounded pool
of workers, a deadline on reading each request and on writing each reply, one password check at
a time, and scrapes that arrive while one is being collected served by that one collection.

The sockets are bound by bind() and the threads started by start(), so that the caller can give
up its privileges in between: a capability dropped by one thread stays with the threads that
already exist.
"""
from __future__ import annotations

import base64
import errno
import gzip
import hashlib
import hmac
import importlib.util
import io
import os
import queue
import re
import selectors
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Callable

from steer.defaults import DEFAULT_TIMEOUT, DEFAULT_WORKERS
from steer.model.names import printable

# the response headers a web config may add, and the values of those with a fixed set: the
# exporter toolkit's (node_exporter's) own list, kept private there "to ensure consistency in
# the Prometheus ecosystem"
EXTRA_HEADERS = {"Strict-Transport-Security": None, "X-Content-Type-Options": ("nosniff",),
                 "X-Frame-Options": ("deny", "sameorigin"), "X-XSS-Protection": None,
                 "Content-Security-Policy": None}
# a bcrypt hash as htpasswd -B and the toolkit's bcrypt.Cost() read it: version, cost 4-31, salt
# and digest in bcrypt's base64 (a malformed one would fail at the first login, in a worker)
BCRYPT_HASH = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
QUEUED_PER_WORKER = 4           # requests that wait for a worker; beyond that they are answered 503
CHECKERS = 1                    # threads that check passwords not seen before (bcrypt), beside the workers
IDLE_TIMEOUT = 90.0             # a kept-alive connection with no request begun (Go's client's own)
MAX_CONNECTIONS = 512           # open at once; a new one closes the one the loop has held longest
MAX_HEAD = 16384                # a request's line and headers
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
CHALLENGE = {"WWW-Authenticate": 'Basic realm="steer"'}   # with each 401

TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version",
            "max_version"}
TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
# the toolkit's client_auth_type (Go's tls.ClientAuthType) that Python's ssl can enforce; the two
# that ask for a certificate without verifying it have no equivalent here
CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}


class WebConfigError(ValueError):
    """A web configuration steer cannot serve as written; str() is one line."""


@dataclass
class WebConfig:
    """What a web configuration file asks for: TLS (with client certificates) and basic auth."""
    path: str
    tls: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict)   # user -> bcrypt hash
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str) -> "WebConfig":
        """Read PATH (YAML, as the toolkit's; JSON is YAML too) and load its certificates now,
        while the files are readable: the exporter reads none of them after it drops root."""
        try:
            import yaml
        except ImportError:
            raise WebConfigError("--web-config needs PyYAML (apt-get install python3-yaml, or "
                                 "pip install pyyaml)") from None
        try:
            with open(path) as f:
                doc = yaml.safe_load(f) or {}
        except OSError as e:
            raise WebConfigError(f"{path}: {e.strerror}") from None
        except yaml.YAMLError as e:
            raise WebConfigError(f"{path}: not valid YAML: {' '.join(str(e).split())}") from None
        if not isinstance(doc, dict):
            raise WebConfigError(f"{path}: expected a mapping at the top")
        unknown = set(doc) - {"tls_server_config", "basic_auth_users", "http_server_config"}
        if unknown:
            raise WebConfigError(f"{path}: unknown key {sorted(unknown)[0]!r} (steer reads "
                                 "tls_server_config, basic_auth_users, http_server_config)")
        base = os.path.dirname(os.path.abspath(path))
        cfg = cls(path)
        if doc.get("tls_server_config"):
            cfg.tls = _tls_context(path, base, doc["tls_server_config"])
        cfg.users = _users(path, doc.get("basic_auth_users") or {})
        http = doc.get("http_server_config") or {}
        if not isinstance(http, dict) or set(http) - {"headers", "http2"}:
            raise WebConfigError(f"{path}: http_server_config: steer reads headers (and ignores "
                                 "http2)")
        headers = http.get("headers") or {}
        if not isinstance(headers, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and "\n" not in k + v and "\r" not in k + v
                for k, v in headers.items()):
            raise WebConfigError(f"{path}: http_server_config.headers: one-line strings")
        for name, value in headers.items():
            if name not in EXTRA_HEADERS:
                raise WebConfigError(f"{path}: http_server_config.headers: {name!r} cannot be "
                                     f"set (as the exporter toolkit: {', '.join(EXTRA_HEADERS)})")
            if EXTRA_HEADERS[name] and value not in EXTRA_HEADERS[name]:
                raise WebConfigError(f"{path}: http_server_config.headers.{name}: one of "
                                     f"{', '.join(EXTRA_HEADERS[name])}, not {value!r}")
        cfg.headers = headers
        return cfg

    def describe(self) -> str:
        parts = []
        if self.tls:
            parts.append("TLS" + {ssl.CERT_REQUIRED: " with client certificates required",
                                  ssl.CERT_OPTIONAL: " with client certificates verified if given"}
                         .get(self.tls.verify_mode, ""))
        if self.users:
            parts.append(f"basic auth ({len(self.users)} user{'s' if len(self.users) > 1 else ''})")
        return ", ".join(parts) or "no TLS or auth"


def _tls_context(path: str, base: str, tls) -> ssl.SSLContext:
    if not isinstance(tls, dict):
        raise WebConfigError(f"{path}: tls_server_config: expected a mapping")
    unknown = set(tls) - TLS_KEYS
    if unknown:
        raise WebConfigError(f"{path}: tls_server_config.{sorted(unknown)[0]} is not supported "
                             f"(steer reads {', '.join(sorted(TLS_KEYS))})")
    if not tls.get("cert_file") or not tls.get("key_file"):
        raise WebConfigError(f"{path}: tls_server_config needs cert_file and key_file")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    for key, attr in (("min_version", "minimum_version"), ("max_version", "maximum_version")):
        if key in tls:
            if not isinstance(tls[key], str) or tls[key] not in TLS_VERSIONS:
                raise WebConfigError(f"{path}: tls_server_config.{key}: one of "
                                     f"{', '.join(TLS_VERSIONS)}, not {tls[key]!r}")
            setattr(ctx, attr, TLS_VERSIONS[tls[key]])

    def file(key: str) -> str:
        return os.path.join(base, str(tls[key]))   # relative to the config file, as the toolkit's
    try:
        ctx.load_cert_chain(file("cert_file"), file("key_file"))
    except (OSError, ssl.SSLError) as e:
        raise WebConfigError(f"{path}: cert_file/key_file: {getattr(e, 'strerror', None) or e}") from None
    auth = tls.get("client_auth_type", "NoClientCert")
    if not isinstance(auth, str) or auth not in CLIENT_AUTH:
        raise WebConfigError(f"{path}: tls_server_config.client_auth_type: one of "
                             f"{', '.join(CLIENT_AUTH)}, not {auth!r} (Python's TLS cannot ask "
                             "for a certificate without verifying it)")
    ctx.verify_mode = CLIENT_AUTH[auth]
    if auth != "NoClientCert":
        if not tls.get("client_ca_file"):
            raise WebConfigError(f"{path}: client_auth_type {auth} needs client_ca_file")
        try:
            ctx.load_verify_locations(file("client_ca_file"))
        except (OSError, ssl.SSLError) as e:
            raise WebConfigError(f"{path}: client_ca_file: {getattr(e, 'strerror', None) or e}") from None
    return ctx


def _users(path: str, users) -> dict[str, bytes]:
    if not isinstance(users, dict):
        raise WebConfigError(f"{path}: basic_auth_users: expected user: bcrypt-hash pairs")
    if users and importlib.util.find_spec("bcrypt") is None:
        raise WebConfigError("basic_auth_users needs the bcrypt module (apt-get install "
                             "python3-bcrypt, or pip install bcrypt)")
    out = {}
    for user, hashed in users.items():
        if not isinstance(user, str) or ":" in user or not isinstance(hashed, str) or \
                not BCRYPT_HASH.fullmatch(hashed):
            raise WebConfigError(f"{path}: basic_auth_users.{printable(str(user))}: expected a "
                                 "bcrypt hash of cost 4 to 31 ($2y$10$ and 53 characters, as "
                                 "htpasswd -nBC 10 makes)")
        out[user] = hashed.encode()
    return out


class BasicAuth:
    """Checks Authorization headers against bcrypt hashes. bcrypt takes tens of milliseconds by
    design, so a password that passed is remembered (as its SHA-256, a bounded number of them),
    as the toolkit does, and one is checked at a time: while one is, allows() answers None at
    once (the request gets a 503). The server sends a password not seen before to its own
    checker thread, not to the scrape workers, so that wrong passwords by the hundred a second
    take that thread only and scrapers whose password passed before are served throughout.
    An unknown user costs as much as a known one."""

    CACHE = 64

    def __init__(self, users: dict[str, bytes]):
        import bcrypt
        self._bcrypt = bcrypt
        self.users = users
        self._dummy = bcrypt.hashpw(b"steer", bcrypt.gensalt(rounds=10))
        self._passed: dict[bytes, None] = {}
        self._lock = threading.Lock()
        self._checking = threading.Lock()

    @staticmethod
    def credentials(header: str | None) -> tuple[str, str] | None:
        """HEADER's (user, password), or None: no basic credentials in it."""
        if not header or not header.startswith("Basic "):
            return None
        try:
            user, sep, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        return (user, password) if sep else None

    @staticmethod
    def _digest(user: str, password: str) -> bytes:
        return hashlib.sha256(f"{user}\0{password}".encode()).digest()

    def remembered(self, header: str | None) -> bool:
        """HEADER's password passed before (no bcrypt)."""
        cred = self.credentials(header)
        if cred is None:
            return False
        digest = self._digest(*cred)
        with self._lock:
            return any(hmac.compare_digest(digest, d) for d in self._passed)

    def allows(self, header: str | None) -> bool | None:
        """Whether HEADER's user and password are right; None: another check is running."""
        cred = self.credentials(header)
        if cred is None:
            return False
        if self.remembered(header):
            return True
        if not self._checking.acquire(blocking=False):
            return None
        try:
            user, password = cred
            hashed = self.users.get(user)
            ok = self._bcrypt.checkpw(password.encode(), hashed or self._dummy) and hashed is not None
        finally:
            self._checking.release()
        if ok:
            with self._lock:
                self._passed[self._digest(user, password)] = None
                while len(self._passed) > self.CACHE:
                    self._passed.pop(next(iter(self._passed)))
        return ok


class SharedScrape:
    """RENDER called once for any number of scrapes that arrive while it runs: each gets that
    collection's body (or its error). Scrapers in a fleet come in bursts (two Prometheus replicas,
    a curl), and a collection reads every BPF map."""

    def __init__(self, render: Callable[[], bytes]):
        self._render = render
        self._cond = threading.Condition()
        self._running = False
        self._generation = 0
        self._result: tuple[bytes | None, BaseException | None] = (None, None)

    def get(self) -> bytes:
        with self._cond:
            if self._running:
                gen = self._generation
                self._cond.wait_for(lambda: self._generation != gen)
                body, error = self._result
                if error is not None:
                    raise error
                return body
            self._running = True
        body, error = None, None
        try:
            body = self._render()
            return body
        except BaseException as e:   # noqa: BLE001 - handed to the waiters, then raised
            error = e
            raise
        finally:
            with self._cond:
                self._running = False
                self._generation += 1
                self._result = (body, error)
                self._cond.notify_all()


class _Connection:
    """One client connection: its socket, what the web config gave it when it was accepted, the
    bytes of the request(s) read so far, and its deadline while the event loop holds it; while a
    worker holds it, since when it has been writing (None while its reply is being collected),
    for the loop's check of slow readers."""

    def __init__(self, sock: socket.socket, addr, served: tuple, now: float, timeout: float):
        self.sock, self.addr = sock, addr
        self.web, self.auth = served
        self.handshaking = bool(self.web and self.web.tls)
        self.buf = b""
        self.idle = False                       # kept alive between requests
        self.deadline = now + timeout           # the request (and handshake) must be in by then
        self.since = now                        # held by the loop since (the eldest idle goes first)
        self.busy_since: float | None = None

    def head_end(self) -> int:
        """Where the request's line and headers end in buf (after the blank line), or -1."""
        crlf, lf = self.buf.find(b"\r\n\r\n"), self.buf.find(b"\n\n")
        ends = [i + n for i, n in ((crlf, 4), (lf, 2)) if i >= 0]
        return min(ends) if ends else -1


class _Head:
    """What the event loop reads of a request's line and headers to answer it without a worker;
    a malformed one is a worker's (BaseHTTPRequestHandler's 400) unless basic auth answers it
    first."""

    def __init__(self, head: bytes):
        lines = head.split(b"\n")
        request = lines[0].rstrip(b"\r").split(b" ")
        fields = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if sep:
                fields.setdefault(name.strip().lower(), value.strip())
        self.method = request[0]
        version = request[2] if len(request) == 3 else b""
        value = fields.get(b"authorization")
        self.authorization = value.decode("latin-1") if value is not None else None
        self.healthy = (len(request) == 3 and self.method in (b"GET", b"HEAD")
                        and request[1] == b"/-/healthy" and version in (b"HTTP/1.0", b"HTTP/1.1"))
        # a body would be read as the next request: the connection ends after the reply
        bodiless = b"transfer-encoding" not in fields and fields.get(b"content-length", b"0") == b"0"
        self.keep_alive = (version == b"HTTP/1.1" and bodiless
                           and fields.get(b"connection", b"").lower() != b"close")


_LISTENER, _WAKE = object(), object()


class ExporterServer:
    """Serves /metrics from RENDER on LISTEN ((host, port) pairs: one socket each).

    One event-loop thread accepts connections, does their TLS handshakes, reads each request's
    line and headers (within TIMEOUT seconds of its first byte, or of the connection) and keeps
    connections alive between requests (up to IDLE_TIMEOUT); only a request read whole goes to
    one of WORKERS threads, which answers it and hands the connection back. A client that
    connects and waits, sends a byte at a time, or keeps its connection open between scrapes
    holds no worker, only one of MAX_CONNECTIONS slots (a new connection takes the slot of the
    one the loop has held longest). /-/healthy is answered by the loop itself, so a probe is
    never queued behind a collection; with basic auth, so is a request without credentials (401),
    and a password not seen before goes to CHECKERS threads of its own (503 at once while they
    are busy): only a request whose password passed before waits for a worker."""

    def __init__(self, render: Callable[[], bytes], addresses: list[tuple[str, int]],
                 web: WebConfig | None = None, workers: int = DEFAULT_WORKERS,
                 timeout: float = DEFAULT_TIMEOUT, idle_timeout: float = IDLE_TIMEOUT,
                 max_connections: int = MAX_CONNECTIONS):
        self.scrape = SharedScrape(render)
        self.addresses, self.workers, self.timeout = addresses, workers, timeout
        self.idle_timeout, self.max_connections = idle_timeout, max_connections
        # what a new connection is served by: the config and its users' checker, one tuple
        # that reload() swaps whole
        self.served = (web, BasicAuth(web.users) if web and web.users else None)
        self._socks: list[socket.socket] = []
        self._queue: queue.Queue = queue.Queue(maxsize=workers * QUEUED_PER_WORKER)
        self._checks: queue.Queue = queue.Queue(maxsize=CHECKERS)   # passwords not seen before
        self._held: set[_Connection] = set()      # by the loop
        self._active: set[_Connection] = set()    # by a worker
        self._back: list[_Connection] = []       # handed back by the workers, for the loop
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_w.setblocking(False)   # a worker never waits on a wake-up
        self._sel = selectors.DefaultSelector()
        self._looping: threading.Thread | None = None
        self.refused = 0   # requests answered 503 at once: every worker (or checker) busy, the queue full
        self.evicted = 0   # connections closed to make room for a new one

    def bind(self) -> "ExporterServer":
        for host, port in self.addresses:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            s = socket.socket(family, socket.SOCK_STREAM)
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)   # dual stack
                s.bind((host, port))
                s.listen(128)
            except OSError:
                s.close()
                raise
            self._socks.append(s)
        return self

    @property
    def port(self) -> int:
        return self._socks[0].getsockname()[1]

    def reload(self, web: WebConfig) -> None:
        """Serve the connections from now on by WEB (a rotated certificate, changed users); the
        connections already open keep what they began with."""
        self.served = (web, BasicAuth(web.users) if web.users else None)

    def start(self) -> "ExporterServer":
        for s in self._socks:
            s.setblocking(False)
            self._sel.register(s, selectors.EVENT_READ, _LISTENER)
        self._wake_r.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        self._spawn(self._loop)
        self._looping = self._threads[-1]
        for _ in range(self.workers):
            self._spawn(self._work, self._queue)
        for _ in range(CHECKERS):
            self._spawn(self._work, self._checks)
        return self

    def _spawn(self, fn, *args) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True, name=f"steer-http-{fn.__name__}")
        t.start()
        self._threads.append(t)

    def close(self) -> None:
        """Stop serving: the listening sockets and every connection closed (the loop's, when
        it runs, within a few seconds)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._looping is None:   # bound, never started
            for s in self._socks:
                s.close()
            for s in (self._wake_r, self._wake_w):
                s.close()
            return
        self._wake()
        for lane, threads in ((self._queue, self.workers), (self._checks, CHECKERS)):
            for _ in range(threads):
                try:
                    lane.put_nowait(None)
                except queue.Full:
                    break   # the threads see the stop after their connection
        with self._lock:
            for c in self._active:
                _shutdown(c.sock)
        self._looping.join(timeout=5)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"w")
        except OSError:
            pass   # full (the loop has wake-ups to read) or closed

    # the event loop: every connection that is not being answered

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                soonest = min((c.deadline for c in self._held), default=now + 1.0)
                for key, _ in self._sel.select(max(0.0, min(soonest - now, 1.0))):
                    try:
                        if key.data is _LISTENER:
                            self._accept(key.fileobj)
                        elif key.data is _WAKE:
                            self._take_back()
                        elif key.data in self._held:   # not dropped earlier in this batch
                            self._readable(key.data)
                    except Exception:   # noqa: BLE001 - one client's trouble never ends the loop
                        if isinstance(key.data, _Connection):
                            self._drop(key.data)
                now = time.monotonic()
                for c in [c for c in self._held if c.deadline <= now]:
                    self._drop(c)
                with self._lock:   # workers' connections writing to a client that reads slowly
                    late = [c for c in self._active
                            if c.busy_since is not None and now - c.busy_since > self.timeout]
                for c in late:
                    _shutdown(c.sock)
        finally:
            for c in list(self._held):
                self._drop(c)
            for s in self._socks:
                s.close()
            self._sel.close()
            self._wake_r.close()
            self._wake_w.close()

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(64):
            try:
                sock, addr = listener.accept()
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._evict()   # out of descriptors: the eldest waiting connection goes
                return
            queued = self._queue.qsize() + self._checks.qsize()
            if len(self._held) + len(self._active) + queued >= self.max_connections:
                self._evict()
            now = time.monotonic()
            sock.setblocking(False)
            c = _Connection(sock, addr, self.served, now, self.timeout)
            if c.handshaking:
                try:
                    c.sock = c.web.tls.wrap_socket(sock, server_side=True,
                                                   do_handshake_on_connect=False)
                except (OSError, ValueError):
                    sock.close()
                    continue
            self._hold(c)

    def _evict(self) -> None:
        if self._held:
            self.evicted += 1
            self._drop(min(self._held, key=lambda c: c.since))

    def _hold(self, c: _Connection) -> None:
        self._held.add(c)
        try:
            self._sel.register(c.sock, selectors.EVENT_READ, c)
        except (OSError, ValueError):
            self._drop(c)

    def _drop(self, c: _Connection) -> None:
        if c in self._held:
            self._held.discard(c)
            try:
                self._sel.unregister(c.sock)
            except (KeyError, ValueError, OSError):
                pass
        _close(c.sock)

    def _take_back(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass
        with self._lock:
            back, self._back = self._back, []
        now = time.monotonic()
        for c in back:
            c.idle, c.since = not c.buf, now
            c.deadline = now + (self.timeout if c.buf else self.idle_timeout)
            try:
                c.sock.setblocking(False)
            except OSError:
                _close(c.sock)
                continue
            if c.head_end() >= 0:   # the next request came with the last (pipelined)
                self._dispatch(c, registered=False)
            else:
                self._hold(c)
            # TLS may hold decrypted bytes the selector cannot see: read them now
            if c in self._held and isinstance(c.sock, ssl.SSLSocket) and c.sock.pending():
                self._readable(c)

    def _readable(self, c: _Connection) -> None:
        try:
            if c.handshaking:
                c.sock.do_handshake()
                c.handshaking = False
                self._sel.modify(c.sock, selectors.EVENT_READ, c)
            while True:
                chunk = c.sock.recv(65536)
                if not chunk:
                    self._drop(c)
                    return
                if c.idle:   # a request begins: it has TIMEOUT to come in whole
                    c.idle, c.deadline = False, time.monotonic() + self.timeout
                c.buf += chunk
                if c.head_end() >= 0:
                    self._dispatch(c)
                    return
                if len(c.buf) > MAX_HEAD:
                    self._answer(c, 431, "Request Header Fields Too Large", close=True)
                    return
                if not (isinstance(c.sock, ssl.SSLSocket) and c.sock.pending()):
                    return
        except ssl.SSLWantReadError:
            self._sel.modify(c.sock, selectors.EVENT_READ, c)
        except ssl.SSLWantWriteError:
            self._sel.modify(c.sock, selectors.EVENT_WRITE, c)
        except BlockingIOError:
            pass
        except (OSError, ValueError):
            self._drop(c)

    def _dispatch(self, c: _Connection, registered: bool = True) -> None:
        """C has a whole request: what needs no worker answered here (each request of a
        pipeline in turn), a password not seen before to the checker, the rest to a worker."""
        while True:
            end = c.head_end()
            head = _Head(c.buf[:end])
            anonymous = c.auth is not None and BasicAuth.credentials(head.authorization) is None
            known = not anonymous and (c.auth is None or c.auth.remembered(head.authorization))
            if anonymous:
                reply = (401, "Unauthorized", b"Unauthorized\n", CHALLENGE)
            elif head.healthy and known:
                reply = (200, "OK", b"OK\n", {})
            else:
                break
            code, reason, body, headers = reply
            c.buf = c.buf[end:]
            if not registered:
                self._hold(c)
                registered = True
            self._answer(c, code, reason, close=not head.keep_alive,
                         body=b"" if head.method == b"HEAD" else body, headers=headers)
            if not (head.keep_alive and c in self._held):
                return
            now = time.monotonic()
            c.idle, c.since = not c.buf, now
            c.deadline = now + (self.timeout if c.buf else self.idle_timeout)
            if c.head_end() < 0:
                return
        if registered:
            self._held.discard(c)
            try:
                self._sel.unregister(c.sock)
            except (KeyError, ValueError, OSError):
                pass
        c.busy_since = time.monotonic()
        try:
            (self._queue if known else self._checks).put_nowait(c)
        except queue.Full:
            self.refused += 1
            self._held.add(c)   # for _answer's _drop
            why = b"" if known else b"Busy checking a password: try again\n"
            self._answer(c, 503, "Service Unavailable", close=True, retry=True, body=why)

    def _answer(self, c: _Connection, code: int, reason: str, close: bool, body: bytes = b"",
                retry: bool = False, headers: dict | None = None) -> None:
        """A short reply from the loop, sent without waiting: one that does not fit the socket's
        buffer at once ends the connection."""
        lines = [f"HTTP/1.1 {code} {reason}", "Server: steer", f"Content-Length: {len(body)}",
                 "Content-Type: text/plain; charset=utf-8"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if c.web:
            lines += [f"{k}: {v}" for k, v in c.web.headers.items()]
        if retry:
            lines.append("Retry-After: 1")
        if close:
            lines.append("Connection: close")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
        try:
            sent = c.sock.send(data)
        except (OSError, ValueError):
            sent = -1
        if close or sent != len(data):
            self._drop(c)

    # the workers: a request read whole, answered

    def _work(self, lane: queue.Queue) -> None:
        while not self._stop.is_set():
            c = lane.get()
            if c is None:
                return
            with self._lock:
                self._active.add(c)
            keep = False
            try:
                keep = self._serve(c)
            except Exception:   # noqa: BLE001 - one client's trouble never ends a worker
                pass
            finally:
                with self._lock:
                    self._active.discard(c)
                    if keep and not self._stop.is_set():
                        self._back.append(c)
            if keep and not self._stop.is_set():
                self._wake()
            else:
                _shutdown(c.sock)
                _close(c.sock)

    def _serve(self, c: _Connection) -> bool:
        """Answer the request at the head of C's bytes; whether to keep C for the next one."""
        c.busy_since = time.monotonic()
        c.sock.settimeout(self.timeout)   # each write; the loop bounds the whole reply
        end = c.head_end()
        head, c.buf = c.buf[:end], c.buf[end:]
        handler = _Handler(c, head, self)
        c.busy_since = None
        return not handler.close_connection


def _shutdown(sock) -> None:
    """Shut SOCK down, from any thread. socket.socket's own shutdown, also for a TLS socket:
    SSLSocket.shutdown() drops the TLS state first, and a worker's write that came in between
    (the loop runs beside it) would go out as plaintext."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


def _close(sock) -> None:
    try:
        sock.close()
    except OSError:
        pass


class _SocketWriter:
    """The handler's wfile: each write sent whole, the connection's clock started on the first
    (the loop closes a reply that takes longer than the timeout: a client reading slowly)."""

    def __init__(self, sock, conn: _Connection):
        self.sock, self.conn = sock, conn

    def write(self, data: bytes) -> int:
        if self.conn.busy_since is None:
            self.conn.busy_since = time.monotonic()
        self.sock.sendall(data)
        return len(data)

    def flush(self) -> None:
        pass


class _Handler(BaseHTTPRequestHandler):
    """One request, whose line and headers the event loop has read (HEAD); the reply is written
    to the connection's socket. A request with a body is answered and its connection closed:
    /metrics takes none."""
    protocol_version = "HTTP/1.1"   # keep-alive, as Prometheus scrapes
    server_version = "steer"
    sys_version = ""

    def __init__(self, conn: _Connection, head: bytes, server: ExporterServer):
        self.exporter, self.conn, self._head = server, conn, head
        super().__init__(conn.sock, conn.addr, server)

    def setup(self):
        self.connection = self.request
        self.rfile = io.BytesIO(self._head)
        self.wfile = _SocketWriter(self.connection, self.conn)

    def handle(self):
        self.close_connection = True
        self.handle_one_request()
        headers = getattr(self, "headers", None)
        if headers is not None and (headers.get("Transfer-Encoding")
                                    or headers.get("Content-Length", "0").strip() not in ("", "0")):
            self.close_connection = True   # its body was not read

    def finish(self):
        pass   # the socket is the server's, kept alive or closed by it

    def log_message(self, format, *args):   # noqa: A002 - the base class's name
        pass   # a scrape every few seconds is not news; errors show in the metrics

    def do_HEAD(self):
        self.do_GET(head=True)

    def do_GET(self, head: bool = False):
        if self.conn.auth:
            allowed = self.conn.auth.allows(self.headers.get("Authorization"))
            if allowed is None:   # another password is being checked: not a worker more
                self._reply(503, b"Busy checking a password: try again\n", head,
                            {"Retry-After": "1"})
                return
            if not allowed:
                self._reply(401, b"Unauthorized\n", head, CHALLENGE)
                return
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self.conn.busy_since = None   # collecting: not the client's time
            try:
                body = self.exporter.scrape.get()
            except Exception as e:   # noqa: BLE001 - the scrape fails, the exporter does not
                self.conn.busy_since = time.monotonic()
                self._reply(500, f"collection failed: {type(e).__name__}: {e}\n".encode(), head)
                return
            self.conn.busy_since = time.monotonic()   # writing: the client's time
            extra = {"Content-Type": CONTENT_TYPE}
            if "gzip" in (self.headers.get("Accept-Encoding") or ""):
                body = gzip.compress(body, compresslevel=1)
                extra["Content-Encoding"] = "gzip"
            self._reply(200, body, head, extra)
        elif path == "/-/healthy":
            self._reply(200, b"OK\n", head)
        elif path == "/":
            self._reply(200, b"steer exporter: metrics at /metrics\n", head)
        else:
            self._reply(404, b"Not Found: metrics are at /metrics\n", head)

    def _reply(self, code: int, body: bytes, head: bool, extra: dict | None = None):
        self.send_response(code)
        headers = {"Content-Type": "text/plain; charset=utf-8", **(extra or {})}
        if self.conn.web:
            headers.update(self.conn.web.headers)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)
