"""Reads a `gputop.record/1` recording into the columns the report's charts draw.

Series are packed as little-endian Float32 (values) or Float64 (times, seconds since the
first tick) arrays, base64-encoded: a 100 000-step run stays a few MB and the page decodes
it without parsing a number at a time. NaN is "not measured" (NULL in the file).
"""

from __future__ import annotations

import base64
import os
import sqlite3
import statistics
import sys
from array import array
from collections.abc import Iterable, Sequence
from typing import Any

from gputop.analysis.steps import (
    DATA_BOUND_PERCENT,
    HIGHLY_PERCENT,
    MODERATELY_PERCENT,
    split,
)
from gputop.core.model import Severity, StepRecord, TrainerConfig
from gputop.recording.schema import gpu_values, open_read_only
from gputop.recording.trainers import STEP_COLUMNS, config_changes, group_series, read_steps
from gputop.recording.values import (
    READ_ERRORS,
    Texts,
    built,
    checked_rows,
    conforming,
    field,
    reason,
    refusing,
)

NAN = float("nan")
MS = 1e6  # ns per ms
PHASES = ("data", "h2d", "forward", "backward", "optimizer")
FLAGS = STEP_COLUMNS.index("flags")  # of a step row
CONFIG_KEYS = ("num_workers", "pin_memory", "batch_size", "prefetch_factor",
               "persistent_workers", "num_threads", "device", "rank", "world_size")


class ReportError(Exception):
    """A file the report cannot be made from; one line saying why."""


def open_recording(path: str) -> sqlite3.Connection:
    """`path` opened read-only, checked to be a recording of our schema holding ticks."""
    db, _ = open_read_only(path, ReportError)
    try:
        ticks = db.execute("SELECT id FROM frames LIMIT 1").fetchone()
    except READ_ERRORS as exc:
        db.close()
        raise ReportError(f"cannot read {path}: {reason(exc)}") from None
    if ticks is None:
        db.close()
        raise ReportError(f"{path} holds no ticks yet")
    return db


def packed(values: Iterable[float | None], code: str = "f") -> str:
    """Numbers as base64 of a little-endian array of type `code` (None becomes NaN)."""
    numbers = array(code, (NAN if v is None else v for v in values))
    if sys.byteorder == "big":
        numbers.byteswap()
    return base64.b64encode(numbers.tobytes()).decode("ascii")


def report_data(db: sqlite3.Connection, path: str) -> dict[str, Any]:
    """Everything the page draws, as one JSON-ready dict; a damaged or hostile recording is
    one line (ReportError)."""
    with refusing(path, ReportError):
        return _report_data(db, path)


def _report_data(db: sqlite3.Connection, path: str) -> dict[str, Any]:
    texts = Texts(db)
    ids, times, cpu, host_ids = [], [], [], []
    for fid, at, cpu_x10, host_id in checked_rows(db.execute(
            "SELECT id, time, cpu_percent_x10, host_id FROM frames ORDER BY id"),
            (int, float, float | None, int | None), "frames"):
        ids.append(fid)
        times.append(at)
        cpu.append(None if cpu_x10 is None else cpu_x10 / 10)
        host_ids.append(host_id)
    start = times[0]
    index = {fid: i for i, fid in enumerate(ids)}
    if not ids:
        raise ReportError(f"{path} holds no ticks yet")
    layout = db.execute("PRAGMA user_version").fetchone()[0]
    host = texts(host_ids[-1], dict) or {}
    cores = field(host, "cpu_count", int, "host", 0)
    return {
        "file": os.path.basename(path),
        "start": start,
        "end": times[-1],
        "ticks": len(ids),
        "host": {"hostname": field(host, "hostname", str, "host"), "cpu_count": cores,
                 "memory_total_bytes": field(host, "memory_total_bytes", int, "host")},
        "meta": dict(checked_rows(db.execute("SELECT key, value FROM meta"),
                                  (str, str | None), "meta")),
        "bands": {"moderately": MODERATELY_PERCENT, "highly": HIGHLY_PERCENT,
                  "data_bound": DATA_BOUND_PERCENT},
        "t": packed((t - start for t in times), "d"),
        "host_cores_busy": packed(None if c is None else c * cores for c in cpu),
        "gpus": _gpus(db, texts, index, layout),
        "workers": _workers(db, texts, index, layout),
        "membw": _membw(db, texts, index),
        "trainers": _trainers(db, texts, times, start, index, layout),
        "advice": _advice(db, times, start, index),
    }


def _aligned(n: int) -> list[float | None]:
    return [None] * n


