"""End to end: a real torch trainer recorded by the real `gputop record`, replayed in the
app: the step pane shows the steps it took."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputop.app.replay import open_playback
from gputop.recording.replay import Replay
from gputop.tui import build_app
from gputop.tui.widgets.linepane import LinePane
from tests.helpers.recording import one, record_counted_trainer
from tests.helpers.tui import sync

pytestmark = pytest.mark.slow


@sync
async def test_the_step_pane_replays_the_trainers_steps(tmp_path: Path) -> None:
    path, pid, took = record_counted_trainer(tmp_path)
    running = one(path, "SELECT max(frame), count(*) FROM trainer_ticks WHERE state = 'running'")
    last_running, ticks = running
    first_step, last_step = one(path, f"SELECT first_step, last_step FROM trainer_ticks "
                                      f"WHERE frame = {last_running}")
    playback = open_playback(str(path))
    playback.set_paused(True)
    recording = playback.recording
    assert isinstance(recording, Replay)  # open_playback's: it knows the recorded frame ids
    app = build_app(playback)
    async with app.run_test(size=(140, 50)) as pilot:
        index = list(recording.ids).index(last_running)
        await pilot.press("g", *["right"] * index)
        for _ in range(300):
            if app.frame is not None and app.frame.attached and app.frame.attached[0].steps and (
                    app.frame.attached[0].steps[-1].step == last_step):
                break
            await pilot.pause(0.01)
        await pilot.pause()
        steps = app.query_one("#steps", LinePane).text
        assert f"attached {pid}" in steps
        assert f"#{last_step} " in steps and f"#{last_step - 1} " in steps
        assert app.frame is not None
        window = app.frame.attached[0]
        assert len(window.steps) == last_step - first_step + 1  # the window of that tick
        assert window.summary.steps > 0 and f"last {window.summary.steps} steps" in steps
        assert 0 < last_step < took and ticks >= 2
