"""Real `gputop serve` processes and a real Prometheus server on loopback, for the exporter's
end-to-end tests: started with temporary configs and data, always stopped."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tests.helpers.probe import ROOT

T = TypeVar("T")
OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def free_port() -> int:
    """A loopback port nobody listens on right now (for servers that cannot take port 0)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(probe: Callable[[], T | None], timeout_s: float = 60.0,
               pause_s: float = 0.25, what: str = "condition") -> T:
    """`probe()`'s first truthy answer; fails after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = probe()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(pause_s)


def read_line(stream: Any, timeout_s: float) -> str:
    """One line from a child's pipe, or AssertionError when none comes in time."""
    selector = selectors.DefaultSelector()
    selector.register(stream, selectors.EVENT_READ)
    data = b""
    deadline = time.monotonic() + timeout_s
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not selector.select(left):
            raise AssertionError(f"no line in {timeout_s} s; got {data!r}")
        chunk = os.read(stream.fileno(), 1)
        if not chunk:
            raise AssertionError(f"the pipe closed; got {data!r}")
        data += chunk
    return data.decode()


class Serve:
    """A running `gputop serve` subprocess and the URL it said it serves."""

    def __init__(self, args: Sequence[str], env: dict[str, str]) -> None:
        # -X faulthandler: a serve that will not stop is sent SIGABRT and prints every
        # thread's stack, which stop() reports
        self.process = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", "-m", "gputop", "serve", *args], cwd=ROOT,
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        assert self.process.stderr is not None
        line = read_line(self.process.stderr, 120)
        assert "metrics at " in line, line
        self.url = line.split("metrics at ", 1)[1].strip()
        self.target = urllib.parse.urlsplit(self.url).netloc
        self.said: list[bytes] = []  # its stderr after that line, drained so it never blocks
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()

    def _read_stderr(self) -> None:
        stream = self.process.stderr
        assert stream is not None
        for chunk in iter(lambda: os.read(stream.fileno(), 65536), b""):
            self.said.append(chunk)

    def scrape(self, accept: str | None = None, context: Any = None) -> str:
        """One scrape of /metrics."""
        request = urllib.request.Request(self.url, headers={"Accept": accept} if accept else {})
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return str(response.read().decode())

    def stop(self) -> int:
        """SIGTERM, and the exit code (it must stop by itself; one that does not fails with
        its threads' stacks and what it wrote to stderr)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(10)
            self._drain.join(5)
            said = b"".join(self.said).decode(errors="replace")
            raise AssertionError(f"gputop serve ignored SIGTERM for 30 s:\n{said[-6000:]}"
                                 ) from None
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(10)
            self._drain.join(5)
            if self.process.stderr is not None:
                self.process.stderr.close()


@contextlib.contextmanager
def serve(args: Sequence[str], env: dict[str, str]) -> Iterator[Serve]:
    """`gputop serve ARGS` for the duration of the block; it must exit 0 on SIGTERM."""
    server = Serve(args, env)
    try:
        yield server
    finally:
        code = server.stop()
    assert code == 0, f"gputop serve exited with {code}"


def serve_env(ring_dir: Path) -> dict[str, str]:
    """Our environment with rings in `ring_dir` (other sessions' trainers stay out) and this
    checkout importable."""
    env = {**os.environ, "GPUTOP_RING_DIR": str(ring_dir)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def metric_lines(text: str, name: str, **labels: str) -> list[str]:
    """The sample lines of the text format for `name` carrying `labels`."""
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    return [line for line in text.splitlines()
            if line.startswith(name + "{") and all(w in line for w in wanted)]


class Prometheus:
    """A Prometheus server (Debian's /usr/bin/prometheus) on a loopback port, scraping
    `targets` every `interval_s`, with its data in `data` (default: under `workdir`)."""

    def __init__(self, workdir: Path, targets: Sequence[str], interval_s: float = 1.0,
                 data: Path | None = None) -> None:
        binary = shutil.which("prometheus")
        assert binary is not None
        config = workdir / "prometheus.yml"
        every = f"{round(interval_s * 1000)}ms"
        config.write_text(
            f"global:\n  scrape_interval: {every}\n  scrape_timeout: {every}\n"
            "scrape_configs:\n  - job_name: gputop\n    static_configs:\n"
            f"      - targets: {json.dumps(list(targets))}\n")
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "prometheus.log"
        self.log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={data or workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, cwd=workdir)
        wait_until(self._ready, 60, what="Prometheus to be ready")

    def _ready(self) -> bool:
        assert self.process.poll() is None, self.log_path.read_text()[-2000:]
        try:
            with urllib.request.urlopen(f"{self.base}/-/ready", timeout=5) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query over the HTTP API: the result vector."""
        url = f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=30) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.log.close()


@contextlib.contextmanager
def prometheus(workdir: Path, targets: Sequence[str], interval_s: float = 1.0,
               data: Path | None = None) -> Iterator[Prometheus]:
    """A Prometheus server for the duration of the block."""
    server = Prometheus(workdir, targets, interval_s, data)
    try:
        yield server
    finally:
        server.stop()
