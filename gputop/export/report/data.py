"""Reads a `gputop.record/1` recording into the columns the report's charts draw.

Series are packed as little-endian Float32 (values) or Float64 (times, seconds since the
first tick) arrays, base64-encoded: a 100 000-step run stays a few MB and the page decodes
it without parsing a number at a time. NaN is "not measured" (NULL in the file).
"""

from __future__ import annotations

import base64
import os
import statistics
import sys
from array import array
from collections.abc import Iterable, Sequence
from typing import Any

from gputop.analysis.steps import (
    DATA_BOUND_PERCENT,
    HIGHLY_PERCENT,
    MODERATELY_PERCENT,
    split_of,
)
from gputop.core.model import TrainerConfig
from gputop.recording.reader import Recording, UnreadableRecording
from gputop.recording.rows import ConfigChange, GapRow, StepRow
from gputop.recording.values import built, field

NAN = float("nan")
MS = 1e6  # ns per ms
PHASES = ("data", "h2d", "forward", "backward", "optimizer")
CONFIG_KEYS = ("num_workers", "pin_memory", "batch_size", "prefetch_factor",
               "persistent_workers", "num_threads", "device", "rank", "world_size")


class ReportError(Exception):
    """A report that cannot be made or written; one line saying why."""


def packed(values: Iterable[float | None], code: str = "f") -> str:
    """Numbers as base64 of a little-endian array of type `code` (None becomes NaN)."""
    numbers = array(code, (NAN if v is None else v for v in values))
    if sys.byteorder == "big":
        numbers.byteswap()
    return base64.b64encode(numbers.tobytes()).decode("ascii")


def report_data(recording: Recording) -> dict[str, Any]:
    """Everything the page draws, as one JSON-ready dict; a recording without ticks, damaged
    or hostile is one line (UnreadableRecording)."""
    with recording.reading():
        return _report_data(recording)


def _report_data(recording: Recording) -> dict[str, Any]:
    path = recording.path
    ticks = recording.ticks()
    if not ticks:
        raise UnreadableRecording(f"{path} holds no ticks yet")
    times = [tick.time for tick in ticks]
    start = times[0]
    index = {tick.id: i for i, tick in enumerate(ticks)}
    host = recording.texts(ticks[-1].host_id, dict) or {}
    cores = field(host, "cpu_count", int, "host", 0)
    return {
        "file": os.path.basename(path),
        "start": start,
        "end": times[-1],
        "ticks": len(ticks),
        "host": {"hostname": field(host, "hostname", str, "host"), "cpu_count": cores,
                 "memory_total_bytes": field(host, "memory_total_bytes", int, "host")},
        "meta": recording.meta(),
        "bands": {"moderately": MODERATELY_PERCENT, "highly": HIGHLY_PERCENT,
                  "data_bound": DATA_BOUND_PERCENT},
        "t": packed((t - start for t in times), "d"),
        "host_cores_busy": packed(None if tick.cpu_percent_x10 is None else
                                  tick.cpu_percent_x10 / 10 * cores for tick in ticks),
        "gpus": _gpus(recording, index),
        "workers": _workers(recording, index),
        "membw": _membw(recording, index),
        "trainers": _trainers(recording, times, start, index),
        "advice": _advice(recording, times, start, index),
    }


def _aligned(n: int) -> list[float | None]:
    return [None] * n


def _gpus(recording: Recording, index: dict[int, int]) -> list[dict[str, Any]]:
    """Util % and memory used (GiB) of each device, one value per tick."""
    devices: dict[int, dict[str, Any]] = {}
    for fid, values_of_devices in recording.gpu_series():
        i = index.get(fid)
        for values in values_of_devices:
            gpu, util, used_mib = (values["gpu"] or 0, values["util_percent"],
                                   values["memory_used_mib"])
            device = devices.get(gpu)
            if device is None:
                device = devices[gpu] = {"util": _aligned(len(index)),
                                         "memory": _aligned(len(index))}
            if i is not None:
                device["util"][i] = util
                device["memory"][i] = None if used_mib is None else used_mib / 1024
    latest = {change.gpu: change.info_id for change in recording.gpu_info_changes()}
    out = []
    for gpu in sorted(devices):
        device = devices[gpu]
        info = recording.texts(latest.get(gpu), dict) or {}
        total = field(info, "memory_total_bytes", int, "gpu")
        out.append({"index": gpu, "name": field(info, "name", str, "gpu"),
                    "memory_total_gib": None if total is None else total / 1024**3,
                    "util": packed(device["util"]), "memory": packed(device["memory"])})
    return out


def _workers(recording: Recording, index: dict[int, int]) -> list[dict[str, Any]]:
    """Each trainer's DataLoader workers' CPU (% of one core, summed), one value per tick,
    with the most workers it had at once."""
    groups: dict[int, list[float | None]] = {}
    most: dict[int, int] = {}
    for fid, pid, cpu_x10, workers_id in recording.group_series():
        series = groups.setdefault(pid, _aligned(len(index)))
        if fid in index:
            series[index[fid]] = None if cpu_x10 is None else cpu_x10 / 10
        most[pid] = max(most.get(pid, 0),
                        len(recording.texts(workers_id, tuple[int, ...]) or ()))
    return [{"pid": pid, "name": recording.command_line(pid), "workers": most[pid],
             "cpu": packed(series)} for pid, series in sorted(groups.items())]


