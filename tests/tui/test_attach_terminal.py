"""`gputop --attach PID` in a real terminal (tmux): when the live view ends, the attached
trainer's last summary and advice are printed, as `gputop run` prints them, so the verdict
outlives the screen it was on; attaching to another trainer after the first exited shows
only the new one."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import tmux
from tests.helpers.probe import trainer_env

REPO = Path(__file__).resolve().parents[2]
TRAINER = REPO / "tests" / "cli" / "interruptible.py"
START_TIMEOUT_S = 60.0
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


@contextlib.contextmanager
def probed(tmp_path: Path, name: str = "a") -> Iterator[subprocess.Popen[bytes]]:
    """The data-bound test trainer under the probe, its ring in tmp_path/rings, until it
    has written its ring and first line; killed afterwards if it still runs. `name` is in
    its command line (its save file: tmp_path/saved-NAME)."""
    ring_dir, log = tmp_path / "rings", tmp_path / f"trainer-{name}.log"
    ring_dir.mkdir(exist_ok=True)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gputop.probe", str(TRAINER), str(tmp_path / f"saved-{name}"),
             "0", "3"], env=trainer_env(ring_dir), cwd=REPO, stdout=out, stderr=out,
            start_new_session=True)
    ring = ring_dir / f"gputop-{os.getuid()}-{proc.pid}.ring"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (ring.exists() and log.read_text().startswith("pid ")):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _live(session: str, tmp_path: Path, pid: int) -> None:
    """`gputop --attach PID` in the pane, reading the rings in tmp_path/rings."""
    tmux.spawn(session, f"env PYTHONPATH={REPO} GPUTOP_RING_DIR={tmp_path / 'rings'} "
                        f"TERM=xterm {sys.executable} -m gputop --membw off --interval 0.5 "
                        f"--attach {pid}")


def test_quitting_after_the_attached_trainer_exited_prints_its_final_summary(
        session: str, tmp_path: Path) -> None:
    with probed(tmp_path) as trainer:
        _live(session, tmp_path, trainer.pid)
        tmux.wait_for(session, lambda s: f"attached {trainer.pid}" in s and "steps" in s)
        trainer.send_signal(signal.SIGINT)  # it saves and exits: the user comes back later
        assert trainer.wait(timeout=30) == 3
        # Advice comes only where it predicts a gain: on a busy box a CPU trainer may get none.
        screen = tmux.wait_for(session, lambda s: "exited, final summary" in s)
        tmux.tmux("send-keys", "-t", session, "q")
        assert tmux.exit_code(session) == 0, tmux.screen(session)
    printed = tmux.tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", session)
    assert f"ATTACHED {trainer.pid} (exited, final summary)" in printed
    assert "verdict data-bound" in printed
    assert ("ADVICE" in printed) is ("final advice" in screen)


def test_attaching_to_b_after_a_exited_shows_only_b(session: str, tmp_path: Path) -> None:
    with probed(tmp_path, "a") as a, probed(tmp_path, "b") as b:
        _live(session, tmp_path, a.pid)
        tmux.wait_for(session, lambda s: f"attached {a.pid}" in s and "steps" in s)
        a.send_signal(signal.SIGINT)
        assert a.wait(timeout=30) == 3
        tmux.wait_for(session, lambda s: "exited, final summary" in s)
        for keys in ("/", "saved-b", "Enter"):  # the filter keeps B's row alone
            tmux.tmux("send-keys", "-t", session, *(("-l", keys) if keys != "Enter" else (keys,)))
        tmux.wait_for(session, lambda s: "filter: saved-b" in s and _rows(s) == [b.pid])
        tmux.tmux("send-keys", "-t", session, "Enter")  # attach to the row under the cursor
        screen = tmux.wait_for(session, lambda s: f"attached {b.pid}" in s and "steps" in s)
        assert str(a.pid) not in screen and "exited" not in screen, screen
        tmux.tmux("send-keys", "-t", session, "q")
        assert tmux.exit_code(session) == 0, tmux.screen(session)


def _rows(screen: str) -> list[int]:
    """The PIDs of the process rows on screen."""
    return [int(line.split()[0]) for line in screen.splitlines()
            if line.split()[:1] and line.split()[0].isdigit() and "  " in line]
