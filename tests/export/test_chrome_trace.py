"""`gputop export FILE --chrome-trace OUT`: a recording's steps and phases as Chrome trace
events, checked against the trace-event format (required keys, microsecond timestamps,
complete events nested per track, one track per rank, one step event per recorded step)."""

from __future__ import annotations

import json
import math
import signal
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gputop.app.cli import main
from gputop.core.model import AttachState, StepRecord, TrainerConfig, TrainerGroup
from gputop.recording.writer import RecordWriter, open_record
from tests.helpers.probe import trainer_env
from tests.helpers.recording import one, wait_for
from tests.helpers.tui import frames

MS = 1_000_000
LAUNCHER = 7000
RANKS = {7001: 0, 7002: 1}
UI_LIBS = {"textual", "rich"}
EPS_US = 0.001  # the format's microseconds carry nanoseconds: allow one of rounding


def _step(number: int, start_ns: int, rank: int) -> StepRecord:
    """A step opening at `start_ns`: its data wait, then the model's phases, then a little
    time no phase covers (rank 1 waits longer for its data)."""
    data = (4 + 3 * rank + number % 3) * MS
    h2d, forward, backward, optimizer = MS, 5 * MS, 9 * MS, 2 * MS
    total = data + h2d + forward + backward + optimizer + MS
    return StepRecord(step=number, duration_ns=total, data_ns=data, h2d_ns=h2d,
                      forward_ns=forward, backward_ns=backward, optimizer_ns=optimizer,
                      gpu_ns=15 * MS, batch_size=32, warmup=number < 2,
                      verdict="compute-bound", end_ns=start_ns + total)


def _rank_steps(rank: int, count: int) -> list[StepRecord]:
    """`count` back-to-back steps of one rank, from a monotonic clock well past zero."""
    steps, start = [], 5_000_000 * MS + rank * 100_000
    for number in range(count):
        step = _step(number, start, rank)
        steps.append(step)
        start = step.end_ns or 0
    return steps


def _recording(tmp_path: Path, ticks: int = 12, per_tick: int = 7) -> Path:
    """A recording of two ranks of one torchrun job, each closing `per_tick` steps a tick;
    one tick of rank 1 is lost to the ring (a gap in the file)."""
    path = tmp_path / "run.sqlite"
    writer = RecordWriter(open_record(str(path)))
    every = {pid: _rank_steps(rank, ticks * per_tick) for pid, rank in RANKS.items()}
    groups = tuple(TrainerGroup(pid, (), 0.0, 4, False, launcher_pid=LAUNCHER) for pid in RANKS)
    for tick, frame in enumerate(frames("data-starved", ticks)):
        shown = (tick + 1) * per_tick
        attached = []
        for pid, rank in RANKS.items():
            window = every[pid][max(0, shown - 20):shown]
            if pid == 7002 and tick == 5:
                continue  # not read this tick; the next window no longer reaches back
            if pid == 7002 and tick == 6:
                window = window[-3:]
            config = TrainerConfig(num_workers=2, batch_size=32, rank=rank, world_size=2)
            attached.append(AttachState(pid, config, 0, tuple(window)))
        writer.write(replace(frame, attached=tuple(attached), trainers=groups))
    writer.db.close()
    return path


def _steps_in(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT count(*) FROM steps").fetchone()[0])


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) and value >= 0


def validate(trace: dict[str, Any]) -> dict[tuple[int, int], list[dict[str, Any]]]:
    """Check `trace` against the trace-event format (JSON object form) and return each
    track's complete events; fails on the first thing a viewer would reject or misdraw."""
    assert isinstance(trace["traceEvents"], list)
    assert trace["displayTimeUnit"] in ("ms", "ns")
    names: dict[tuple[str, int, int], str] = {}
    tracks: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for event in trace["traceEvents"]:
        assert isinstance(event["name"], str) and event["name"]
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
        if event["ph"] == "M":
            if event["name"] in ("process_name", "thread_name"):
                names[(event["name"], event["pid"], event["tid"])] = event["args"]["name"]
            continue
        assert event["ph"] == "X", event  # complete events only: nothing left to pair
        assert _number(event["ts"]) and _number(event["dur"]), event
        tracks.setdefault((event["pid"], event["tid"]), []).append(event)
    for pid, tid in tracks:
        assert ("process_name", pid, 0) in names and ("thread_name", pid, tid) in names
    for events in tracks.values():
        _nested(events)
    return tracks


def _nested(events: list[dict[str, Any]]) -> None:
    """Complete events on one track nest: a child lies within its parent, siblings do not
    overlap; steps sit at the top, phases inside a step."""
    stack: list[dict[str, Any]] = []
    for event in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= event["ts"] + EPS_US:
            stack.pop()
        if stack:
            parent = stack[-1]
            assert event["ts"] + event["dur"] <= parent["ts"] + parent["dur"] + EPS_US, \
                (parent, event)
        assert event["cat"] == ("phase" if stack else "step"), (stack, event)
        stack.append(event)


