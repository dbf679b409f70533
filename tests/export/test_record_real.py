"""`gputop record` beside a real torch trainer under the probe: the file holds every step
the trainer took, read back with plain sqlite3."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.helpers.recording import one, record_counted_trainer

pytestmark = pytest.mark.slow


def test_the_file_holds_every_step_the_trainer_took(tmp_path: Path) -> None:
    path, _, took = record_counted_trainer(tmp_path)
    assert one(path, "SELECT count(*), min(step), max(step) FROM steps") == (took, 0, took - 1)
    assert one(path, "SELECT count(*) FROM gaps") == (0,)
    assert one(path, "SELECT count(DISTINCT trainer) FROM steps") == (1,)
    measured = one(path, "SELECT count(*) FROM steps WHERE data_ns IS NOT NULL")[0]
    assert measured >= took - 2  # the phases as the probe saw them (the first may lack one)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
