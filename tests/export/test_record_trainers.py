"""The trainers in a recording: each tick's new steps of a trainer packed in a row, the attached
trainers, groups and GPU processes of a tick a row each, what rarely changes stored when it
changes. Read back as they were recorded, to the ns, by the replay and by the views."""

from __future__ import annotations

import random
import sqlite3
from dataclasses import replace
from itertools import islice
from pathlib import Path

from gputop.core.model import AttachState, StepRecord, TrainerConfig
from gputop.recording.reader import Recording
from gputop.recording.replay import Replay
from gputop.recording.rows import AttachedRow, GpuProcessRow, GroupRow, StepRow
from gputop.recording.trainers import RUN_STEPS, STEP_WIDE
from gputop.recording.writer import RecordWriter, open_record
from tests.helpers.builders import frame
from tests.helpers.ddp_job import RANKS, ddp_ticks

MS = 1_000_000
LONG_NS = 5_000 * MS  # more than a record's 4.3 s


def _step(rng: random.Random, n: int, end_ns: int | None) -> StepRecord:
    """Step `n` with ns that are not round, some phases unmeasured."""
    return StepRecord(
        step=n, duration_ns=rng.randrange(1, 300 * MS), data_ns=rng.choice(
            [None, rng.randrange(0, 50 * MS)]), h2d_ns=rng.randrange(0, MS),
        forward_ns=rng.randrange(0, 90 * MS), backward_ns=rng.choice([None, 7]),
        optimizer_ns=rng.randrange(0, 9 * MS), gpu_ns=rng.choice([None, rng.randrange(MS)]),
        gpu_gap_ns=rng.choice([None, 0, 123]), batch_size=rng.choice([64, 64, 64, 17]),
        epoch=n // 40, warmup=n % 40 < 2, implicit=n % 3 == 0,
        input_outside_model=n % 5 == 0,
        verdict=rng.choice(["data-bound", "compute-bound", "host-bound", "cpu-starved",
                            "unknown"]),
        end_ns=end_ns, host_ns=rng.choice([None, rng.randrange(0, 90 * MS)]),
        sync_ns=rng.choice([None, 0, rng.randrange(MS)]), at_backward=n % 7 == 0,
        samples=rng.randrange(0, 40), host_site=rng.choice([None, "get_batch (train.py:116)"]),
        host_site_samples=rng.randrange(0, 20), data_site=rng.choice([None, "collate (x.py:3)"]),
        data_site_samples=rng.randrange(0, 20), host_samples=rng.randrange(0, 40),
        data_samples=rng.randrange(0, 40))


def _windows() -> list[tuple[StepRecord, ...]]:
    """Ring windows of a trainer over 8 ticks: ns that are not round, unmeasured phases and
    ends, epochs and batch sizes changing within a tick, a step longer than a record holds,
    a hole in the numbering, more steps in a tick than a row holds, steps seconds apart."""
    rng = random.Random(4)
    closed: list[StepRecord] = []
    end = 10**15 + 7
    counts = (3, 5, 0, 2 * RUN_STEPS + 5, 4, 9, 1, 6)
    numbers = iter([*range(0, 50), *range(60, 400)])
    out = []
    for tick, count in enumerate(counts):
        for _ in range(count):
            n = next(numbers)
            end += rng.randrange(1, 2 * MS) + (4_400 * MS if n % 17 == 0 else 0)
            step = _step(rng, n, None if tick == 1 else end)
            if n == 12:
                step = replace(step, duration_ns=LONG_NS, optimizer_ns=LONG_NS - MS)
            closed.append(step)
        out.append(tuple(closed[-256:]))
    return out


