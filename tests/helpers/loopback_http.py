"""An HTTP server on a loopback port that answers as the test tells it to, byte by byte if it
likes: a Prometheus API, a drip, an endless answer, a redirect. It records the paths asked
and whether a client hung up while it was still answering."""

from __future__ import annotations

import contextlib
import json
import socketserver
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any, BinaryIO, cast

Respond = Callable[[str, BinaryIO], None]
Answers = Callable[[str], list[dict[str, Any]]]


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, respond: Respond) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.respond = respond
        self.asked: list[str] = []
        self.hung_up = threading.Event()


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        request_line = self.rfile.readline(65537).decode("latin-1")
        while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
            pass  # the request's headers: nothing here depends on them
        parts = request_line.split()
        if len(parts) < 2:
            return
        self.server.asked.append(parts[1])
        try:
            self.server.respond(parts[1], cast(BinaryIO, self.wfile))
        except (BrokenPipeError, ConnectionResetError):
            self.server.hung_up.set()


class Loopback:
    """A running server: its base URL, the paths asked, whether a client hung up early."""

    def __init__(self, server: _Server) -> None:
        host, port = server.server_address[:2]
        self.url = f"http://{host!s}:{port}"
        self.port = int(port)
        self.asked = server.asked
        self.hung_up = server.hung_up


@contextlib.contextmanager
def http_server(respond: Respond) -> Iterator[Loopback]:
    """A server answering each request with `respond(path, wfile)`, for the block."""
    server = _Server(respond)
    thread = threading.Thread(target=server.serve_forever, name="loopback-http", daemon=True)
    thread.start()
    try:
        yield Loopback(server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def head(status: str = "200 OK", headers: Sequence[tuple[str, str]] = ()) -> bytes:
    """A response's status line and headers, the connection closed after the body."""
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers), "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def send(wfile: BinaryIO, body: bytes, status: str = "200 OK") -> None:
    """A whole JSON response at once."""
    wfile.write(head(status, [("Content-Type", "application/json"),
                              ("Content-Length", str(len(body)))]) + body)


def api_body(data: object) -> bytes:
    """A successful Prometheus API answer carrying `data`."""
    return json.dumps({"status": "success", "data": data}).encode()


def query_of(path: str) -> str:
    """The PromQL of an /api/v1/query path ("" for any other path)."""
    split = urllib.parse.urlsplit(path)
    if split.path != "/api/v1/query":
        return ""
    return urllib.parse.parse_qs(split.query).get("query", [""])[0]


def prometheus_api(answers: Answers) -> Respond:
    """A Prometheus HTTP API whose instant queries `answers(promql)` answers as a vector; it
    lists no targets and has no global scrape interval."""

    def respond(path: str, wfile: BinaryIO) -> None:
        split = urllib.parse.urlsplit(path)
        if split.path == "/api/v1/query":
            data: object = {"resultType": "vector", "result": answers(query_of(path))}
        elif split.path == "/api/v1/targets":
            data = {"activeTargets": [], "droppedTargets": []}
        elif split.path == "/api/v1/status/config":
            data = {"yaml": "global:\n  evaluation_interval: 1m\n"}
        else:
            send(wfile, b'{"status":"error","error":"not found"}', "404 Not Found")
            return
        send(wfile, api_body(data))

    return respond


def per_instance(values: dict[str, str], **labels: str) -> list[dict[str, Any]]:
    """A result vector: one series per instance, each with its value as Prometheus writes it
    ("0.5", "NaN", "+Inf")."""
    return [{"metric": {"instance": instance, **labels}, "value": [1.0, value]}
            for instance, value in values.items()]
