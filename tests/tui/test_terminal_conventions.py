"""Terminal conventions in a real terminal (tmux, or a pty of our own): NO_COLOR, ASCII
locales and --ascii, 8/16-colour terminals, stderr sent to a file, a terminal that goes
away."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import shutil
import struct
import subprocess
import termios
import time
from pathlib import Path

import pytest

from tests.helpers import tmux

REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]
WARN_TEXT = "68.2G/79.6G"  # GPU memory at 86 % in the data-starved scenario: a warning
CRIT_TEXT = "data-bound"   # the summary's verdict for a data-starved trainer: critical
SUMMARY = "of step time"  # the summary line: "data-bound  input-bound 98% of step time"


def _demo(env: str, extra: str = "") -> str:
    python = tmux.PYTHON
    return (f"env -u COLORTERM PYTHONPATH={REPO} {env} {python} -m gputop --demo data-starved"
            f" {extra}")


def _app_with_steps(screen: str) -> bool:
    """The full view (not the splash) is up and the demo trainer's steps are summarized."""
    return "SIMULATED GPUs" in screen and "GPU MEM" in screen and any(
        SUMMARY in line and CRIT_TEXT in line for line in screen.splitlines())


def _quit(name: str) -> None:
    tmux.tmux("send-keys", "-t", name, "q")
    assert tmux.exit_code(name) == 0, tmux.screen(name)


def test_no_color_sends_no_colour_yet_warning_and_critical_differ() -> None:
    """no-color.org: NO_COLOR=1 means no colour codes at all; bold/reverse/underline carry
    the severity instead."""
    with tmux.session(REPO) as name:
        tmux.spawn(name, _demo("NO_COLOR=1 TERM=xterm-256color"))
        tmux.wait_for(name, _app_with_steps)
        styled = tmux.screen(name, styled=True)
        assert tmux.colour_codes(styled) == [], styled
        warn = tmux.style_of(styled, WARN_TEXT)
        crit = tmux.style_of(styled, CRIT_TEXT, in_line_with=SUMMARY)
        assert warn.attrs and crit.attrs and warn != crit, (warn, crit)
        _quit(name)


@pytest.mark.parametrize("env,flag", [
    ("LANG=C LC_ALL=C PYTHONUTF8=0", ""),
    ("LANG=C.UTF-8 LC_ALL=C.UTF-8", "--ascii"),
], ids=["c-locale", "ascii-flag"])
def test_ascii_terminal_gets_only_ascii(env: str, flag: str) -> None:
    """Where the locale is not UTF-8 (or with --ascii) every cell is ASCII: bars are '#',
    and no glyph turns into an escape like \\u2588."""
    with tmux.session(REPO) as name:
        tmux.spawn(name, _demo(f"{env} TERM=xterm-256color", flag))
        screen = tmux.wait_for(name, _app_with_steps)
        assert screen.isascii(), [ch for ch in screen if not ch.isascii()][:20]
        # gputop's own glyphs became ASCII, not escapes (other processes' argv may be escaped)
        assert not [g for g in "█▏▕▁▃…→µ°◆▾├└·" if ascii(g)[1:-1] in screen], screen
        gpu_rows = [line for line in screen.splitlines() if "Simulated" in line]
        assert gpu_rows and all("#" in line for line in gpu_rows), screen
        _quit(name)


def test_sixteen_colours_tell_warning_from_critical_and_data_from_h2d() -> None:
    """TERM=xterm means 16 colours: warning and critical, and the data and h2d phases of the
    legend, must not map to the same colour."""
    with tmux.session(REPO) as name:
        tmux.spawn(name, _demo("TERM=xterm"))
        tmux.wait_for(name, _app_with_steps)
        styled = tmux.screen(name, styled=True)
        assert not any(params[:1] in (["38"], ["48"]) for params in tmux.sgr_codes(styled))
        warn = tmux.style_of(styled, WARN_TEXT)
        crit = tmux.style_of(styled, CRIT_TEXT, in_line_with=SUMMARY)
        assert warn.fg and crit.fg and warn != crit, (warn, crit)
        legend = [tmux.style_of(styled, word) for word in ("█data", "█fwd", "█bwd", "█opt")
                  if word in tmux.screen(name)]  # the legend shows the measured phases only
        assert len(legend) >= 3 and len({style.fg for style in legend}) == len(legend), legend
        _quit(name)


def test_stderr_to_a_file_keeps_the_screen_on_the_terminal(tmp_path: Path) -> None:
    """`gputop 2>err.log`: the full view comes up on the terminal, and the file gets no
    escape codes."""
    log = tmp_path / "err.log"
    with tmux.session(REPO) as name:
        tmux.spawn(name, _demo("TERM=xterm-256color") + f" 2>{log}")
        tmux.wait_for(name, _app_with_steps, timeout_s=60)
        _quit(name)
    assert "\x1b" not in log.read_text(errors="replace")


def test_a_terminal_that_goes_away_ends_gputop_cleanly(tmp_path: Path) -> None:
    """The terminal's far end closes (an SSH drop without SIGHUP, a closed terminal window):
    writes to it fail and reads end. gputop exits 0 within seconds, with no traceback."""
    master, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    log = tmp_path / "err.log"
    python = tmux.PYTHON
    with log.open("w") as err:
        proc = subprocess.Popen(
            [python, "-m", "gputop"], stdin=terminal, stdout=terminal, stderr=err,
            env={**os.environ, "TERM": "xterm-256color", "PYTHONPATH": str(REPO)},
            start_new_session=True)
    os.close(terminal)
    try:
        shown = _read_until(master, b"%CPU", timeout_s=60)
        assert b"%CPU" in shown, shown[-2000:]
        time.sleep(1.5)  # a frame or so more of the full view
        _read_until(master, b"\0", timeout_s=0.2)  # drain what it drew meanwhile
        os.close(master)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in log.read_text(errors="replace"), log.read_text()


def _read_until(fd: int, needle: bytes, timeout_s: float) -> bytes:
    """What the program drew on the terminal until `needle` appeared or `timeout_s` passed."""
    seen = b""
    deadline = time.monotonic() + timeout_s
    while needle not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        try:
            seen += os.read(fd, 65536)
        except OSError:
            break
    return seen
