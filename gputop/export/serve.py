"""`gputop serve`: one sampler thread feeding a Prometheus /metrics endpoint, no terminal UI.

The sampler ticks on its own thread and hands each Frame to the collector; prometheus-client's
HTTP server renders the newest one on each scrape. Every probed trainer of the user running
it (root with --all-users: of every user) is attached as it appears and let go when it exits,
so its series come and go with it; other users' trainers are left out of /metrics.
"""

from __future__ import annotations

import ipaddress
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import NamedTuple

from gputop.core.model import Frame
from gputop.export.http import Tls, start_server
from gputop.export.metrics import FrameCollector
from gputop.export.scope import TrainerScope
from gputop.frames.sampler import Sampler

DEFAULT_HOST = "127.0.0.1"
# Outside 9100-9999 (Prometheus's exporter port list, fully allocated: node_exporter 9100,
# process-exporter 9256, dcgm-exporter 9400) and 8000 (prometheus-client's examples), below
# the ephemeral range; 19400 reads as "dcgm-exporter's 9400, one step further".
DEFAULT_PORT = 19400


class ListenError(ValueError):
    """A --listen value or a server that cannot be started, in one line."""


class Listen(NamedTuple):
    """Where the server binds."""

    host: str
    port: int

    def url(self, tls: bool = False) -> str:
        """The /metrics URL a scraper uses."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if tls else 'http'}://{host}:{self.port}/metrics"


def parse_listen(text: str) -> Listen:
    """`HOST:PORT`, `[IPv6]:PORT`, `:PORT` (loopback) or `PORT` (loopback)."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
    host = host or DEFAULT_HOST
    try:
        port = int(port_text)
    except ValueError:
        raise ListenError(f"--listen wants HOST:PORT, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise ListenError(f"--listen port must be 0..65535, got {port}")
    if ":" in host and not (bracketed and _is_ip(host)):
        raise ListenError(f"--listen wants [IPv6]:PORT for an IPv6 address, got {text!r}")
    return Listen(host, port)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class TrainerFollower:
    """Attaches the sampler to each probed trainer of `scope` that appears; detaches those
    that exit.

    One new trainer per parent process per tick: a launcher's ranks join the job of the first
    one attached (the attach source finds them), instead of each becoming a job of its own.
    """

    def __init__(self, sampler: Sampler, scope: TrainerScope | None = None) -> None:
        self.sampler = sampler
        self.scope = scope or TrainerScope(None)

    def __call__(self, frame: Frame) -> None:
        attached = {a.pid for a in frame.attached}
        parents: set[int | None] = set()
        for row in frame.processes:
            if (row.has_probe and row.pid not in attached and row.ppid not in parents
                    and self.scope.takes(row.pid, row.start_ticks)):
                parents.add(row.ppid)
                self.sampler.attach(row.pid)
        for state in frame.attached:
            if state.state == "exited" or not state.alive:
                self.sampler.detach(state.pid)


class Server:
    """The HTTP server and sampler of one `gputop serve`, started and stopped together;
    /metrics carries the trainers of `scope` (None: every user's)."""

    def __init__(self, sampler: Sampler, collector: FrameCollector, listen: Listen,
                 tls: Tls | None = None, users: dict[str, bytes] | None = None,
                 scope: TrainerScope | None = None) -> None:
        self.sampler = sampler
        self.collector = collector
        self.scope = scope or TrainerScope(None)
        self.follower = TrainerFollower(sampler, self.scope)
        try:
            self.httpd = start_server(collector, listen.host, listen.port, tls, users)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise ListenError(f"cannot serve on {listen.host}:{listen.port}: {reason}") from None
        self.listen = Listen(listen.host, self.httpd.server_address[1])
        self.tls = tls is not None

    def start(self) -> None:
        """Start sampling; each frame goes to the collector and the trainer follower (the
        priming one too, so that a first scrape already has the GPUs)."""
        self.sampler.start(self._on_frame, on_prime=self._on_frame)

    def _on_frame(self, frame: Frame) -> None:
        frame = self.scope.frame(frame)
        self.collector.update(frame)
        self.follower(frame)

    def stop(self) -> None:
        """Stop serving and sampling."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.sampler.stop()


def serve_until_stopped(server: Server, say: Callable[[str], None]) -> None:
    """Serve until SIGTERM or SIGINT, then stop cleanly."""
    done = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        done.set()

    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.start()
        say(f"gputop serve: metrics at {server.listen.url(server.tls)}")
        while not done.wait(3600):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.stop()


def say_stderr(line: str) -> None:
    """One line on stderr, flushed (a test or a service manager reads it at once)."""
    print(line, file=sys.stderr, flush=True)
