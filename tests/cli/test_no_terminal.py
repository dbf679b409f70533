"""Without a terminal a screen is one line and exit 1, as htop and btop do; no escape byte
is written. A crash inside the screen exits 1 too (the README's "1 internal error")."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gputop.app.options import NO_TERMINAL
from tests.helpers import tmux
from tests.helpers.cli import gputop

REPO = Path(__file__).resolve().parents[2]
ESC = b"\x1b"


def _headless(args: tuple[str, ...], tmp_path: Path) -> tuple[int, bytes, bytes]:
    """Run gputop with stdin from /dev/null and stdout into a file, as `ssh host gputop` or
    `gputop >file` do; its exit code, stdout and stderr bytes."""
    out = tmp_path / "out"
    with out.open("wb") as sink:
        done = subprocess.run([sys.executable, "-m", "gputop", *args], stdin=subprocess.DEVNULL,
                              stdout=sink, stderr=subprocess.PIPE, timeout=120, cwd=REPO)
    return done.returncode, out.read_bytes(), done.stderr


@pytest.mark.parametrize("args", [(), ("--demo", "idle"), ("--demo", "data-starved"),
                                  ("--fleet", "http://127.0.0.1:9")])
def test_a_screen_without_a_terminal_is_one_line_and_exit_1(
        tmp_path: Path, args: tuple[str, ...]) -> None:
    code, out, err = _headless(args, tmp_path)
    assert code == 1, err
    assert ESC not in out and ESC not in err
    assert err.decode() == f"gputop: {NO_TERMINAL}\n"


def test_bad_input_without_a_terminal_is_still_bad_input(tmp_path: Path) -> None:
    code, out, err = _headless(("--demo", "no-such-scenario"), tmp_path)
    assert code == 2 and ESC not in out + err and err.count(b"\n") == 1


def test_replay_without_a_terminal_says_how_to_read_the_file(tmp_path: Path) -> None:
    path = tmp_path / "ok.sqlite"
    made = gputop("record", str(path), "--interval", "0.2", "--duration", "0.5", "--membw", "off")
    assert made.returncode == 0, made.stderr
    code, out, err = _headless(("replay", str(path)), tmp_path)
    assert code == 1 and ESC not in out + err
    assert err.decode().startswith("gputop: replay needs a terminal; query the file with sqlite3")
    assert err.count(b"\n") == 1


def test_once_needs_no_terminal(tmp_path: Path) -> None:
    code, out, err = _headless(("--once", "--membw", "off"), tmp_path)
    assert code == 0, err
    assert ESC not in out and b"GPU" in out


needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@needs_tmux
def test_stdout_into_a_file_from_a_terminal_writes_no_escape(tmp_path: Path) -> None:
    out = tmp_path / "screen.txt"
    with tmux.session(REPO, 100, 30) as name:
        tmux.spawn(name, f"{shlex.quote(tmux.PYTHON)} -m gputop --demo idle > {out}")
        assert tmux.exit_code(name, timeout_s=120) == 1
        assert NO_TERMINAL in tmux.screen(name)
    assert out.read_bytes() == b""


CRASH = """
import sys
from gputop.tui.app import GputopApp
def broken(self):
    raise RuntimeError("a bug in a key's action")
GputopApp.action_help = broken
from gputop.app.cli import main
sys.exit(main(["--demo", "idle", "--membw", "off"]))
"""


@needs_tmux
def test_a_crash_inside_the_screen_exits_1(tmp_path: Path) -> None:
    script = tmp_path / "crash.py"
    script.write_text(CRASH)
    with tmux.session(REPO, 100, 30) as name:
        tmux.spawn(name, f"{shlex.quote(tmux.PYTHON)} {script}")
        tmux.wait_for(name, lambda s: "GPU" in s and "simulated" in s.lower(), timeout_s=120)
        tmux.tmux("send-keys", "-t", name, "?")
        assert tmux.exit_code(name, timeout_s=60) == 1