def _gpus(db: sqlite3.Connection, texts: Texts, index: dict[int, int],
          layout: int) -> list[dict[str, Any]]:
    """Util % and memory used (GiB) of each device, one value per tick."""
    devices: dict[int, dict[str, Any]] = {}
    for fid, blob in checked_rows(db.execute("SELECT frame, devices FROM gpu_ticks"),
                                  (int, bytes), "gpu_ticks"):
        i = index.get(fid)
        for values in gpu_values(layout, blob):
            gpu, util, used_mib = (values["gpu"] or 0, values["util_percent"],
                                   values["memory_used_mib"])
            device = devices.get(gpu)
            if device is None:
                device = devices[gpu] = {"util": _aligned(len(index)),
                                         "memory": _aligned(len(index))}
            if i is not None:
                device["util"][i] = util
                device["memory"][i] = None if used_mib is None else used_mib / 1024
    latest = dict(checked_rows(db.execute("SELECT gpu, info_id FROM gpu_info ORDER BY frame"),
                               (int, int), "gpu_info"))
    out = []
    for gpu in sorted(devices):
        device = devices[gpu]
        info = texts(latest.get(gpu), dict) or {}
        total = field(info, "memory_total_bytes", int, "gpu")
        out.append({"index": gpu, "name": field(info, "name", str, "gpu"),
                    "memory_total_gib": None if total is None else total / 1024**3,
                    "util": packed(device["util"]), "memory": packed(device["memory"])})
    return out


def _workers(db: sqlite3.Connection, texts: Texts, index: dict[int, int],
             layout: int) -> list[dict[str, Any]]:
    """Each trainer's DataLoader workers' CPU (% of one core, summed), one value per tick,
    with the most workers it had at once."""
    groups: dict[int, list[float | None]] = {}
    most: dict[int, int] = {}
    for fid, pid, cpu_x10, workers_id in group_series(db, layout):
        series = groups.setdefault(pid, _aligned(len(index)))
        if fid in index:
            series[index[fid]] = None if cpu_x10 is None else cpu_x10 / 10
        most[pid] = max(most.get(pid, 0), len(texts(workers_id, tuple[int, ...]) or ()))
    return [{"pid": pid, "name": _process_name(db, texts, pid), "workers": most[pid],
             "cpu": packed(series)} for pid, series in sorted(groups.items())]


def _process_name(db: sqlite3.Connection, texts: Texts, pid: int) -> str | None:
    """The command line the recording last kept for `pid` (None if it kept none)."""
    row = db.execute("SELECT i.cmdline_id, i.name FROM process_info i JOIN texts t ON "
                     "t.id = i.cmdline_id WHERE i.pid = ? ORDER BY i.id DESC LIMIT 1",
                     (pid,)).fetchone()
    if row is None:
        return None
    words = texts(row[0], tuple[str, ...])
    return " ".join(words) if words else conforming(row[1], str, "process_info.name")


def _membw(db: sqlite3.Connection, texts: Texts,
           index: dict[int, int]) -> dict[str, Any] | None:
    """Memory-bandwidth pressure (% of the peak) and PSI memory 'some' (%), per tick."""
    pressure, psi = _aligned(len(index)), _aligned(len(index))
    info_id = None
    for fid, info, pressure_x1000, psi_x100 in checked_rows(db.execute(
            "SELECT frame, info_id, pressure_x1000, psi_some_avg10_x100 FROM memory_bandwidth"),
            (int, int, float | None, float | None), "memory_bandwidth"):
        i = index.get(fid)
        if i is None:
            continue
        pressure[i] = None if pressure_x1000 is None else pressure_x1000 / 10
        psi[i] = None if psi_x100 is None else psi_x100 / 100
        info_id = info
    if info_id is None:
        return None
    info = texts(info_id, dict) or {}
    return {"source": field(info, "source", str, "membw"),
            "confidence": field(info, "confidence", str, "membw"),
            "note": field(info, "note", str, "membw"), "pressure": packed(pressure),
            "psi_some": packed(psi)}


def _trainers(db: sqlite3.Connection, texts: Texts, times: Sequence[float], start: float,
              index: dict[int, int], layout: int) -> list[dict[str, Any]]:
    out = []
    for tid, pid, first_frame in checked_rows(db.execute(
            "SELECT id, pid, first_frame FROM trainers ORDER BY id"), (int, int, int),
            "trainers"):
        steps = read_steps(db, layout, tid)
        out.append({"id": tid, "pid": pid, "name": _process_name(db, texts, pid),
                    "first": times[index[first_frame]] - start if first_frame in index else 0,
                    "settings": _settings(texts, config_changes(db, layout, tid), times, start,
                                          index),
                    "gaps": _gaps(db, tid, times, start, index),
                    **_steps(steps, times, start, index)})
    return out


