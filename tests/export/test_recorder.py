"""The recorder's thread: handing frames over never waits, a full disk stops the recording
with one line in the frames while the sampler goes on, a slow disk skips ticks visibly."""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from gputop.app.wiring import build_sampler
from gputop.core.model import Frame
from gputop.frames.sampler import Sampler
from gputop.recording.writer_thread import QUEUE_FRAMES, Recorder
from tests.helpers.builders import frame, gpu


def _frames(count: int) -> list[Frame]:
    base = frame(gpus=(gpu(0), gpu(1)))
    return [replace(base, time=base.time + i) for i in range(count)]


def _drain(recorder: Recorder, until: int, limit: int = 500) -> None:
    """Wait (by count, with a bound) until the thread wrote `until` frames or stopped."""
    done = threading.Event()
    for _ in range(limit):
        if recorder.stopped or recorder.writer.frames_written >= until:
            return
        done.wait(0.01)


def test_a_full_disk_stops_the_recording_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "full.sqlite"
    recorder = Recorder(str(path))
    pages = recorder.db.execute("PRAGMA page_count").fetchone()[0]
    recorder.db.execute(f"PRAGMA max_page_count={pages + 2}")  # SQLite's own disk-full error
    errors = []
    for f in _frames(200):
        errors.append(recorder.submit(f))
        _drain(recorder, recorder.writer.frames_written + 1)
        if recorder.stopped:
            break
    assert recorder.stopped
    written = recorder.writer.frames_written
    error = recorder.submit(_frames(201)[-1])
    assert error is not None and error.stopped and error.source == "record"
    assert error.line() == (f"record stopped: database or disk is full ({path}); {written} "
                            "ticks recorded before it")
    recorder.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert db.execute("SELECT count(*) FROM frames").fetchone() == (written,)


def test_the_sampler_goes_on_and_its_frames_carry_the_recorder_line(tmp_path: Path) -> None:
    recorder = Recorder(str(tmp_path / "full.sqlite"))
    pages = recorder.db.execute("PRAGMA page_count").fetchone()[0]
    recorder.db.execute(f"PRAGMA max_page_count={pages + 2}")
    sampler: Sampler = build_sampler(demo="idle", membw="off", interval_s=0.1)
    sampler.add_sink(recorder)
    seen: list[Frame] = []
    enough = threading.Event()

    def on_frame(f: Frame) -> None:
        seen.append(f)
        stopped = [f for f in seen if (e := f.error("record")) is not None and e.stopped]
        if len(stopped) >= 3:
            enough.set()

    sampler.start(on_frame, first_gap_s=0.01)
    try:
        assert enough.wait(60), [f.errors for f in seen]
    finally:
        sampler.stop()
        recorder.close()
    first = next(i for i, f in enumerate(seen) if f.error("record") is not None)
    assert len(seen) >= first + 3  # ticks went on after the recording stopped
    assert all(f.gpu.source == "simulated" for f in seen)


def test_a_slow_disk_skips_ticks_without_making_the_sampler_wait(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder(str(tmp_path / "slow.sqlite"))
    release = threading.Event()
    write = recorder.writer.write

    def stuck(f: Frame) -> int:
        release.wait(30)
        return write(f)

    monkeypatch.setattr(recorder.writer, "write", stuck)
    errors = [recorder.submit(f) for f in _frames(QUEUE_FRAMES + 5)]
    assert errors[0] is None
    skipped = [e for e in errors if e is not None]
    assert 1 <= len(skipped) <= 5  # one taken by the stuck write, QUEUE_FRAMES queued
    assert skipped[-1].line().startswith(f"record failed: {len(skipped)} ticks not recorded: "
                                         "writing ")
    release.set()
    recorder.close()
    assert recorder.writer.frames_written == QUEUE_FRAMES + 5 - len(skipped)
