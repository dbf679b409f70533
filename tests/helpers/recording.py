"""Records a real torch trainer under the probe with the real `gputop record`, for the
recorder's and the replay's end-to-end tests."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from tests.helpers.probe import ROOT, trainer_env

COUNTED = ROOT / "tests" / "export" / "trainers" / "counted.py"


class RecordedTrainer(NamedTuple):
    """The recording, the trainer's PID and how many optimizer steps it says it took."""

    path: Path
    pid: int
    steps: int


def one(path: Path, sql: str) -> tuple:
    """The first row of `sql` on the recording (() while the file or table is not there)."""
    try:
        with sqlite3.connect(path) as db:
            return tuple(db.execute(sql).fetchone() or ())
    except sqlite3.OperationalError:
        return ()


def wait_for(check: Callable[[], bool], what: str, limit: int = 1200) -> None:
    """Poll `check` a bounded number of times."""
    for _ in range(limit):
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def record_counted_trainer(tmp_path: Path, min_steps: int = 300, interval_s: float = 0.1,
                           run_s: float | None = None, pause_s: float = 0.002
                           ) -> RecordedTrainer:
    """Start `gputop record` every `interval_s`, then the trainer (pausing `pause_s` a step);
    stop the trainer after `min_steps` steps are in the file, or let it stop itself after
    `run_s` seconds; let the recorder see it exit, stop the recorder with SIGTERM."""
    rings = tmp_path / "rings"
    rings.mkdir()
    path = tmp_path / "run.sqlite"
    env = trainer_env(rings)
    recorder = subprocess.Popen(
        [sys.executable, "-m", "gputop", "record", str(path), "--interval", str(interval_s),
         "--membw", "off"], env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    trainer = None
    try:
        wait_for(lambda: one(path, "SELECT count(*) FROM frames") >= (2,), "the recording")
        trainer = subprocess.Popen(
            [sys.executable, "-m", "gputop.probe", str(COUNTED), str(tmp_path / "stop"),
             str(tmp_path / "count"), str(run_s or 60), str(pause_s)], env=env, cwd=ROOT)
        if run_s is None:
            wait_for(lambda: one(path, "SELECT count(*) FROM steps") >= (min_steps,),
                     "steps recorded")
            (tmp_path / "stop").touch()
        assert trainer.wait(timeout=(run_s or 0) + 120) == 0
        wait_for(lambda: one(path, "SELECT count(*) FROM trainer_ticks WHERE state = "
                                   "'exited'") >= (2,), "the trainer's exit",
                 limit=round(1200 * max(1.0, interval_s / 0.1)))
        recorder.send_signal(signal.SIGTERM)
        assert recorder.wait(timeout=30) == 0, recorder.stderr
    finally:
        for proc in (trainer, recorder):
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
    assert trainer is not None
    return RecordedTrainer(path, trainer.pid, int((tmp_path / "count").read_text()))