def _steps(rows: Sequence[tuple[Any, ...]], times: Sequence[float], start: float,
           index: dict[int, int]) -> dict[str, Any]:
    """Each step's end (s since the first tick), its phases (ms) and its input/compute split.

    A step's end is on the trainer's monotonic clock; the tick that first carried it was
    sampled after it closed, so the smallest (tick time - end) maps that clock onto the
    wall clock with the least delay."""
    frame_s = [times[index[r[1]]] - start if r[1] in index else NAN for r in rows]
    offsets = [f - r[2] / 1e9 for f, r in zip(frame_s, rows, strict=True)
               if r[2] is not None and f == f]
    offset = min(offsets) if offsets else None
    ends = [f if r[2] is None or offset is None else r[2] / 1e9 + offset
            for f, r in zip(frame_s, rows, strict=True)]
    records = [StepRecord(step=r[0], duration_ns=r[3], data_ns=r[4], h2d_ns=r[5],
                          forward_ns=r[6], backward_ns=r[7], optimizer_ns=r[8], gpu_ns=r[9],
                          gpu_gap_ns=r[10]) for r in rows]
    parts = [split(s) for s in records]
    phases = {}
    for position, name in enumerate(PHASES, start=4):
        values = [r[position] for r in rows]
        if any(v is not None for v in values):
            phases[name] = packed(None if v is None else v / MS for v in values)
    return {
        "steps": len(rows),
        "first_step": rows[0][0] if rows else None,
        "last_step": rows[-1][0] if rows else None,
        "outside_model": any(r[FLAGS] & 4 for r in rows),
        "gpu_timed": any(r[9] is not None and r[10] is not None for r in rows),
        "median_step_s": statistics.median(r[3] for r in rows) / 1e9 if rows else None,
        "end": packed(ends, "d"),
        "duration": packed(r[3] / MS for r in rows),
        "phases": phases,
        "input": packed(None if p is None else p[0] / MS for p in parts),
        "compute": packed(None if p is None else p[1] / MS for p in parts),
    }


def _settings(texts: Texts, changes: Iterable[tuple[int, int | None]], times: Sequence[float],
              start: float, index: dict[int, int]) -> list[dict[str, Any]]:
    """The trainer's settings as the probe reported them, one entry per change."""
    out: list[dict[str, Any]] = []
    last = None
    for fid, config_id in changes:
        if config_id == last or config_id is None:
            continue
        last = config_id
        config = built(TrainerConfig, texts(config_id, dict) or {}, "config")
        values = [[key, getattr(config, key)] for key in CONFIG_KEYS
                  if getattr(config, key) is not None]
        values += [[k, v] for k, v in config.extra]
        out.append({"at": times[index[fid]] - start if fid in index else 0, "values": values})
    return out


def _gaps(db: sqlite3.Connection, trainer: int, times: Sequence[float], start: float,
          index: dict[int, int]) -> list[dict[str, Any]]:
    return [{"at": times[index[fid]] - start if fid in index else 0, "after": after,
             "before": before, "missing": missing, "dropped": dropped, "reason": reason}
            for fid, after, before, missing, dropped, reason in checked_rows(db.execute(
                "SELECT frame, after_step, before_step, missing_steps, dropped_records, reason "
                "FROM gaps WHERE trainer = ? ORDER BY frame", (trainer,)),
                (int, int | None, int | None, int | None, int, str), "gaps")]


def _advice(db: sqlite3.Connection, times: Sequence[float], start: float,
            index: dict[int, int]) -> list[dict[str, Any]]:
    """Each piece of advice as the spans it was shown, with what it said in each span."""
    rows: dict[str, dict[str, Any]] = {}
    end = times[-1] - start
    for fid, key, shown, severity, title, evidence, action in checked_rows(db.execute(
            "SELECT frame, id, shown, severity, title, evidence, action FROM advice "
            "ORDER BY frame"), (int, str, bool, Severity | None, str | None, str | None,
                                str | None), "advice"):
        at = times[index[fid]] - start if fid in index else 0.0
        row = rows.setdefault(key, {"id": key, "title": title, "spans": []})
        spans = row["spans"]
        if spans and spans[-1][1] is None:
            spans[-1][1] = at  # the span shown so far ends where this change begins
        if shown:
            spans.append([at, None, severity, title, evidence, action])
            row["title"] = title
    for row in rows.values():
        for span in row["spans"]:
            if span[1] is None:
                span[1] = end
    return sorted(rows.values(), key=lambda r: r["spans"][0][0] if r["spans"] else 0)