def test_every_step_reads_back_as_it_was_recorded(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    writer = RecordWriter(open_record(str(path)))
    base = frame()
    windows = _windows()
    for tick, window in enumerate(windows):
        writer.write(replace(base, time=base.time + tick, attached=(AttachState(
            pid=100, config=TrainerConfig(), dropped_records=0, steps=window),)))
    writer.db.close()
    replay = Replay(str(path))
    for tick, window in enumerate(windows):
        assert replay.frame(tick).attached[0].steps == window
    every = windows[-1]
    with sqlite3.connect(path) as db:
        rows = db.execute(f"SELECT {', '.join(StepRow._fields)} FROM steps WHERE trainer = 1 "
                          "ORDER BY step").fetchall()
        assert rows == replay.recording.steps(1)
        assert db.execute("SELECT count(*) FROM step_ticks WHERE length(steps) = ?",
                          (STEP_WIDE.size,)).fetchone() == (1,)
    assert [row[0] for row in rows] == [s.step for s in every]
    assert [row[2:11] for row in rows] == [
        (s.end_ns, s.duration_ns, s.data_ns, s.h2d_ns, s.forward_ns, s.backward_ns,
         s.optimizer_ns, s.gpu_ns, s.gpu_gap_ns) for s in every]


def test_a_tick_of_8_ranks_is_a_row_for_their_states_and_one_for_their_groups(
        tmp_path: Path) -> None:
    """A rank's settings, dropped records and error, a group's workers and launcher are
    stored when they change: once for the 8 ranks' 20 ticks, and again for the one whose
    settings changed."""
    path = tmp_path / "run.sqlite"
    writer = RecordWriter(open_record(str(path)))
    frames = list(islice(ddp_ticks(), 20))
    frames[-1] = replace(frames[-1], attached=(
        replace(frames[-1].attached[0], config=TrainerConfig(num_workers=8)),
        *frames[-1].attached[1:]))
    for f in frames:
        writer.write(f)
    writer.db.close()
    replay = Replay(str(path))
    for index in (0, 10, 19):
        replayed, recorded = replay.frame(index), frames[index]
        assert [replace(g, workers_cpu_percent=0.0) for g in replayed.trainers] == [
            replace(g, workers_cpu_percent=0.0) for g in recorded.trainers]
        assert all(abs(a.workers_cpu_percent - b.workers_cpu_percent) <= 0.1
                   for a, b in zip(replayed.trainers, recorded.trainers, strict=True))
        assert [(a.pid, a.config, a.steps, a.state, a.alive) for a in replayed.attached] == [
            (a.pid, a.config, a.steps, a.state, a.alive) for a in recorded.attached]
    with sqlite3.connect(path) as db:
        counts = [db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                  for table in ("attach_ticks", "trainer_changes", "group_ticks",
                                "group_changes", "gpu_process_ticks")]
        assert counts == [20, RANKS + 1, 20, RANKS, 20]


def test_the_views_give_the_rows_the_readers_read(tmp_path: Path) -> None:
    """`trainer_ticks`, `trainer_groups` and `gpu_processes` decode in SQL what the reader
    decodes in Python, column for column."""
    path = tmp_path / "run.sqlite"
    writer = RecordWriter(open_record(str(path)))
    for f in islice(ddp_ticks(), 5):
        writer.write(f)
    writer.db.close()
    with sqlite3.connect(path) as db, Recording(str(path)) as recording:
        for fid in range(1, 6):
            assert db.execute(f"SELECT {', '.join(AttachedRow._fields)} FROM trainer_ticks "
                              "WHERE frame = ? ORDER BY position", (fid,)).fetchall() == (
                recording.attached(fid))
            assert db.execute(f"SELECT {', '.join(GroupRow._fields)} FROM trainer_groups WHERE "
                              "frame = ?", (fid,)).fetchall() == recording.groups(fid)
            assert db.execute(f"SELECT {', '.join(GpuProcessRow._fields)} FROM gpu_processes "
                              "WHERE frame = ? ORDER BY gpu, position",
                              (fid,)).fetchall() == recording.gpu_processes(fid)
        assert len(recording.attached(5)) == RANKS
