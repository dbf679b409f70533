"""`gputop serve`'s plumbing: headless, scrapes that never sample, --listen and TLS input,
and a port already taken, each a one-line error with exit code 2."""

from __future__ import annotations

import base64
import shutil
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gputop.app.cli import main
from gputop.core.model import GpuReport
from gputop.export.http import AuthFileError, Tls, load_users, start_server
from gputop.export.metrics import FrameCollector
from gputop.export.serve import Listen, ListenError, Server, parse_listen
from gputop.frames.sampler import Sampler
from gputop.sources.host import ProcHostSource
from gputop.sources.processes import ProcProcessSource
from gputop.sources.simulated import SimulatedGpuSource
from tests.helpers.prometheus import serve, serve_env, wait_until

UI_LIBS = {"textual", "rich"}


@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:19400", Listen("127.0.0.1", 19400)),
    ("0.0.0.0:80", Listen("0.0.0.0", 80)),
    ("[::1]:9", Listen("::1", 9)),
    (":5", Listen("127.0.0.1", 5)),
    ("7", Listen("127.0.0.1", 7)),
    ("localhost:0", Listen("localhost", 0)),
])
def test_listen_addresses(text: str, expected: Listen) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["x:y", "127.0.0.1:70000", "::1:9", "", "host:"])
def test_bad_listen_addresses(text: str) -> None:
    with pytest.raises(ListenError):
        parse_listen(text)


class CountingGpu:
    """Simulated GPUs that count how often they are sampled."""

    def __init__(self) -> None:
        self.inner = SimulatedGpuSource("idle", count=1)
        self.samples = 0

    def sample(self) -> GpuReport:
        self.samples += 1
        return self.inner.sample()

    def close(self) -> None:
        self.inner.close()


def test_a_scrape_renders_the_last_frame_and_never_samples() -> None:
    gpu = CountingGpu()
    sampler = Sampler(gpu=gpu, host=ProcHostSource(), processes=ProcProcessSource())
    collector = FrameCollector()
    server = Server(sampler, collector, Listen("127.0.0.1", 0))
    try:
        collector.update(sampler.sample())
        bodies = [urllib.request.urlopen(server.listen.url(), timeout=30).read()
                  for _ in range(5)]
    finally:
        server.stop()
    assert gpu.samples == 1
    assert all(b"gputop_gpu_utilization_ratio{" in body for body in bodies)


def test_the_serve_path_never_loads_textual() -> None:
    code = (
        "import sys, urllib.request\n"
        "import gputop.app.cli\n"
        "from gputop.app.wiring import build_sampler\n"
        "from gputop.export.metrics import FrameCollector\n"
        "from gputop.export.serve import Server, parse_listen\n"
        "s = build_sampler(demo='idle', membw='off')\n"
        "c = FrameCollector(); srv = Server(s, c, parse_listen('127.0.0.1:0'))\n"
        "c.update(s.sample())\n"
        "urllib.request.urlopen(srv.listen.url(), timeout=30).read(); srv.stop()\n"
        "print('\\n'.join(sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    loaded = set(out.stdout.split())
    assert "prometheus_client" in loaded
    assert not {m for m in loaded if m.split(".")[0] in UI_LIBS}


@pytest.mark.parametrize(("argv", "says"), [
    (["serve", "--listen", "nowhere"], "--listen wants HOST:PORT"),
    (["serve", "--tls-cert", "c.pem"], "needs both --tls-cert and --tls-key"),
    (["serve", "--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key"],
     "no such file"),
    (["serve", "--tls-client-ca", "ca.pem"], "goes with --tls-cert"),
    (["serve", "--gpus", "2"], "goes with --demo"),
    (["serve", "--demo", "nonsense"], "nonsense"),
])
def test_bad_serve_input_is_one_line_and_exit_2(argv: list[str], says: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err


def test_a_port_already_taken_is_one_line_and_exit_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["serve", "--listen", f"127.0.0.1:{port}", "--demo", "idle",
                     "--no-demo-trainer", "--membw", "off"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"cannot serve on 127.0.0.1:{port}" in err and err.count("\n") == 1, err


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=120)
    return cert, key


needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None,
                                   reason="openssl (to make a test certificate) is not installed")


@needs_openssl
def test_a_silent_client_holds_up_no_https_scrape(tmp_path: Path) -> None:
    """TLS handshakes happen per connection: prometheus-client's own server does them in its
    accept loop, where one client that connects and says nothing stops every scrape."""
    cert, key = _self_signed(tmp_path)
    server = start_server(FrameCollector(), "127.0.0.1", 0, Tls(str(cert), str(key)))
    port = server.server_address[1]
    try:
        with socket.create_connection(("127.0.0.1", port)):
            trusted = ssl.create_default_context(cafile=str(cert))
            body = urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", timeout=20,
                                          context=trusted).read()
    finally:
        server.shutdown()
        server.server_close()
    assert b"gputop_source_errors" in body


def _get(url: str, auth: str | None = None) -> int:
    headers = {"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()} if auth \
        else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=20) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_basic_auth_lets_in_only_known_users(tmp_path: Path) -> None:
    users_file = tmp_path / "users"
    users_file.write_text("# who may scrape\nprom:s3cret:with:colons\n")
    users_file.chmod(0o600)
    server = start_server(FrameCollector(), "127.0.0.1", 0, users=load_users(str(users_file)))
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    try:
        answers = [_get(url), _get(url, "prom:wrong"), _get(url, "nobody:s3cret:with:colons"),
                   _get(url, "prom:s3cret:with:colons")]
    finally:
        server.shutdown()
        server.server_close()
    assert answers == [401, 401, 401, 200]


def test_a_users_file_others_can_read_is_refused(tmp_path: Path) -> None:
    users_file = tmp_path / "users"
    users_file.write_text("prom:s3cret\n")
    users_file.chmod(0o644)
    with pytest.raises(AuthFileError, match="chmod 600"):
        load_users(str(users_file))
    assert main(["serve", "--basic-auth-file", str(users_file)]) == 2
    users_file.chmod(0o600)
    users_file.write_text("no colon here\n")
    with pytest.raises(AuthFileError, match="want user:password"):
        load_users(str(users_file))


@pytest.mark.slow
@needs_openssl
def test_tls_serves_https_only(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    args = ["--listen", "127.0.0.1:0", "--demo", "idle", "--no-demo-trainer", "--membw", "off",
            "--tls-cert", str(cert), "--tls-key", str(key)]
    with serve(args, serve_env(tmp_path)) as exporter:
        assert exporter.url.startswith("https://")
        trusted = ssl.create_default_context(cafile=str(cert))
        wait_until(lambda: "gputop_exporter_info" in exporter.scrape(context=trusted), 60,
                   what="a frame in the HTTPS scrape")
        plain = exporter.url.replace("https://", "http://")
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(plain, timeout=10).read()
        assert "gputop_exporter_info" in exporter.scrape(context=trusted)  # still serving
