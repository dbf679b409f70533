"""The recorder's file, read back with plain sqlite3 as users would: rows, units, the
processes kept, every step once, gaps as gaps, advice transitions, refusing foreign files."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from gputop.core.model import Advice, AttachState, MemoryBandwidthSample, StepRecord, TrainerConfig
from gputop.recording.reader import UnreadableRecording
from gputop.recording.replay import Replay
from gputop.recording.schema import SCHEMA
from gputop.recording.writer import (
    ADVICE_REFRESH_S,
    COMMAND_CHARS,
    TOP_PROCESSES,
    RecordError,
    RecordWriter,
    open_record,
    processes_that_matter,
)
from gputop.tui.views.header import header_lines
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


def _file_bytes(path: Path) -> bytes:
    """The database file with its write-ahead log folded in."""
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.read_bytes()


def test_a_worker_restart_adds_no_copy_of_the_command_line(tmp_path: Path) -> None:
    """A DataLoader without persistent_workers starts new workers every epoch, each a new
    process identity with the trainer's command line (often hundreds of bytes): the line
    is in the file once however many epochs (it was a copy per worker per epoch)."""
    marker = "--a-command-line-stored-once"
    command = ("python", "train.py", marker, "--data=/datasets/" + "x" * 200)
    writer, path = _writer(tmp_path)
    base = frame()
    for epoch in range(10):
        rows, group = trainer_with_workers(100, workers=4, worker_cpu=50.0)
        workers = {p.pid: 1000 + 10 * epoch + i for i, p in enumerate(rows[1:])}
        rows = [replace(p, pid=workers.get(p.pid, p.pid), start_ticks=workers.get(p.pid, 1),
                        cmdline=command) for p in rows]
        group = replace(group, worker_pids=tuple(workers.values()))
        writer.write(replace(base, time=base.time + epoch, processes=tuple(rows),
                             trainers=(group,)))
    assert _query(path, "SELECT count(*) FROM process_info") == [(41,)]
    assert _file_bytes(path).count(marker.encode()) == 1


def test_eight_busy_gpus_cost_under_30_bytes_a_device_a_tick(tmp_path: Path) -> None:
    """The GPU numbers of a tick are stored together, not as a row per device with a key
    and a header byte per column each (44 bytes a device-tick: 8 GPUs broke the 50 MB a
    day budget); the file grows by pages, so ticks are counted by the thousand."""
    ticks = 2000
    sizes = []
    for gpus in (0, 8):
        path = tmp_path / f"gpus-{gpus}.sqlite"
        writer = RecordWriter(open_record(str(path)))
        base = frame()
        for tick in range(ticks):
            devices = tuple(replace(gpu(i, util=50 + (tick + i) % 50, used_gib=40 + tick % 3),
                                    power_w=300 + (tick * 7 + i) % 100 / 10,
                                    pcie_rx_bytes_per_s=1e9 + tick * 4096,
                                    pcie_tx_bytes_per_s=1e8 + i * tick * 1024)
                            for i in range(gpus))
            writer.write(replace(base, time=base.time + tick,
                                 gpu=replace(base.gpu, source="simulated", gpus=devices)))
        writer.db.close()
        sizes.append(len(_file_bytes(path)))
    assert (sizes[1] - sizes[0]) / ticks / 8 < 30


def test_the_gpus_view_and_the_replay_read_each_device_back(tmp_path: Path) -> None:
    """A device's numbers as SQL sees them through the `gpus` view and as a replay does:
    NULL for what was not measured, values beyond a field clamped, the device's name from
    the info in effect at that tick."""
    blank = replace(gpu(0), util_percent=None, memory_used_bytes=None, temperature_c=None,
                    power_w=None, sm_clock_mhz=None, pcie_rx_bytes_per_s=None)
    busy = replace(gpu(1), sm_occupancy_percent=87.26, tensor_active_percent=-3.0)
    huge = replace(gpu(1, util=100, used_gib=180), name="Renamed", power_w=1234.56,
                   pcie_rx_bytes_per_s=100e9)  # its details: the first tick's (see below)
    writer, path = _writer(tmp_path)
    writer.write(frame(gpus=(blank, busy)))
    writer.write(replace(frame(gpus=(blank, huge)), time=frame().time + 1))
    assert _query(path, "SELECT g.*, json_extract(t.text, '$.name') FROM gpus g "
                        "JOIN texts t ON t.id = g.info_id WHERE frame = 2") == [
        (2, 0, 3, None, None, None, None, None, None, 2619, None, round(1e8 / 1024), None, None,
         "Test GPU"),
        (2, 1, 5, 100, None, 180 * 1024, 60, 12346, 1980, 2619, round(100e9 / 2**20) * 1024,
         round(1e8 / 1024), 873, 0, "Renamed")]  # PCIe beyond 8 GiB/s: to the MiB/s
    recording = Replay(str(path))
    first, second = (recording.frame(i).gpu.gpus for i in (0, 1))
    recording.close()
    assert [g.name for g in first] == ["Test GPU"] * 2 and second[1].name == "Renamed"
    assert second[0] == replace(blank, pcie_tx_bytes_per_s=round(1e8 / 1024) * 1024)
    assert (second[1].power_w, second[1].sm_occupancy_percent) == (1234.6, 87.3)


def test_a_file_of_an_earlier_layout_is_refused_with_one_line(tmp_path: Path) -> None:
    writer, path = _writer(tmp_path)
    writer.write(frame(gpus=(gpu(0),)))
    writer.db.execute("PRAGMA user_version=1")
    writer.db.close()
    with pytest.raises(RecordError, match="earlier gputop"):
        open_record(str(path))
    with pytest.raises(UnreadableRecording, match="earlier gputop"):
        Replay(str(path))


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


def test_the_processes_view_and_the_replay_read_each_process_back(tmp_path: Path) -> None:
    """A tick's kept processes are one BLOB; the `processes` view gives SQL a row each, as
    the table of layout 2 did, and the replay the numbers stored: NULL where unmeasured, a
    %CPU past 3276.7 and a CPU time past 248 days in whole units (the screen prints seconds
    there), a state letter, in the frame's order."""
    rows, group = trainer_with_workers(100, workers=2, worker_cpu=45.5)
    rows[0] = replace(rows[0], cpu_percent=6400.04, cpu_time_s=300 * 86400 + 0.37,
                      state="R", num_threads=129)
    rows[1] = replace(rows[1], cpu_percent=None, rss_bytes=None, cpu_time_s=None, state="D")
    writer, path = _writer(tmp_path)
    writer.write(frame(processes=rows, trainers=(group,)))
    assert _query(path, "SELECT i.pid, p.state, p.num_threads, p.cpu_percent_x10, p.rss_kib, "
                        "p.cpu_time_s_x100 FROM processes p JOIN process_info i "
                        "ON i.id = p.process WHERE p.frame = 1") == [
        (100, "R", 129, 64000, GIB // 1024, 300 * 86400 * 100),
        (101, "D", 4, None, None, None),
        (102, "S", 4, 455, GIB // 1024, 1000)]
    replayed = Replay(str(path)).frame(0).processes
    assert [(p.pid, p.state, p.cpu_percent, p.cpu_time_s) for p in replayed] == [
        (100, "R", 6400.0, 300 * 86400.0), (101, "D", None, None), (102, "S", 45.5, 10.0)]


def test_gpu_numbers_no_pane_draws_are_stored_every_tenth_tick(tmp_path: Path) -> None:
    """Memory util, clocks, SM occupancy and tensor activity: a `gpu_details` row every
    DETAIL_EVERY ticks and whenever the devices change; the view and the replay show the
    last stored at or before a tick."""
    writer, path = _writer(tmp_path)
    base = frame()
    for tick in range(1, 26):
        devices = tuple(replace(gpu(i), sm_clock_mhz=1000 + tick) for i in range(2 + (tick > 15)))
        writer.write(replace(base, time=base.time + tick,
                             gpu=replace(base.gpu, source="simulated", gpus=devices)))
    assert _query(path, "SELECT frame FROM gpu_details") == [(1,), (10,), (16,), (20,)]
    assert _query(path, "SELECT frame, gpu, sm_clock_mhz FROM gpus WHERE frame IN (9, 16, 17) "
                        "ORDER BY frame, gpu") == [
        (9, 0, 1001), (9, 1, 1001), (16, 0, 1016), (16, 1, 1016), (16, 2, 1016),
        (17, 0, 1016), (17, 1, 1016), (17, 2, 1016)]
    recording = Replay(str(path))
    assert [g.sm_clock_mhz for g in recording.frame(13).gpu.gpus] == [1010, 1010]


def test_a_command_line_longer_than_any_screen_is_cut(tmp_path: Path) -> None:
    """A browser's or a launcher's command line runs to kilobytes, each new process a new
    text: stored up to COMMAND_CHARS characters, the word crossing it cut with an ellipsis."""
    long = ("chromium", "--type=renderer", "--flags=" + "x" * 2000, "--after")
    writer, path = _writer(tmp_path)
    writer.write(frame(processes=[replace(process(7), cmdline=long, cpu_percent=50.0)]))
    stored = Replay(str(path)).frame(0).processes[0].cmdline
    assert stored[:2] == long[:2] and stored[2].endswith("…") and len(stored) == 3
    assert len(" ".join(stored)) == COMMAND_CHARS + 1


@pytest.mark.parametrize("uptime_s", [3599.6, 3600.4, 86399.5])
def test_the_replays_header_shows_the_uptime_the_live_view_showed(
        tmp_path: Path, uptime_s: float) -> None:
    """The screen prints whole minutes of uptime, cut down: a recording that rounded the
    seconds showed the next minute in the last half second of one."""
    live = replace(frame(), host=replace(frame().host, uptime_s=uptime_s))
    writer, path = _writer(tmp_path)
    writer.write(live)
    recording = Replay(str(path))
    replayed = recording.frame(0)
    recording.close()
    assert header_lines(replayed, 120) == header_lines(live, 120)