def _membw(recording: Recording, index: dict[int, int]) -> dict[str, Any] | None:
    """Memory-bandwidth pressure (% of the peak) and PSI memory 'some' (%), per tick."""
    pressure, psi = _aligned(len(index)), _aligned(len(index))
    info_id = None
    for fid, info_of_tick, pressure_x1000, psi_x100 in recording.memory_bandwidth_series():
        i = index.get(fid)
        if i is None:
            continue
        pressure[i] = None if pressure_x1000 is None else pressure_x1000 / 10
        psi[i] = None if psi_x100 is None else psi_x100 / 100
        info_id = info_of_tick
    if info_id is None:
        return None
    info = recording.texts(info_id, dict) or {}
    return {"source": field(info, "source", str, "membw"),
            "confidence": field(info, "confidence", str, "membw"),
            "note": field(info, "note", str, "membw"), "pressure": packed(pressure),
            "psi_some": packed(psi)}


def _trainers(recording: Recording, times: Sequence[float], start: float,
              index: dict[int, int]) -> list[dict[str, Any]]:
    out = []
    for trainer in recording.trainers():
        out.append({"id": trainer.id, "pid": trainer.pid,
                    "name": recording.command_line(trainer.pid),
                    "first": times[index[trainer.first_frame]] - start
                    if trainer.first_frame in index else 0,
                    "settings": _settings(recording, recording.config_changes(trainer.id),
                                          times, start, index),
                    "gaps": _gaps(recording.gaps(trainer.id), times, start, index),
                    **_steps(recording.steps(trainer.id), times, start, index)})
    return out


def _steps(rows: Sequence[StepRow], times: Sequence[float], start: float,
           index: dict[int, int]) -> dict[str, Any]:
    """Each step's end (s since the first tick), its phases (ms) and its input/compute split.

    A step's end is on the trainer's monotonic clock; the tick that first carried it was
    sampled after it closed, so the smallest (tick time - end) maps that clock onto the
    wall clock with the least delay."""
    frame_s = [times[index[r.frame]] - start if r.frame in index else NAN for r in rows]
    offsets = [f - r.end_ns / 1e9 for f, r in zip(frame_s, rows, strict=True)
               if r.end_ns is not None and f == f]
    offset = min(offsets) if offsets else None
    ends = [f if r.end_ns is None or offset is None else r.end_ns / 1e9 + offset
            for f, r in zip(frame_s, rows, strict=True)]
    parts = [split_of(r.duration_ns, r.data_ns, r.h2d_ns, r.gpu_ns, r.gpu_gap_ns) for r in rows]
    phases = {}
    for name in PHASES:
        values = [getattr(r, f"{name}_ns") for r in rows]
        if any(v is not None for v in values):
            phases[name] = packed(None if v is None else v / MS for v in values)
    return {
        "steps": len(rows),
        "first_step": rows[0].step if rows else None,
        "last_step": rows[-1].step if rows else None,
        "outside_model": any(r.flags & 4 for r in rows),
        "gpu_timed": any(r.gpu_ns is not None and r.gpu_gap_ns is not None for r in rows),
        "median_step_s": statistics.median(r.duration_ns for r in rows) / 1e9 if rows else None,
        "end": packed(ends, "d"),
        "duration": packed(r.duration_ns / MS for r in rows),
        "phases": phases,
        "input": packed(None if p is None else p[0] / MS for p in parts),
        "compute": packed(None if p is None else p[1] / MS for p in parts),
    }


def _settings(recording: Recording, changes: Iterable[ConfigChange], times: Sequence[float],
              start: float, index: dict[int, int]) -> list[dict[str, Any]]:
    """The trainer's settings as the probe reported them, one entry per change."""
    out: list[dict[str, Any]] = []
    last = None
    for fid, config_id in changes:
        if config_id == last or config_id is None:
            continue
        last = config_id
        config = built(TrainerConfig, recording.texts(config_id, dict) or {}, "config")
        values = [[key, getattr(config, key)] for key in CONFIG_KEYS
                  if getattr(config, key) is not None]
        values += [[k, v] for k, v in config.extra]
        out.append({"at": times[index[fid]] - start if fid in index else 0, "values": values})
    return out


def _gaps(gaps: Iterable[GapRow], times: Sequence[float], start: float,
          index: dict[int, int]) -> list[dict[str, Any]]:
    return [{"at": times[index[fid]] - start if fid in index else 0, "after": after,
             "before": before, "missing": missing, "dropped": dropped, "reason": reason}
            for fid, after, before, missing, dropped, reason in gaps]


def _advice(recording: Recording, times: Sequence[float], start: float,
            index: dict[int, int]) -> list[dict[str, Any]]:
    """Each piece of advice as the spans it was shown, with what it said in each span."""
    rows: dict[str, dict[str, Any]] = {}
    end = times[-1] - start
    for fid, key, shown, severity, title, evidence, action in recording.advice_changes():
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
