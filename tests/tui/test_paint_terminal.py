"""In a real terminal (tmux), the rows a frame writes alone leave the screen as Textual's
own full repaint draws it: position, text and every style, cell for cell."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import tmux

REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


@pytest.fixture
def session() -> Iterator[str]:
    with tmux.session(REPO, 160, 50) as name:
        yield name


def _settled(name: str) -> str:
    """The styled screen once two captures 0.5 s apart agree."""
    before = tmux.screen(name, styled=True)
    for _ in range(60):
        time.sleep(0.5)
        now = tmux.screen(name, styled=True)
        if now == before:
            return now
        before = now
    raise AssertionError(f"the screen never settled:\n{tmux.screen(name)}")


def test_rows_written_alone_match_textuals_full_repaint(session: str) -> None:
    """Five frames a second of 8 GPUs and an attached trainer's steps, then a pause: the
    help page opened and closed makes Textual draw the whole screen again, from the panes."""
    command = (f"env TERM=xterm-256color PYTHONPATH={REPO} {tmux.PYTHON} -m gputop "
               "--demo mixed --gpus 8 --interval 0.2")
    tmux.spawn(session, command)
    tmux.wait_for(session, lambda s: "attached" in s and "data-bound" in s)
    time.sleep(3)  # ~15 frames written row by row
    tmux.tmux("send-keys", "-t", session, "p")
    tmux.wait_for(session, lambda s: "PAUSED" in s)
    by_rows = _settled(session)
    tmux.tmux("send-keys", "-t", session, "?")
    tmux.wait_for(session, lambda s: "PAUSED" not in s)
    tmux.tmux("send-keys", "-t", session, "Escape")
    tmux.wait_for(session, lambda s: "PAUSED" in s)
    repainted = _settled(session)
    assert "SIMULATED GPUs" in by_rows and by_rows.count("\x1b[") > 100
    assert by_rows == repainted, "the rows written alone differ from Textual's own drawing"
