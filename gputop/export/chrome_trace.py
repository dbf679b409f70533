"""A recording's steps and phases as Chrome trace events: the JSON torch.profiler writes,
which Perfetto (ui.perfetto.dev) and chrome://tracing open.

One process per job (its launcher, or the trainer itself), one thread (track) per rank;
each step is a complete ("X") event, its phases complete events inside it. The probe
records how long each phase took, not when it began: a step opens with its data wait, and
the other phases follow it in loop order (h2d, forward, backward, optimizer), laid end to
end; the rest of the step is time no phase accounts for. Timestamps are microseconds on
the trainers' monotonic clock, counted from the first step's start (`otherData` says so).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from gputop.core.safe_files import PRIVATE, WriteRefused, replacing
from gputop.recording.reader import Recording, UnreadableRecording
from gputop.recording.rows import StepRow
from gputop.recording.trainers import STEP_FLAGS
from gputop.recording.values import field

PHASES = ("data", "h2d", "forward", "backward", "optimizer")
OUTSIDE_MODEL = 4  # STEP_FLAGS bit: no DataLoader, the data phase is host time before forward


class ExportError(Exception):
    """A recording that cannot be exported, or a place the trace cannot be written; one line."""


@dataclass(frozen=True)
class Track:
    """Where one trainer's steps go: the job (Chrome pid) and the rank (Chrome tid)."""

    pid: int
    tid: int
    process_name: str
    thread_name: str


def write_chrome_trace(recording_path: str, out_path: str, mode: int = PRIVATE
                       ) -> tuple[int, int]:
    """Write the trace of the recording at `recording_path` to `out_path` (a new file of
    `mode`, renamed over it); (steps, tracks)."""
    trace = chrome_trace(recording_path)
    try:
        with replacing(out_path, mode) as out:
            out.write(json.dumps(trace, separators=(",", ":")).encode("utf-8"))
    except WriteRefused as exc:
        raise ExportError(f"cannot write {out_path}: {exc}") from None
    except OSError as exc:
        raise ExportError(f"cannot write {out_path}: {exc.strerror or exc}") from None
    meta = trace["otherData"]
    return meta["steps"], meta["tracks"]


def chrome_trace(path: str) -> dict[str, Any]:
    """The trace-event JSON object of the recording at `path`; one that cannot be read is
    one line (ExportError)."""
    try:
        with Recording(path) as recording, recording.reading():
            return _trace(recording)
    except UnreadableRecording as exc:
        raise ExportError(str(exc)) from None


def _trace(recording: Recording) -> dict[str, Any]:
    host = _host(recording)
    tracks = {trainer.id: _track(recording, trainer.id, trainer.pid, host)
              for trainer in recording.trainers()}
    stored = {trainer: recording.steps(trainer) for trainer in tracks}
    first = min((row.end_ns - row.duration_ns for rows in stored.values() for row in rows
                 if row.end_ns is not None), default=0)
    events: list[dict[str, Any]] = []
    steps = 0
    for trainer, track in tracks.items():
        for step_event, phases in _steps(stored[trainer], track, first):
            events.append(step_event)
            events.extend(phases)
            steps += 1
    shown = {(t.pid, t.tid): t for t in tracks.values()}
    return {
        "traceEvents": _metadata(list(shown.values())) + events,
        "displayTimeUnit": "ms",
        "otherData": {
            "producer": "gputop export --chrome-trace", "recording": recording.path,
            "clock": "the trainers' CLOCK_MONOTONIC, microseconds since the first step began",
            "clock_origin_ns": first, "phase_placement": "durations laid end to end in loop "
            "order from the step's start (the probe records durations, not start times)",
            "steps": steps, "tracks": len(shown),
        },
    }


def _host(recording: Recording) -> str:
    """The recorded host's name ("?" when the file does not say)."""
    first = recording.ticks(count=1)
    host = recording.texts(first[0].host_id, dict) if first else None
    return field(host or {}, "hostname", str, "host", "?")


