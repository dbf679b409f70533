"""The replay source: a recording read back into Frames with what each tick stored, new ticks
of a recording still being written, and files that are not recordings refused."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from gputop.core.model import Advice, SourceError
from gputop.frames.playback import Playback, derived
from gputop.recording.reader import UnreadableRecording
from gputop.recording.replay import Replay
from gputop.recording.writer import RecordWriter, open_record
from gputop.recording.writer_thread import drop_before
from tests.helpers.tui import frames


def test_a_tick_reads_back_as_the_frame_it_was(tmp_path: Path) -> None:
    path = str(tmp_path / "run.sqlite")
    writer = RecordWriter(open_record(path))
    live = frames("data-starved", 3, attach=True)
    error = SourceError("membw", "OSError: gone", 2, 4.0, live[0].time)
    advice = Advice("swap", "warn", "Host is swapping", "2 GiB", "add memory")
    live[2] = replace(live[2], errors=(error,), advice=(advice,))
    for frame in live:
        writer.write(frame)
    back = Replay(path)
    assert len(back) == 3
    got, want = back.frame(2), live[2]
    assert (got.time, got.interval_s, got.host, got.errors, got.advice) == (
        want.time, want.interval_s, want.host, want.errors, want.advice)
    assert [g.util_percent for g in got.gpu.gpus] == [g.util_percent for g in want.gpu.gpus]
    assert [g.name for g in got.gpu.gpus] == [g.name for g in want.gpu.gpus]
    assert got.gpu.source == "simulated" and got.trainers == want.trainers
    assert got.memory_bandwidth == want.memory_bandwidth
    kept = {p.pid: p for p in got.processes}
    for p in want.processes:  # RSS in KiB (/proc counts pages), GPU memory in MiB (NVML's)
        if p.pid in kept:
            rss = None if p.rss_bytes is None else round(p.rss_bytes / 1024) * 1024
            assert replace(kept[p.pid], gpu_memory_bytes=p.gpu_memory_bytes) == replace(
                p, rss_bytes=rss)
    assert {p.pid for p in want.processes if p.role != "other"} <= kept.keys()
    (state,) = got.attached
    assert state.steps == want.attached[0].steps and state.config == want.attached[0].config
    assert derived(got).attached[0].summary.steps > 0


def test_a_recording_being_written_grows_at_the_end(tmp_path: Path) -> None:
    path = str(tmp_path / "run.sqlite")
    writer = RecordWriter(open_record(path))
    live = frames("idle", 6)
    for frame in live[:3]:
        writer.write(frame)
    playback = Playback(Replay(path))
    assert playback.position() == (1, 3)
    for frame in live[3:]:
        writer.write(frame)
    playback.jump("end")
    assert playback.position() == (6, 6)
    assert playback.frame_at(5).time == live[5].time


def test_a_trimmed_tick_is_a_line_not_a_traceback(tmp_path: Path) -> None:
    path = str(tmp_path / "run.sqlite")
    writer = RecordWriter(open_record(path))
    for frame in frames("idle", 4):
        writer.write(frame)
    playback = Playback(Replay(path))
    drop_before(writer.db, 3)
    with pytest.raises(Exception, match="tick 1 is no longer in"):
        playback.frame_at(0)


def test_what_is_not_a_recording_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    (tmp_path / "text").write_text("hello\n" * 1000)
    for path, words in ((other, "is not a gputop recording"), (tmp_path / "nothing", "no "
                        "recording at"), (tmp_path / "text", "file is not a database")):
        with pytest.raises(UnreadableRecording, match=words):
            Replay(str(path))
