"""Every trainer state, evaluating and saving among them, reads back from a recording as it
was recorded, alive or not, by the replay and by the `trainer_ticks` view."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from itertools import product
from pathlib import Path
from typing import get_args

from gputop.core.model import AttachState, TrainerConfig, TrainerState
from gputop.recording.replay import Replay
from gputop.recording.writer import RecordWriter, open_record
from tests.helpers.builders import frame


def test_every_trainer_state_reads_back_as_recorded(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    writer = RecordWriter(open_record(str(path)))
    base = frame()
    ticks = list(product(get_args(TrainerState), (True, False)))
    for tick, (state, alive) in enumerate(ticks):
        writer.write(replace(base, time=base.time + tick, attached=(AttachState(
            pid=100, config=TrainerConfig(), dropped_records=0, steps=(), state=state,
            alive=alive),)))
    writer.db.close()
    replay = Replay(str(path))
    assert [(replay.frame(tick).attached[0].state, replay.frame(tick).attached[0].alive)
            for tick in range(len(ticks))] == ticks
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT state, alive FROM trainer_ticks ORDER BY frame").fetchall()
    assert rows == [(state, int(alive)) for state, alive in ticks]
