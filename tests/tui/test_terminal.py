"""End to end in a real terminal: tmux runs `python -m gputop --demo`, we read, resize, quit."""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import tmux
from tests.helpers.processes import children, gone

REPO = Path(__file__).resolve().parents[2]
_tmux, _screen, _wait_for, _exit_code = tmux.tmux, tmux.screen, tmux.wait_for, tmux.exit_code


def _spawn(name: str, command: str) -> None:
    """Run `command` in the pane, reporting its exit code and the tty's mode after it."""
    tmux.spawn(name, command, tty_mode=True)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


def _entry() -> list[str]:
    """`python -m gputop --demo data-starved` from the project's venv."""
    python = tmux.PYTHON
    return [python, "-m", "gputop", "--demo", "data-starved"]


@pytest.fixture
def session() -> Iterator[str]:
    """A detached 100x30 tmux session whose pane stays after the program exits."""
    with tmux.session(REPO, 100, 30) as name:
        yield name


def test_demo_in_tmux_shows_gpus_and_trainer_resizes_and_quits(session: str) -> None:
    command = " ".join(_entry())
    env = f"TERM=xterm-256color PYTHONPATH={REPO}"
    _spawn(session, f"env {env} {command}")

    def trainer_with_workers(screen: str) -> bool:
        return "SIMULATED GPUs" in screen and "pt_data_worker" in screen and "[3w" in screen

    screen = _wait_for(session, trainer_with_workers)
    trainer_pid = _own_demo_trainer(session)
    assert sum(1 for line in screen.splitlines() if "mem " in line and "/79.6G" in line) == 4

    for width, height in ((80, 24), (40, 12), (200, 60)):
        _tmux("resize-window", "-t", session, "-x", str(width), "-y", str(height))

        def fits(s: str, w: int = width) -> bool:
            return max(len(line) for line in s.splitlines()) <= w and "SIMULATED" in s

        _wait_for(session, fits)
    assert "EXIT=" not in _screen(session)  # still running after every resize

    _tmux("send-keys", "-t", session, "q")
    assert _exit_code(session) == 0
    assert gone(trainer_pid), "the demo trainer outlived gputop"


def test_ctrl_c_exits_cleanly(session: str) -> None:
    command = " ".join(_entry())
    _spawn(session, f"env PYTHONPATH={REPO} TERM=xterm {command}")
    _wait_for(session, lambda s: "SIMULATED GPUs" in s and "PID" in s)
    _tmux("send-keys", "-t", session, "C-c")
    assert _exit_code(session) == 0, _screen(session)


def _own_demo_trainer(session: str) -> int:
    """The demo trainer this session's gputop started (other gputops may run here too)."""
    return tmux.pane_process(session, b"gputop.app.demo_trainer")


def test_sighup_exits_cleanly_and_restores_the_terminal(session: str) -> None:
    """An SSH drop sends SIGHUP: gputop must leave the tty cooked and take its trainer along."""
    command = " ".join(_entry())
    script = (f"env PYTHONPATH={REPO} TERM=xterm {command}; echo EXIT=$?; "
              "stty -a | tr ' ' '\\n' | grep -x -- '-*icanon'; sleep 60")
    _tmux("respawn-pane", "-k", "-t", session, f"sh -c \"{script}\"")
    screen = _wait_for(session, lambda s: "SIMULATED GPUs" in s and "[3w" in s)
    trainer_pid = _own_demo_trainer(session)
    shell = int(_tmux("display-message", "-p", "-t", session, "#{pane_pid}").strip())
    (gputop_pid,) = children(shell)
    os.kill(gputop_pid, signal.SIGHUP)
    screen = _wait_for(session, lambda s: "EXIT=" in s and "icanon" in s, timeout_s=30)
    lines = screen.splitlines()
    assert "EXIT=0" in lines, screen
    assert "icanon" in lines and "-icanon" not in lines, screen  # canonical mode is back
    assert gone(trainer_pid), "the demo trainer outlived gputop"


def _splash_then_app(name: str) -> list[str]:
    """Poll fast from launch; the distinct screens seen: the splash's, then the app's."""
    seen: list[str] = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        screen = _screen(name)
        kind = "app" if " F10 quit" in screen else "splash" if "starting the full view" in screen \
            else ""
        if kind and (not seen or seen[-1] != kind):
            seen.append(kind)
        if kind == "app" and "SIMULATED GPUs" in screen and "PID" in screen:
            return seen
        time.sleep(0.01)
    raise AssertionError(f"the app never came up; seen {seen}; last screen:\n{_screen(name)}")


