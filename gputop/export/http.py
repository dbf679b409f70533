"""The HTTP(S) server behind `gputop serve`: prometheus-client's WSGI app (content
negotiation between the text format and OpenMetrics, gzip, `name[]` filters) in a threaded
server whose TLS handshakes and reads happen per connection, with a time limit, so a client
that connects and stays silent holds up nobody else; optional HTTP basic auth."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import socket
import ssl
import stat
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.registry import Collector

from gputop.core import debuglog

REQUEST_TIMEOUT_S = 30.0  # a connection's handshake and request, each read
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class AuthFileError(ValueError):
    """A basic-auth users file that cannot be used, in one line."""


@dataclass(frozen=True)
class Tls:
    """A server certificate and key (PEM), and optionally a CA that client certificates
    must be signed by (mutual TLS)."""

    cert_file: str
    key_file: str
    client_ca_file: str | None = None

    def context(self) -> ssl.SSLContext:
        """The server's TLS context (TLS 1.2 or later)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file is not None:
            context.load_verify_locations(cafile=self.client_ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
        return context


def load_users(path: str) -> dict[str, bytes]:
    """`user:password` lines (# comments, blank lines) from a file only its owner can read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise AuthFileError(f"cannot read {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise AuthFileError(f"{path} is not a regular file")
        if info.st_mode & 0o077:
            raise AuthFileError(f"{path} can be read by other users: chmod 600 {path}")
        text = handle.read(1 << 20).decode("utf-8", "replace")
    users = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user or not password:
            raise AuthFileError(f"{path}:{number}: want user:password")
        users[user] = _digest(password)
    if not users:
        raise AuthFileError(f"{path} names no user (want user:password lines)")
    return users


def _digest(password: str) -> bytes:
    return hashlib.sha256(password.encode()).digest()


def _authorized(header: str, users: dict[str, bytes]) -> bool:
    """Whether an Authorization header carries one of `users` with the right password,
    compared in constant time."""
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        user, _, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(
            ":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    expected = users.get(user)
    matched = hmac.compare_digest(_digest(password), expected or b"\0" * 32)
    return matched and expected is not None


def with_basic_auth(app: WsgiApp, users: dict[str, bytes]) -> WsgiApp:
    """`app` behind HTTP basic auth: 401 without a known user and password."""

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if _authorized(environ.get("HTTP_AUTHORIZATION", ""), users):
            return app(environ, start_response)
        start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="gputop"'),
                                            ("Content-Type", "text/plain; charset=utf-8")])
        return [b"401 Unauthorized\n"]

    return guarded


class _Handler(WSGIRequestHandler):
    """Quiet, time-limited, and doing the TLS handshake on its own thread."""

    timeout = REQUEST_TIMEOUT_S

    def setup(self) -> None:
        super().setup()  # sets the timeout on the connection
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()

    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing: a scrape a second would fill any log."""


class _Server(ThreadingMixIn, WSGIServer):
    """A thread per connection; failures go to the debug log, not to stderr."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if exc is not None:
            debuglog.log_exception(f"serving {client_address}", exc)


def start_server(collector: Collector, host: str, port: int, tls: Tls | None = None,
                 users: dict[str, bytes] | None = None) -> _Server:
    """Serve `collector` on host:port (port 0: any free one) from a daemon thread."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    app: WsgiApp = make_wsgi_app(registry)
    if users:
        app = with_basic_auth(app, users)
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]

    class Bound(_Server):
        address_family = family[0]

    context = tls.context() if tls is not None else None  # bad files fail before binding
    server = make_server(str(family[4][0]), port, app, Bound, handler_class=_Handler)
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True,
                                            do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, name="gputop-http", daemon=True).start()
    return server
