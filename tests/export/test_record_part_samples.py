"""A recording keeps each step's host and data samples (every function's), so a replay names
the top function with the share the live view gave it, not the share over the top functions'
samples alone."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from gputop.analysis.steps import summarize
from gputop.core.model import AttachState, StepRecord, TrainerConfig
from gputop.recording.replay import Replay
from gputop.recording.writer import RecordWriter, open_record
from tests.helpers.builders import frame

MS = 1_000_000
GET_BATCH = "get_batch (train.py:116)"


def _steps(count: int) -> tuple[StepRecord, ...]:
    """Host 60 % of each step: get_batch 4 of its 6 host samples; data 2 of 3."""
    return tuple(StepRecord(
        step=n, duration_ns=10 * MS, data_ns=MS, forward_ns=2 * MS, backward_ns=MS,
        host_ns=6 * MS, end_ns=10**12 + 10 * MS * n, input_outside_model=True, samples=9,
        host_site=GET_BATCH, host_site_samples=4, data_site="read (data.py:3)",
        data_site_samples=2, host_samples=6, data_samples=3) for n in range(count))


def test_a_replay_gives_the_top_function_the_share_the_live_view_did(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    writer = RecordWriter(open_record(str(path)))
    steps = _steps(40)
    base = frame()
    writer.write(replace(base, attached=(AttachState(
        pid=100, config=TrainerConfig(), dropped_records=0, steps=steps),)))
    writer.db.close()
    replayed = Replay(str(path)).frame(0).attached[0].steps
    assert replayed == steps
    live, again = summarize(steps), summarize(replayed)
    assert live.host_site == again.host_site == GET_BATCH
    assert live.host_site_percent == again.host_site_percent == pytest.approx(40.0)
    assert again.data_site_percent == pytest.approx(10.0 * 2 / 3)
    with sqlite3.connect(path) as db:
        assert set(db.execute("SELECT host_samples, data_samples FROM steps")) == {(6, 3)}
