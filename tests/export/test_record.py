"""The recorder's file, read back with plain sqlite3 as users would: rows, units, the
processes kept, every step once, gaps as gaps, advice transitions, refusing foreign files."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from gputop.export.record import (
    ADVICE_REFRESH_S,
    TOP_PROCESSES,
    RecordError,
    RecordWriter,
    open_record,
    processes_that_matter,
)
from gputop.model import Advice, AttachState, MemoryBandwidthSample, StepRecord, TrainerConfig
from gputop.recording import SCHEMA
from tests.helpers.builders import GIB, frame, gpu, process, trainer_with_workers

MS = 1_000_000


def _writer(tmp_path: Path) -> tuple[RecordWriter, Path]:
    path = tmp_path / "run.sqlite"
    return RecordWriter(open_record(str(path))), path


def _query(path: Path, sql: str, *args: object) -> list[tuple]:
    with sqlite3.connect(path) as db:
        return db.execute(sql, args).fetchall()


def _steps(numbers: range | list[int]) -> tuple[StepRecord, ...]:
    return tuple(StepRecord(step=n, duration_ns=10 * MS, data_ns=6 * MS, forward_ns=4 * MS,
                            end_ns=n * 10 * MS) for n in numbers)


def _attach(numbers: range | list[int], dropped: int = 0, pid: int = 100) -> AttachState:
    return AttachState(pid=pid, config=TrainerConfig(num_workers=2), dropped_records=dropped,
                       steps=_steps(numbers))


def test_a_frame_is_rows_with_the_units_its_columns_name(tmp_path: Path) -> None:
    rows, group = trainer_with_workers(100, workers=2, worker_cpu=45.5)
    membw = MemoryBandwidthSample(source="estimate", confidence="low", pressure=0.4213,
                                  psi_some_avg10=1.25)
    f = frame(gpus=(gpu(0, util=93, used_gib=40, pids=((100, 40),)), gpu(1, util=5)),
              processes=rows, trainers=(group,), membw=membw, cpu_percent=37.25)
    writer, path = _writer(tmp_path)
    assert writer.write(f) == 1
    assert _query(path, "SELECT value FROM meta WHERE key = 'schema'") == [(SCHEMA,)]
    assert _query(path, "SELECT time, interval_ms, cpu_percent_x10, length(per_cpu_percent) "
                        "FROM frames") == [(f.time, 1000, 372, 8)]
    assert _query(path, "SELECT gpu, util_percent, memory_used_mib, power_w_x10, "
                        "pcie_rx_kib_per_s FROM gpus") == [
        (0, 93, 40 * 1024, 3000, round(1e9 / 1024)), (1, 5, 40 * 1024, 3000, round(1e9 / 1024))]
    assert _query(path, "SELECT gpu, pid, memory_used_mib FROM gpu_processes") == [
        (0, 100, 40 * 1024)]
    assert _query(path, "SELECT i.pid, i.role, i.trainer_pid, p.cpu_percent_x10, p.rss_kib "
                        "FROM processes p JOIN process_info i ON i.id = p.process "
                        "ORDER BY i.pid") == [
        (100, "trainer", None, 1000, GIB // 1024), (101, "worker", 100, 455, GIB // 1024),
        (102, "worker", 100, 455, GIB // 1024)]
    assert _query(path, "SELECT pid, text, workers_cpu_percent_x10 FROM trainer_groups "
                        "JOIN texts ON texts.id = workers_id") == [(100, "[101,102]", 910)]
    assert _query(path, "SELECT pressure_x1000, psi_some_avg10_x100 FROM memory_bandwidth") == [
        (421, 125)]


def test_of_600_processes_only_those_that_matter_are_kept() -> None:
    rows, group = trainer_with_workers(100, workers=3, worker_cpu=20.0)
    idle = [replace(process(1000 + i), cpu_percent=0.0, rss_bytes=(i % 50) * 1024)
            for i in range(590)]
    busy = [replace(process(5000 + i), cpu_percent=1.0 + i) for i in range(8)]
    big = [replace(process(6000 + i), cpu_percent=0.0, rss_bytes=(100 + i) * GIB)
           for i in range(8)]
    on_gpu = replace(process(7000), cpu_percent=0.0, rss_bytes=0, gpu_memory_bytes=GIB)
    f = frame(processes=[*rows, *idle, *busy, *big, on_gpu], trainers=(group,))
    kept = {p.pid for p in processes_that_matter(f)}
    top_busy = {5000 + i for i in range(8)} if TOP_PROCESSES >= 8 else {
        5000 + i for i in range(8 - TOP_PROCESSES, 8)}
    top_big = {6000 + i for i in range(8 - TOP_PROCESSES, 8)}
    # the trainer and workers also have the most CPU: the busiest others fill what is left
    assert {100, 101, 102, 103, 7000} | top_big <= kept
    assert kept - {100, 101, 102, 103, 7000} - top_big <= top_busy
    assert not kept & {p.pid for p in idle}


def test_every_process_a_trainer_group_shows_is_kept() -> None:
    """The table draws a trainer's workers from its group; a worker the group lists before
    its own row says `worker` (just started: a new epoch's loader) is kept all the same."""
    rows, group = trainer_with_workers(100, workers=2, worker_cpu=0.0)
    fresh = replace(process(103, ppid=100), cpu_percent=0.0, rss_bytes=1024)
    launcher = replace(process(99), cpu_percent=0.0, rss_bytes=1024)
    group = replace(group, worker_pids=(*group.worker_pids, 103), launcher_pid=99)
    others = [replace(process(1000 + i), cpu_percent=5.0, rss_bytes=GIB) for i in range(20)]
    kept = {p.pid for p in processes_that_matter(
        frame(processes=[*rows, fresh, launcher, *others], trainers=(group,)))}
    assert {99, 100, 101, 102, 103} <= kept


def test_every_step_is_stored_once_however_the_windows_overlap(tmp_path: Path) -> None:
    writer, path = _writer(tmp_path)
    base = frame()
    for window in (range(0, 5), range(2, 9), range(2, 9), range(6, 12)):
        writer.write(replace(base, time=base.time + writer.frame_id, attached=(_attach(window),)))
    assert _query(path, "SELECT step, frame FROM steps ORDER BY step") == [
        (n, 1 if n < 5 else 2 if n < 9 else 4) for n in range(12)]
    assert _query(path, "SELECT count(*) FROM gaps") == [(0,)]
    assert _query(path, "SELECT frame, first_step, last_step FROM trainer_ticks") == [
        (1, 0, 4), (2, 2, 8), (3, 2, 8), (4, 6, 11)]
    assert writer.steps_written == 12


def test_steps_the_frames_never_carried_are_gaps_never_invented(tmp_path: Path) -> None:
    writer, path = _writer(tmp_path)
    base = frame()
    for window, dropped in ((range(40, 45), 0), (range(43, 47), 0), (range(60, 63), 7),
                            ([63, 64, 70], 7)):
        writer.write(replace(base, time=base.time + writer.frame_id,
                             attached=(_attach(window, dropped),)))
    assert _query(path, "SELECT count(*), min(step), max(step) FROM steps") == [(13, 40, 70)]
    gaps = _query(path, "SELECT frame, after_step, before_step, missing_steps, dropped_records, "
                        "reason FROM gaps ORDER BY frame")
    assert gaps == [
        (1, None, 40, 40, 0, "closed before the recording attached"),
        (3, 46, 60, 13, 7, "the ring overwrote records before they were read"),
        (4, 64, 70, 5, 0, "not training steps (another loader's batches) or never published"),
    ]


def test_a_reused_pid_with_a_new_ring_is_a_new_trainer(tmp_path: Path) -> None:
    writer, path = _writer(tmp_path)
    base = frame()
    writer.write(replace(base, attached=(_attach(range(100, 110)),)))
    writer.write(replace(base, time=base.time + 1, attached=(_attach(range(0, 3)),)))
    assert _query(path, "SELECT id, pid, first_frame FROM trainers") == [(1, 100, 1), (2, 100, 2)]
    assert _query(path, "SELECT trainer, count(*) FROM steps GROUP BY trainer") == [(1, 10), (2, 3)]


def test_advice_is_stored_when_it_appears_changes_or_goes(tmp_path: Path) -> None:
    writer, path = _writer(tmp_path)
    base = frame()
    warn = Advice("swap", "warn", "Host is swapping", "2.0 GiB swapped", "add memory")
    numbers_moved = replace(warn, evidence="2.1 GiB swapped")
    worse = replace(warn, severity="critical", evidence="6.0 GiB swapped")
    shown = [(0, (warn,)), (1, (numbers_moved,)), (2, (worse,)),
             (2 + ADVICE_REFRESH_S, (replace(worse, evidence="6.5 GiB swapped"),)),
             (3 + ADVICE_REFRESH_S, ())]
    for offset, advice in shown:
        writer.write(replace(base, time=base.time + offset, advice=advice))
    assert _query(path, "SELECT frame, shown, severity, evidence FROM advice ORDER BY frame") == [
        (1, 1, "warn", "2.0 GiB swapped"), (3, 1, "critical", "6.0 GiB swapped"),
        (4, 1, "critical", "6.5 GiB swapped"), (5, 0, None, None)]


def test_measurements_in_an_action_are_numbers_a_new_recommendation_is_not(
        tmp_path: Path) -> None:
    """An action quoting measured times (decimals) moves every tick: that is a change of
    numbers, stored once a minute; the number it recommends (an integer) changing is new
    advice, stored at once. 30 ticks of moving predictions were 30 rows before."""
    writer, path = _writer(tmp_path)
    base = frame()

    def advice(workers: int, tick: int) -> Advice:
        return Advice("raise-num-workers", "warn", "The workers cannot keep up",
                      f"{40 + tick % 7}.{tick % 10} ms per batch",
                      f"Try num_workers={workers}: predicted step 8.{tick % 10} ms instead "
                      f"of 4{tick % 10}.{tick % 3} ms (5.{tick % 4}x the samples/s).")

    for tick in range(30):
        writer.write(replace(base, time=base.time + tick, advice=(advice(4, tick),)))
    writer.write(replace(base, time=base.time + 30, advice=(advice(6, 30),)))
    rows = _query(path, "SELECT frame, action FROM advice ORDER BY frame")
    assert [frame for frame, _ in rows] == [1, 31]
    assert rows[1][1].startswith("Try num_workers=6:")


def test_a_recording_is_appended_to(tmp_path: Path) -> None:
    writer, path = _writer(tmp_path)
    base = frame()
    writer.write(replace(base, attached=(_attach(range(0, 4)),)))
    writer.db.close()
    again = RecordWriter(open_record(str(path)))
    again.write(replace(base, time=base.time + 1))
    assert _query(path, "SELECT id FROM frames") == [(1,), (2,)]


def test_files_that_are_not_recordings_are_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE precious (x)")
    text = tmp_path / "notes.txt"
    text.write_text("not a database, but someone's notes\n" * 100)
    for path, words in ((other, "not a gputop recording"), (text, "file is not a database"),
                        (tmp_path, "it is a directory")):
        with pytest.raises(RecordError, match=words):
            open_record(str(path))
    assert text.read_text().startswith("not a database")
    with sqlite3.connect(other) as db:
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == [("precious",)]
