"""`gputop record` beside a real torch trainer under the probe, 60 s at 1 Hz: the file holds
every step the trainer took, read back with plain sqlite3."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.helpers.recording import one, record_counted_trainer

pytestmark = pytest.mark.slow


def test_a_minute_at_1_hz_holds_every_step_the_trainer_took(tmp_path: Path) -> None:
    """The trainer runs 60 s, pausing 10 ms a step (fewer steps a tick than the 256 the
    sampler reads from a ring), and says how many steps it took."""
    path, _, took = record_counted_trainer(tmp_path, interval_s=1.0, run_s=60, pause_s=0.01)
    assert took > 1000  # a minute of steps, not a handful
    ticks, first, last = one(path, "SELECT count(*), min(time), max(time) FROM frames")
    assert last - first >= 60 and ticks > 50  # a minute of ticks, about one a second
    assert one(path, "SELECT count(*), min(step), max(step) FROM steps") == (took, 0, took - 1)
    assert one(path, "SELECT count(*) FROM gaps") == (0,)
    assert one(path, "SELECT count(DISTINCT trainer) FROM steps") == (1,)
    measured = one(path, "SELECT count(*) FROM steps WHERE data_ns IS NOT NULL")[0]
    assert measured >= took - 2  # the phases as the probe saw them (the first may lack one)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
