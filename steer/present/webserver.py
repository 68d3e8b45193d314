"""The exporter's HTTP server, fit to face a network: TLS, client certificates and basic auth from
a web configuration file in the Prometheus exporter toolkit's format (node_exporter's
--web.config.file), a deadline on reading each request, a bounded pool of workers, and scrapes
that arrive while one is being collected served by that one collection.

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
import os
import queue
import re
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
QUEUED_PER_WORKER = 4           # connections that wait for a worker; beyond that they are closed
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

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
    as the toolkit does; an unknown user costs as much as a known one."""

    CACHE = 64

    def __init__(self, users: dict[str, bytes]):
        import bcrypt
        self._bcrypt = bcrypt
        self.users = users
        self._dummy = bcrypt.hashpw(b"steer", bcrypt.gensalt(rounds=10))
        self._passed: dict[bytes, None] = {}
        self._lock = threading.Lock()

    def allows(self, header: str | None) -> bool:
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, sep, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        if not sep:
            return False
        digest = hashlib.sha256(f"{user}\0{password}".encode()).digest()
        with self._lock:
            if any(hmac.compare_digest(digest, d) for d in self._passed):
                return True
        hashed = self.users.get(user)
        ok = self._bcrypt.checkpw(password.encode(), hashed or self._dummy) and hashed is not None
        if ok:
            with self._lock:
                self._passed[digest] = None
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
    """One client connection's socket and since when it has been reading or writing (None while
    its reply is being collected), for the reaper."""

    def __init__(self, sock: socket.socket, addr):
        self.sock, self.addr = sock, addr
        self.busy_since: float | None = time.monotonic()
        self.web: WebConfig | None = None
        self.auth: BasicAuth | None = None


class ExporterServer:
    """Serves /metrics from RENDER on LISTEN ((host, port) pairs: one socket each)."""

    def __init__(self, render: Callable[[], bytes], addresses: list[tuple[str, int]],
                 web: WebConfig | None = None, workers: int = DEFAULT_WORKERS,
                 timeout: float = DEFAULT_TIMEOUT):
        self.scrape = SharedScrape(render)
        self.addresses, self.workers, self.timeout = addresses, workers, timeout
        # what a new connection is served by: the config and its users' checker, one tuple
        # that reload() swaps whole
        self.served = (web, BasicAuth(web.users) if web and web.users else None)
        self._socks: list[socket.socket] = []
        self._queue: queue.Queue = queue.Queue(maxsize=workers * QUEUED_PER_WORKER)
        self._active: set[_Connection] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.refused = 0   # connections closed at once: every worker busy and the queue full

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
            self._spawn(self._accept, s)
        for _ in range(self.workers):
            self._spawn(self._work)
        self._spawn(self._reap)
        return self

    def _spawn(self, fn, *args) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True, name=f"steer-http-{fn.__name__}")
        t.start()
        self._threads.append(t)

    def close(self) -> None:
        self._stop.set()
        for s in self._socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        with self._lock:
            for c in self._active:
                _shutdown(c.sock)

    def _accept(self, listener: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                sock, addr = listener.accept()
            except OSError as e:
                if self._stop.is_set():
                    return
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    time.sleep(0.1)   # out of descriptors: let the workers free some
                continue
            try:
                self._queue.put_nowait(_Connection(sock, addr))
            except queue.Full:
                self.refused += 1
                sock.close()

    def _work(self) -> None:
        while not self._stop.is_set():
            conn = self._queue.get()
            with self._lock:
                self._active.add(conn)
            try:
                self._serve(conn)
            except Exception:   # noqa: BLE001 - one client's trouble never ends a worker
                pass
            finally:
                with self._lock:
                    self._active.discard(conn)
                _shutdown(conn.sock)
                conn.sock.close()

    def _serve(self, conn: _Connection) -> None:
        conn.busy_since = time.monotonic()
        sock = conn.sock
        sock.settimeout(self.timeout)
        conn.web, conn.auth = self.served
        if conn.web and conn.web.tls:
            sock = conn.web.tls.wrap_socket(sock, server_side=True)   # the handshake, timed
            conn.sock = sock
        _Handler(sock, conn.addr, self, conn)

    def _reap(self) -> None:
        """Close connections that have been reading a request or writing a reply for longer than
        the timeout: a socket timeout bounds each read, not a client that sends a byte at a time."""
        while not self._stop.wait(min(1.0, self.timeout / 4)):
            now = time.monotonic()
            with self._lock:
                late = [c for c in self._active
                        if c.busy_since is not None and now - c.busy_since > self.timeout]
            for c in late:
                _shutdown(c.sock)


def _shutdown(sock) -> None:
    """Shut SOCK down, from any thread. socket.socket's own shutdown, also for a TLS socket:
    SSLSocket.shutdown() drops the TLS state first, and a worker's write that came in between
    (the reaper runs beside it) would go out as plaintext."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # keep-alive, as Prometheus scrapes
    server_version = "steer"
    sys_version = ""

    def __init__(self, sock, addr, server: ExporterServer, conn: _Connection):
        self.exporter, self.conn = server, conn
        super().__init__(sock, addr, server)

    def setup(self):
        super().setup()
        self.connection.settimeout(self.exporter.timeout)

    def handle_one_request(self):
        self.conn.busy_since = time.monotonic()   # reading the next request
        super().handle_one_request()

    def log_message(self, format, *args):   # noqa: A002 - the base class's name
        pass   # a scrape every few seconds is not news; errors show in the metrics

    def do_HEAD(self):
        self.do_GET(head=True)

    def do_GET(self, head: bool = False):
        if self.conn.auth and not self.conn.auth.allows(self.headers.get("Authorization")):
            self._reply(401, b"Unauthorized\n", head, {"WWW-Authenticate": 'Basic realm="steer"'})
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
            self.conn.busy_since = time.monotonic()
            extra = {"Content-Type": CONTENT_TYPE}
            if "gzip" in (self.headers.get("Accept-Encoding") or ""):
                body = gzip.compress(body, compresslevel=1)
                extra["Content-Encoding"] = "gzip"
            self._reply(200, body, head, extra)
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
