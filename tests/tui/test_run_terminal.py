"""`gputop run` in a real terminal (tmux): q asks, d and a hang-up leave the job running,
Ctrl-C reaches the job, and the final summary with its advice is printed at exit."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import tmux
from tests.helpers.processes import children, gone

REPO = Path(__file__).resolve().parents[2]
PYTHON = tmux.PYTHON
TRAINER = REPO / "tests" / "cli" / "interruptible.py"
WORKERS_ADVICE = "Batches are loaded in the training process itself (num_workers=0)"
QUESTION = "training is still running: Q stop it, d detach and leave it running, Esc cancel"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


@pytest.fixture
def trainers() -> Iterator[list[int]]:
    """PIDs of trainers a test left running on purpose: killed at the end."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _run(name: str, log: Path, mark: Path, steps: int = 0, code: int = 7,
         interval: str = "0.5") -> None:
    tmux.spawn(name, f"env PYTHONPATH={REPO} TERM=xterm {PYTHON} -m gputop run --membw off "
                 f"--interval {interval} --log {log} -- {PYTHON} {TRAINER} {mark} {steps} {code}")


def _trainer(log: Path, timeout_s: float = 60.0) -> tuple[int, int]:
    """The trainer's PID and session, from the first line it writes to its log."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(r"pid (\d+) sid (\d+)", log.read_text() if log.exists() else "")
        if found:
            return int(found[1]), int(found[2])
        time.sleep(0.1)
    raise AssertionError(f"the trainer never started; log: {log.read_text()!r}")


def _attached(name: str, log: Path, mark: Path, **run: Any) -> tuple[int, int]:
    """`gputop run` of the test trainer in the pane, once its steps are on screen: the
    trainer's PID and session."""
    _run(name, log, mark, **run)
    pid, sid = _trainer(log)
    tmux.wait_for(name, lambda s: f"attached {pid}" in s and "steps" in s)
    return pid, sid


def _steps_logged(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines() if line.startswith("step "))


def _keeps_logging(log: Path, timeout_s: float = 60.0) -> bool:
    """Whether the trainer writes more step lines to its log than it had written so far."""
    before = _steps_logged(log)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _steps_logged(log) > before:
            return True
        time.sleep(0.1)
    return False


def _printed(name: str) -> str:
    """Everything the pane shows and scrolled by, wrapped lines joined."""
    return tmux.tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", name)


def test_q_asks_and_d_leaves_the_trainer_running(session: str, tmp_path: Path,
                                                 trainers: list[int]) -> None:
    log, mark = tmp_path / "run.log", tmp_path / "saved"
    pid, sid = _attached(session, log, mark)
    trainers.append(pid)
    tmux.tmux("send-keys", "-t", session, "q")
    tmux.wait_for(session, lambda s: QUESTION in s)
    tmux.tmux("send-keys", "-t", session, "Escape")  # cancel: the app carries on
    tmux.wait_for(session, lambda s: QUESTION not in s and f"attached {pid}" in s)
    tmux.tmux("send-keys", "-t", session, "q")
    tmux.wait_for(session, lambda s: QUESTION in s)
    tmux.tmux("send-keys", "-t", session, "d")
    assert tmux.exit_code(session) == 0, tmux.screen(session)
    printed = _printed(session)
    assert f"left {PYTHON} (PID {pid}) running; its output goes to {log}" in printed
    assert f"ATTACHED {pid}" in printed and "verdict" in printed
    assert sid == pid  # a session of its own: the terminal's hang-up is not its concern
    assert _keeps_logging(log), "the trainer stopped writing steps after gputop left"
    assert not gone(pid, timeout_s=0.5) and not mark.exists()


def test_ctrl_c_reaches_the_trainer_and_gputop_exits_with_its_code(
        session: str, tmp_path: Path) -> None:
    log, mark = tmp_path / "run.log", tmp_path / "saved"
    pid, _ = _attached(session, log, mark, code=7)
    tmux.tmux("send-keys", "-t", session, "C-c")
    assert tmux.exit_code(session, timeout_s=60) == 7, tmux.screen(session)
    assert mark.read_text().startswith("KeyboardInterrupt after ")  # its handler ran
    printed = _printed(session)
    assert f"exited with code 7; its output is in {log}" in printed
    assert f"ATTACHED {pid} (exited, final summary)" in printed


def test_after_the_trainer_exits_the_summary_stays_and_is_printed_on_exit(
        session: str, tmp_path: Path) -> None:
    log, mark = tmp_path / "run.log", tmp_path / "saved"
    _run(session, log, mark, steps=400)
    pid, _ = _trainer(log)
    tmux.wait_for(session, lambda s: "exited, final summary" in s)
    screen = tmux.screen(session)  # the summary and its advice are frozen once it exited
    assert f"attached {pid}" in screen
    tmux.tmux("send-keys", "-t", session, "q")  # nothing runs any more: no question
    assert tmux.exit_code(session) == 0, tmux.screen(session)
    printed = _printed(session)
    assert f"exited with code 0; its output is in {log}" in printed
    assert f"ATTACHED {pid} (exited, final summary)" in printed
    assert "verdict data-bound" in printed
    assert QUESTION not in printed
    # The advice predicts a gain from the CPU the job can get: on a busy box the trainer
    # waits for a core and may rightly get none. What it had at exit is what is printed.
    advised = "final advice" in screen
    assert (WORKERS_ADVICE in printed) is advised, screen
    assert ("num_workers=0" in screen) is advised


def test_a_hang_up_leaves_the_trainer_running(session: str, tmp_path: Path,
                                              trainers: list[int]) -> None:
    """An SSH drop: the terminal goes, gputop goes, the training job stays."""
    log, mark = tmp_path / "run.log", tmp_path / "saved"
    pid, _ = _attached(session, log, mark)
    trainers.append(pid)
    shell = int(tmux.tmux("display-message", "-p", "-t", session, "#{pane_pid}").strip())
    (gputop,) = children(shell)
    tmux.tmux("kill-pane", "-t", session)  # the terminal hangs up
    assert gone(gputop, timeout_s=30), "gputop outlived its terminal"
    assert _keeps_logging(log), "the hang-up ended the training job"
    assert not mark.exists()