def _export(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """`gputop export ARGV` in this process: its exit code and what it wrote to stderr."""
    code = main(["export", *argv])
    return code, capsys.readouterr().err


def test_the_trace_has_one_track_per_rank_and_every_step_with_its_phases(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _recording(tmp_path)
    out = tmp_path / "trace.json"
    code, err = _export(capsys, str(path), "--chrome-trace", str(out))
    assert code == 0, err
    trace = json.loads(out.read_text())
    tracks = validate(trace)
    assert set(tracks) == {(LAUNCHER, 0), (LAUNCHER, 1)}
    steps = [e for events in tracks.values() for e in events if e["cat"] == "step"]
    assert len(steps) == _steps_in(path) == trace["otherData"]["steps"]
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM gaps").fetchone()[0] == 1  # rank 1's lost run
    assert err == f"gputop: wrote {len(steps)} steps on 2 tracks to {out}\n"
    names = {(e["name"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and "name" in e["args"]}
    assert names[("thread_name", 1)] == "rank 1/2 (pid 7002)"
    assert names[("process_name", 0)].endswith(f": job {LAUNCHER}")
    first = min(steps, key=lambda e: (e["tid"], e["args"]["step"]))
    phases = sorted((e for e in tracks[(LAUNCHER, 0)] if e["cat"] == "phase"
                     and first["ts"] <= e["ts"] < first["ts"] + first["dur"]),
                    key=lambda e: e["ts"])
    assert [p["name"] for p in phases] == ["data", "h2d", "forward", "backward", "optimizer"]
    assert phases[0]["ts"] == first["ts"] == 0  # the first step's start is the origin
    assert first["dur"] == pytest.approx(_step(0, 0, 0).duration_ns / 1000)
    assert first["args"]["warmup"] is True and first["args"]["gpu_ms"] == 15.0


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = _recording(tmp_path, ticks=2)
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    text = tmp_path / "notes.txt"
    text.write_text("not a database, not at all " * 10)
    for args, expect in [
        ((str(tmp_path / "missing.sqlite"),), f"no recording at {tmp_path}/missing.sqlite"),
        ((str(other),), f"{other} is not a gputop recording"),
        ((str(text),), f"cannot read {text}: file is not a database"),
        ((str(tmp_path),), f"{tmp_path} is not a file"),
        ((str(path), "--chrome-trace", str(tmp_path / "no" / "such" / "dir.json")),
         f"cannot write {tmp_path}/no/such/dir.json: No such file or directory"),
    ]:
        argv = args if "--chrome-trace" in args else (*args, "--chrome-trace",
                                                       str(tmp_path / "out.json"))
        code, err = _export(capsys, *argv)
        assert (code, err) == (2, f"gputop: {expect}\n"), argv
    assert not (tmp_path / "out.json").exists()
    code, err = _export(capsys, str(path))
    assert code == 2 and "--chrome-trace" in err and err.count("\n") == 1


@pytest.mark.slow
def test_a_recorded_demo_trainer_exports_without_textual(tmp_path: Path) -> None:
    """The real thing: `gputop record --demo` beside the demo trainer's probe, exported in a
    process that never imports a UI library."""
    path, out = tmp_path / "demo.sqlite", tmp_path / "demo.json"
    rings = tmp_path / "rings"
    rings.mkdir()
    recorder = subprocess.Popen(
        [sys.executable, "-m", "gputop", "record", str(path), "--demo", "data-starved",
         "--interval", "0.2", "--membw", "off"], env=trainer_env(rings),
        stderr=subprocess.DEVNULL)
    try:  # the demo trainer imports torch first: wait for its steps, not for a time
        wait_for(lambda: one(path, "SELECT count(*) >= 50 FROM steps") == (1,), "50 steps",
                 limit=4000)
    finally:
        recorder.send_signal(signal.SIGTERM)
        assert recorder.wait(timeout=60) == 0
    code = ("import sys\nfrom gputop.app.cli import main\n"
            f"rc = main(['export', {str(path)!r}, '--chrome-trace', {str(out)!r}])\n"
            "print('rc', rc)\nprint('\\n'.join(sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    lines = done.stdout.split()
    assert lines[lines.index("rc") + 1] == "0", done.stderr
    assert not {m for m in lines if m.split(".")[0] in UI_LIBS}
    tracks = validate(json.loads(out.read_text()))
    steps = sum(e["cat"] == "step" for events in tracks.values() for e in events)
    assert steps == _steps_in(path)
