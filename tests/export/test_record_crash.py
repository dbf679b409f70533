"""`kill -9` of a real `gputop record` at random moments: the file opens, passes SQLite's
integrity check and holds every tick committed before the kill, each tick whole."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.probe import ROOT

pytestmark = pytest.mark.slow
KILLS = 20
GPUS = 2


def _ticks(path: Path) -> int:
    try:
        with sqlite3.connect(path, timeout=5) as db:
            return int(db.execute("SELECT count(*) FROM frames").fetchone()[0])
    except sqlite3.OperationalError:  # the schema is not committed yet
        return 0


def _start(path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "gputop", "record", str(path), "--interval", "0.1", "--membw",
         "off", "--demo", "idle", "--gpus", str(GPUS)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "GPUTOP_DEBUG": ""})


def test_kill_9_at_any_moment_keeps_every_committed_tick(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    rng = random.Random(16)
    committed = 0
    for kill in range(KILLS):
        recorder = _start(path)
        try:
            wanted = committed + rng.randint(1, 4)
            for _ in range(1200):
                if _ticks(path) >= wanted:
                    break
                assert recorder.poll() is None, f"recorder exited with {recorder.returncode}"
                time.sleep(0.02)
            time.sleep(rng.uniform(0, 0.12))  # anywhere in a tick, mid-transaction included
            committed = _ticks(path)
            os.kill(recorder.pid, signal.SIGKILL)
        finally:
            if recorder.poll() is None:
                os.kill(recorder.pid, signal.SIGKILL)
            recorder.wait(timeout=30)
        with sqlite3.connect(path) as db:
            assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",), kill
            frames = db.execute("SELECT count(*) FROM frames").fetchone()[0]
            assert frames >= committed >= kill + 1, kill
            assert db.execute("SELECT count(*) FROM gpus").fetchone()[0] == GPUS * frames
            assert db.execute("SELECT count(*) FROM frames WHERE host_id IS NULL").fetchone() == (
                0,)
        committed = frames
    with sqlite3.connect(path) as db:
        ids = [row[0] for row in db.execute("SELECT id FROM frames ORDER BY id")]
    assert ids == list(range(1, len(ids) + 1))  # each run appended after the last
