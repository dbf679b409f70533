"""--keep and --max-size: the oldest ticks go, with their steps and rows in every table; the
advice shown at the cut stays visible; the file stops growing."""

from __future__ import annotations

import os
import sqlite3
import threading
from dataclasses import replace
from pathlib import Path

from gputop.core.model import Advice, AttachState, StepRecord, TrainerConfig
from gputop.recording.replay import Replay
from gputop.recording.schema import PER_FRAME_TABLES, STEP_TABLES
from gputop.recording.writer import RecordWriter, open_record
from gputop.recording.writer_thread import TRIM_EVERY, Recorder, Retention, drop_before, trim
from tests.helpers.builders import frame, gpu, process, trainer_with_workers

MS = 1_000_000
SWAP = Advice("swap", "warn", "Host is swapping", "2 GiB swapped", "add memory")


CONFIG = TrainerConfig(num_workers=3, batch_size=32)


def _attach(first: int, last: int) -> AttachState:
    steps = tuple(StepRecord(step=n, duration_ns=10 * MS, data_ns=5 * MS) for n in
                  range(first, last + 1))
    return AttachState(pid=100, config=CONFIG, dropped_records=0, steps=steps)


def _count(db: sqlite3.Connection, table: str, where: str = "") -> int:
    return int(db.execute(f"SELECT count(*) FROM {table} {where}").fetchone()[0])


def test_keep_drops_the_ticks_older_than_the_duration_with_their_steps(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    writer = RecordWriter(open_record(str(path)))
    rows, group = trainer_with_workers(100, workers=2, worker_cpu=10.0)
    base = frame(gpus=(gpu(0),), processes=rows, trainers=(group,))
    for tick in range(100):  # 10 steps a tick; the swap advice from tick 5 on
        writer.write(replace(base, time=base.time + tick, attached=(_attach(0, 10 * tick + 9),),
                             advice=(SWAP,) if tick >= 5 else ()))
    db = writer.db
    assert trim(db, Retention(keep_s=30)) == 69  # ticks 69..99: at most 30 s before the newest
    assert db.execute("SELECT min(id), count(*) FROM frames").fetchone() == (70, 31)
    for table in PER_FRAME_TABLES + STEP_TABLES:
        assert _count(db, table, "WHERE frame < 70") == 0, table
    assert _count(db, "gpus") == 31
    assert _count(db, "gpus", "WHERE info_id IS NULL") == 0  # its name, carried to the cut
    assert db.execute("SELECT min(step), max(step), count(*) FROM steps").fetchone() == (
        690, 999, 310)
    assert db.execute("SELECT frame, shown, title FROM advice").fetchall() == [
        (70, 1, "Host is swapping")]  # still shown at the first tick kept
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    cut = Replay(str(path)).frame(0)  # settings and groups stored once, carried to the cut
    assert cut.attached[0].config == CONFIG and cut.trainers[0].worker_pids == (101, 102)


def test_max_size_keeps_the_file_from_growing(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    limit = 1 << 19
    recorder = Recorder(str(path), Retention(max_bytes=limit))
    rows = [replace(process(1000 + i), cpu_percent=1.0 + i) for i in range(12)]
    base = frame(gpus=tuple(gpu(i) for i in range(8)), processes=rows)
    ticks = 60 * TRIM_EVERY  # some 1.5 MiB of ticks untrimmed
    written = threading.Event()
    for tick in range(ticks):
        while recorder._queue.full():  # a test may wait for the disk; the sampler never does
            written.wait(0.001)
        assert recorder.submit(replace(base, time=base.time + tick)) is None
    recorder.close()
    assert recorder.writer.frames_written == ticks
    with sqlite3.connect(path) as db:
        first, last = db.execute("SELECT min(id), max(id) FROM frames").fetchone()
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert last == ticks and first > ticks // 3
    assert os.path.getsize(path) < 1.1 * limit  # over the limit by at most TRIM_EVERY ticks


def test_a_file_within_its_limits_is_left_alone(tmp_path: Path) -> None:
    writer = RecordWriter(open_record(str(tmp_path / "run.sqlite")))
    base = frame()
    for tick in range(10):
        writer.write(replace(base, time=base.time + tick))
    assert trim(writer.db, Retention(max_bytes=1 << 30, keep_s=3600)) == 0
    assert trim(writer.db, Retention()) == 0
    assert _count(writer.db, "frames") == 10


def test_a_cut_between_two_gpu_details_carries_the_one_in_effect(tmp_path: Path) -> None:
    """The GPU numbers no pane draws are stored every tenth tick: cutting at tick 15 keeps
    tick 10's for ticks 15 to 19, as the tick's own GPU info is kept."""
    path = tmp_path / "run.sqlite"
    writer = RecordWriter(open_record(str(path)))
    base = frame(gpus=(gpu(0),))
    for tick in range(1, 26):
        devices = (replace(gpu(0), sm_clock_mhz=1000 + tick),)
        writer.write(replace(base, time=base.time + tick, gpu=replace(base.gpu, gpus=devices)))
    drop_before(writer.db, 15)
    assert writer.db.execute("SELECT frame, sm_clock_mhz FROM gpus WHERE frame < 21").fetchall(
        ) == [(15, 1010), (16, 1010), (17, 1010), (18, 1010), (19, 1010), (20, 1020)]