def _track(recording: Recording, trainer: int, pid: int, host: str) -> Track:
    """The job and rank of a trainer: its launcher's PID (else its own) and its rank (else
    its PID), from the newest tick that knew them."""
    known = [change.config_id for change in recording.config_changes(trainer)
             if change.config_id is not None]
    config = (recording.texts(known[-1], dict) if known else None) or {}
    rank = field(config, "rank", int, "config")
    world = field(config, "world_size", int, "config")
    launcher = recording.launcher_of(pid)
    job = launcher if launcher is not None else pid
    process = f"{host}: job {launcher}" if launcher is not None else f"{host}: pid {pid}"
    if isinstance(rank, int):
        of = f"/{world}" if isinstance(world, int) else ""
        return Track(job, rank, process, f"rank {rank}{of} (pid {pid})")
    return Track(job, pid, process, f"pid {pid}")


def _metadata(tracks: list[Track]) -> list[dict[str, Any]]:
    """The "M" events naming each process (job) and thread (rank), ranks in order."""
    events: list[dict[str, Any]] = []
    for job in sorted({t.pid for t in tracks}):
        name = next(t.process_name for t in tracks if t.pid == job)
        events.append({"name": "process_name", "ph": "M", "pid": job, "tid": 0,
                       "args": {"name": name}})
    for track in sorted(tracks, key=lambda t: (t.pid, t.tid)):
        events.append({"name": "thread_name", "ph": "M", "pid": track.pid, "tid": track.tid,
                       "args": {"name": track.thread_name}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": track.pid,
                       "tid": track.tid, "args": {"sort_index": track.tid}})
    return events


def _steps(rows: Iterable[StepRow], track: Track, origin_ns: int
           ) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Each step of a trainer (its stored rows, in order) with its phases; a step that would
    overlap the one before it (clocks of a restarted trainer) starts where that one ended."""
    previous_end: int | None = None
    for (step, _frame, end_ns, duration, data, h2d, forward, backward, optimizer, gpu, gap,
         batch, epoch, flags, verdict, *_partition_and_samples) in rows:
        end = end_ns if end_ns is not None else (previous_end or origin_ns) + duration
        start = end - duration
        if previous_end is not None and start < previous_end:
            start = previous_end
            end = max(end, start)
        previous_end = end
        args: dict[str, Any] = {"step": step, "epoch": epoch, "verdict": verdict,
                                "duration_ms": duration / 1e6}
        args.update({name: True for bit, name in enumerate(STEP_FLAGS) if flags & (1 << bit)})
        for key, value in (("batch_size", batch), ("gpu_ms", gpu), ("gpu_gap_ms", gap)):
            if value is not None:
                args[key] = value if key == "batch_size" else value / 1e6
        step_event = {"name": f"step {step}", "cat": "step", "ph": "X",
                      "ts": _us(start - origin_ns), "dur": _us(end - start), "pid": track.pid,
                      "tid": track.tid, "args": args}
        names = ("input (outside model)" if flags & OUTSIDE_MODEL else "data", *PHASES[1:])
        lengths = (data, h2d, forward, backward, optimizer)
        yield step_event, _phases(track, zip(names, lengths, strict=True), start, end,
                                  origin_ns)


def _phases(track: Track, phases: Iterable[tuple[str, int | None]], start: int, end: int,
            origin_ns: int) -> list[dict[str, Any]]:
    """The measured phases laid end to end from `start`, cut at the step's `end`."""
    events = []
    cursor = start
    for name, value in phases:
        if value is None or value <= 0 or cursor >= end:
            continue  # unmeasured is not zero: no slice
        length = min(value, end - cursor)
        events.append({"name": name, "cat": "phase", "ph": "X", "ts": _us(cursor - origin_ns),
                       "dur": _us(length), "pid": track.pid, "tid": track.tid,
                       "args": {"ms": value / 1e6}})
        cursor += length
    return events


def _us(ns: int) -> float:
    """Nanoseconds as microseconds, the trace format's unit (ns precision kept)."""
    return ns / 1000