def _splash_shown(name: str) -> str:
    """Poll fast until the splash is on screen (it shows only while Textual loads)."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        screen = _screen(name)
        if "starting the full view" in screen:
            return screen
        time.sleep(0.01)
    raise AssertionError(f"no splash; last screen:\n{_screen(name)}")


def test_splash_shows_first_then_the_app_and_q_exits_0(session: str) -> None:
    """The plain first screen (banner, %CPU rows) is up before Textual draws; q still quits."""
    command = " ".join(_entry())
    script = (f"env PYTHONPATH={REPO} TERM=xterm-256color {command}; echo EXIT=$?; "
              "stty -a | tr ' ' '\\n' | grep -x -- '-*icanon'; sleep 60")
    _tmux("respawn-pane", "-k", "-t", session, f"sh -c \"{script}\"")
    assert _splash_then_app(session) == ["splash", "app"]
    _tmux("send-keys", "-t", session, "q")
    screen = _wait_for(session, lambda s: "EXIT=" in s and "icanon" in s, timeout_s=30)
    lines = screen.splitlines()
    assert "EXIT=0" in lines, screen
    assert "icanon" in lines and "-icanon" not in lines, screen


def test_keys_typed_during_the_splash_reach_the_app_unechoed(session: str) -> None:
    """q pressed while the splash shows is not echoed; the app reads it and quits with 0."""
    command = " ".join(_entry())
    script = (f"env PYTHONPATH={REPO} TERM=xterm-256color {command}; echo EXIT=$?; "
              "stty -a | tr ' ' '\\n' | grep -x -- '-*icanon'; sleep 60")
    _tmux("respawn-pane", "-k", "-t", session, f"sh -c \"{script}\"")
    splash = _splash_shown(session)
    _tmux("send-keys", "-t", session, "z")  # no key of the app's: it must not be echoed
    _tmux("send-keys", "-t", session, "q")
    screen = _wait_for(session, lambda s: "EXIT=" in s and "icanon" in s, timeout_s=60)
    lines = screen.splitlines()
    assert "EXIT=0" in lines, screen
    assert "icanon" in lines and "-icanon" not in lines, screen
    assert "z" not in splash.split()


def test_ctrl_c_during_the_splash_exits_0_and_restores_the_terminal(session: str) -> None:
    command = " ".join(_entry())
    script = (f"env PYTHONPATH={REPO} TERM=xterm {command}; echo EXIT=$?; "
              "stty -a | tr ' ' '\\n' | grep -x -- '-*echo'; sleep 60")
    # Ctrl-C before the app is up is a SIGINT to the foreground group: bash, unlike dash,
    # carries on when its child exits normally.
    _tmux("respawn-pane", "-k", "-t", session, f"bash -c \"{script}\"")
    _splash_shown(session)
    _tmux("send-keys", "-t", session, "C-c")
    screen = _wait_for(session, lambda s: "EXIT=" in s and "echo" in s, timeout_s=30)
    lines = screen.splitlines()
    assert "EXIT=0" in lines, screen
    assert "echo" in lines and "-echo" not in lines, screen


def test_run_keeps_the_commands_output_off_the_screen(session: str, tmp_path: Path) -> None:
    """`gputop run`: the TUI attaches, CMD's output goes to the log, q exits with CMD's code."""
    python = tmux.PYTHON
    script = REPO / "tests" / "cli" / "probed_exit3.py"
    log = tmp_path / "run.log"
    _spawn(session, f"env PYTHONPATH={REPO} TERM=xterm {python} -m gputop run --membw off "
                    f"--log {log} -- {python} {script} 3")
    screen = _wait_for(session, lambda s: "attached" in s and "exited" in s and "steps" in s)
    assert "hello from the command" not in screen
    _tmux("send-keys", "-t", session, "q")
    assert _exit_code(session) == 3, _screen(session)
    assert "hello from the command" in log.read_text()
    joined = _tmux("capture-pane", "-p", "-J", "-S", "-100", "-t", session)
    assert f"exited with code 3; its output is in {log}" in joined.replace("\n", "")


def test_ctrl_c_at_any_moment_of_startup_exits_0(session: str) -> None:
    """Splash, handover, Textual start-up, running app: once anything is drawn, Ctrl-C
    quits with 0 (before that, Python is still importing and 130 is the convention)."""
    python = tmux.PYTHON
    for delay in (0.0, 0.15, 0.3, 0.5, 0.8):
        _spawn(session, f"env PYTHONPATH={REPO} TERM=xterm {python} -m gputop --membw off")
        _wait_for(session, lambda s: "gputop" in s, timeout_s=60)
        time.sleep(delay)
        _tmux("send-keys", "-t", session, "C-c")
        assert _exit_code(session) == 0, f"Ctrl-C after {delay} s:\n{_screen(session)}"
        screen = _wait_for(session, lambda s: "icanon" in s)
        assert "-icanon" not in screen, f"terminal left raw after {delay} s"
