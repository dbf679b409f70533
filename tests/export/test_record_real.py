"""`gputop record` beside a real torch trainer under the probe: the file holds every step
the trainer took, read back with plain sqlite3."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.probe import ROOT, trainer_env

pytestmark = pytest.mark.slow
COUNTED = ROOT / "tests" / "export" / "trainers" / "counted.py"


def _one(path: Path, sql: str) -> tuple:
    try:
        with sqlite3.connect(path) as db:
            return tuple(db.execute(sql).fetchone() or ())
    except sqlite3.OperationalError:  # not created yet
        return ()


def _wait_for(check: object, what: str, limit: int = 1200) -> None:
    for _ in range(limit):
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_file_holds_every_step_the_trainer_took(tmp_path: Path) -> None:
    rings = tmp_path / "rings"
    rings.mkdir()
    path = tmp_path / "run.sqlite"
    env = trainer_env(rings)
    recorder = subprocess.Popen(
        [sys.executable, "-m", "gputop", "record", str(path), "--interval", "0.1", "--membw",
         "off"], env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    trainer = None
    try:
        _wait_for(lambda: _one(path, "SELECT count(*) FROM frames") >= (2,), "the recording")
        trainer = subprocess.Popen(
            [sys.executable, "-m", "gputop.probe", str(COUNTED), str(tmp_path / "stop"),
             str(tmp_path / "count")], env=env, cwd=ROOT)
        _wait_for(lambda: _one(path, "SELECT count(*) FROM steps") >= (300,), "steps recorded")
        (tmp_path / "stop").touch()
        assert trainer.wait(timeout=60) == 0
        _wait_for(lambda: _one(path, "SELECT count(*) FROM trainer_ticks WHERE state = "
                                     "'exited'") >= (2,), "the trainer's exit")
        recorder.send_signal(signal.SIGTERM)
        assert recorder.wait(timeout=30) == 0, recorder.stderr
    finally:
        for proc in (trainer, recorder):
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
    took = int((tmp_path / "count").read_text())
    assert _one(path, "SELECT count(*), min(step), max(step) FROM steps") == (took, 0, took - 1)
    assert _one(path, "SELECT count(*) FROM gaps") == (0,)
    assert _one(path, "SELECT count(DISTINCT trainer) FROM steps") == (1,)
    measured = _one(path, "SELECT count(*) FROM steps WHERE data_ns IS NOT NULL")[0]
    assert measured >= took - 2  # the phases as the probe saw them (the first may lack one)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
