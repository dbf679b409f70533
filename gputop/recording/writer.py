"""Writes Frames into a `gputop.record/1` SQLite file (gputop/recording/schema.py): one transaction
per tick, so a recorder killed at any moment leaves every tick committed before it.

Only the processes that matter are stored (trainers, their workers, launchers, probed and
GPU processes, the top few by CPU and by RSS): a day at 1 Hz stays small with 600 processes.
Every closed step of every attached trainer is stored once; steps the frames never carried
are recorded as gaps, never invented.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import json
import math
import os
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gputop import __version__
from gputop.core.masking import mask_fact, mask_secrets
from gputop.core.model import (
    Advice,
    AttachState,
    Frame,
    GpuSample,
    MemoryBandwidthSample,
    ProcessSample,
    StepRecord,
    TrainerGroup,
)
from gputop.core.printable import printable
from gputop.core.safe_files import (
    PRIVATE,
    WriteRefused,
    create_new,
    open_directory_of,
    open_or_create,
    open_own,
    same_file,
)
from gputop.recording.schema import (
    APPLICATION_ID,
    DETAIL_EVERY,
    GPU_DETAIL,
    GPU_PROCESS_TICK,
    GPU_TICK,
    KIB,
    MIB,
    PROCESS_TICK,
    SCHEMA,
    SIDE_FILES,
    TABLES,
    USER_VERSION,
    contents_refusal,
    in_units,
    layout_refusal,
    pack_cores,
    scaled,
    scaled_whole,
    text_hash,
)
from gputop.recording.trainers import (
    ATTACH_TICK,
    GROUP_TICK,
    attach_record,
    step_runs,
)
from gputop.recording.values import READ_ERRORS, reason
from gputop.sources.attach import WINDOW

TOP_PROCESSES = 5  # by CPU and by RSS, beside the processes that always matter
ADVICE_REFRESH_S = 60.0  # a shown advice's changed numbers are stored at most this often
TEXT_CACHE = 4096  # ids of recent texts and process identities kept in memory
WAL_LIMIT_BYTES = 4 << 20  # the write-ahead log is cut back to this after a checkpoint
MEASURED = re.compile(r"\d+\.\d+")  # advice quotes measurements with decimals
COMMAND_CHARS = 512  # of a command line stored: more than a screen's COMMAND column shows


class RecordError(Exception):
    """A file that cannot be recorded to; one line saying why."""


def refuse_directory(path: str) -> None:
    """A directory can never be a recording: said before anything else is checked or made."""
    if os.path.isdir(path):
        raise RecordError(f"cannot record to {path}: it is a directory")


def open_record(path: str, mode: int = PRIVATE) -> sqlite3.Connection:
    """`path` as a new recording (made with `mode`), or one of ours to append to; anything
    else is refused, and what gputop made for it is removed again."""
    refuse_directory(path)
    made: list[tuple[str, os.stat_result]] = []
    try:
        db = _connect(path, mode, made)
    except (WriteRefused, *READ_ERRORS) as exc:
        _remove(made)
        raise RecordError(f"cannot record to {path}: {reason(exc)}") from None
    try:
        _prepare(db, path)
    except (RecordError, *READ_ERRORS) as exc:
        db.close()
        _remove(made)
        if isinstance(exc, RecordError):
            raise
        raise RecordError(f"cannot record to {path}: {reason(exc)}") from None
    _remove([(side, info) for side, info in made if side.endswith("-journal")])
    return db


def _connect(path: str, mode: int, made: list[tuple[str, os.stat_result]]
             ) -> sqlite3.Connection:
    """SQLite on `path` once it, the files SQLite keeps beside it and its directory are
    safely ours; what gputop created goes into `made`."""
    os.close(open_directory_of(path))
    fd, created = open_or_create(path, os.O_RDWR, mode)
    try:
        pinned = os.fstat(fd)
        if created:
            made.append((path, pinned))
        for suffix in SIDE_FILES if created else SIDE_FILES[:2]:
            _claim_side_file(path + suffix, mode, made)
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        if not same_file(os.stat(path, follow_symlinks=False), pinned):
            db.close()
            raise WriteRefused("it was replaced while gputop opened it")
        return db
    finally:
        os.close(fd)


def _claim_side_file(side: str, mode: int, made: list[tuple[str, os.stat_result]]) -> None:
    """Make SQLite's file `side` now (so nobody can plant one), or check it is ours."""
    try:
        try:
            fd = create_new(side, os.O_RDWR, mode)
            made.append((side, os.fstat(fd)))
        except FileExistsError:
            fd = open_own(side, os.O_RDONLY)
    except WriteRefused as exc:
        raise WriteRefused(f"{side}: {exc}") from None
    os.close(fd)


def _remove(made: list[tuple[str, os.stat_result]]) -> None:
    """Remove the files gputop made, where each is still the file it made."""
    for path, info in made:
        with contextlib.suppress(OSError):
            if same_file(os.stat(path, follow_symlinks=False), info):
                os.unlink(path)


def _prepare(db: sqlite3.Connection, path: str) -> None:
    """WAL, the schema (new file) or a check that the file is a recording of this schema."""
    tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    if tables and db.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
        raise RecordError(f"{path} is a SQLite file but not a gputop recording; not touching it")
    if db.execute("PRAGMA journal_mode=WAL").fetchone()[0] != "wal":
        raise RecordError(f"cannot record to {path}: SQLite refused write-ahead logging there")
    db.execute("PRAGMA synchronous=NORMAL")  # a crash keeps every commit; power loss the last few
    db.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
    db.execute("PRAGMA busy_timeout=200")
    if tables:
        row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if row is None or row[0] != SCHEMA:
            found = row[0] if row else "none"
            raise RecordError(f"{path} is a recording of schema {found}, not {SCHEMA}")
        other_layout = layout_refusal(db, path)
        if other_layout is not None:
            raise RecordError(f"{other_layout}; record to a new file")
        foreign = _foreign_objects(db)
        if foreign:
            raise RecordError(f"{path} holds {printable(', '.join(foreign))}, which gputop did "
                              "not create; not recording to it")
        damaged = contents_refusal(db)  # what is appended to is read back by every reader
        if damaged is not None:
            raise RecordError(f"cannot record to {path}: {damaged}")
        return
    db.executescript(f"BEGIN; {TABLES}; PRAGMA application_id={APPLICATION_ID}; "
                     f"PRAGMA user_version={USER_VERSION};")  # left open: meta joins it
    db.executemany("INSERT INTO meta VALUES (?, ?)", [
        ("schema", SCHEMA), ("gputop_version", __version__),
        ("top_processes", str(TOP_PROCESSES)), ("step_window", str(WINDOW)),
        ("detail_every", str(DETAIL_EVERY))])
    db.execute("COMMIT")


def _foreign_objects(db: sqlite3.Connection) -> list[str]:
    """The triggers, views, tables and indexes in the file that gputop's schema lacks."""
    found = set(db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master "
                           "WHERE name NOT LIKE 'sqlite_stat%'"))
    return sorted(f"{kind} {name}" for kind, name, _, _ in found - _own_schema())


@functools.cache
def _own_schema() -> frozenset[tuple[str, str, str, str | None]]:
    """sqlite_master of a recording gputop has just made."""
    with contextlib.closing(sqlite3.connect(":memory:")) as db:
        db.executescript(TABLES)
        return frozenset(db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))


def processes_that_matter(frame: Frame, top: int = TOP_PROCESSES) -> list[ProcessSample]:
    """Trainers, workers, launchers, probed and GPU processes (and those outside /proc), the
    attached trainers, every process a trainer group names (a worker its group lists before
    its row says so), and the `top` busiest by CPU and largest by RSS; in the frame's order."""
    attached = {a.pid for a in frame.attached}
    keep = {p.pid for p in frame.processes
            if p.role != "other" or p.has_probe or p.gpu_memory_bytes is not None
            or p.gpu_indices or not p.in_proc or p.pid in attached}
    for group in frame.trainers:
        keep.update((group.pid, *group.worker_pids))
        if group.launcher_pid is not None:
            keep.add(group.launcher_pid)
    busy = [p for p in frame.processes if (p.cpu_percent or 0.0) >= 0.05]  # not idle ties
    keep.update(p.pid for p in heapq.nlargest(top, busy, key=_cpu))
    keep.update(p.pid for p in heapq.nlargest(top, frame.processes, key=_rss))
    return [p for p in frame.processes if p.pid in keep]


def _cpu(p: ProcessSample) -> float:
    return p.cpu_percent or 0.0


def _rss(p: ProcessSample) -> int:
    return p.rss_bytes or 0


@dataclass
class _TrainerLog:
    """What the file holds of one attached trainer: its id, newest step, dropped records, and
    its `trainer_changes` in effect (dropped records, settings, error)."""

    id: int
    last_step: int | None = None
    dropped: int = 0
    change: tuple[int, int | None, int | None] | None = None


class _Pending:
    """A cache whose additions count only once the transaction that made them commits."""

    def __init__(self, limit: int | None = None) -> None:
        self.saved: dict[Any, Any] = {}
        self.new: dict[Any, Any] = {}
        self.limit = limit

    def get(self, key: Any) -> Any:
        found = self.new.get(key)
        return self.saved.get(key) if found is None else found

    def put(self, key: Any, value: Any) -> None:
        self.new[key] = value

    def commit(self) -> None:
        if self.limit is not None and len(self.saved) + len(self.new) > self.limit:
            self.saved.clear()
        self.saved.update(self.new)
        self.new.clear()

    def discard(self) -> None:
        self.new.clear()


class RecordWriter:
    """Turns each Frame into rows, remembering what the file already holds between ticks."""

    def __init__(self, db: sqlite3.Connection, top: int = TOP_PROCESSES) -> None:
        self.db = db
        self.top = top
        self._texts = _Pending(TEXT_CACHE)
        self._process_ids = _Pending(TEXT_CACHE)
        self._gpu_info = _Pending()  # device index -> the info id `gpu_info` last stored
        self._details = _Pending()  # "devices" -> the device indices `gpu_details` last held
        self._trainers = _Pending()  # pid -> _TrainerLog (replaced, never mutated)
        self._group_changes = _Pending(TEXT_CACHE)  # pid -> its `group_changes` in effect
        self._advice: dict[str, tuple[Advice, float]] = {}  # shown, as stored at that time
        last = db.execute("SELECT max(id) FROM frames").fetchone()[0]
        self.frame_id = last or 0
        self.frames_written = 0
        self.steps_written = 0
        if last is not None:
            self._advice = _advice_shown(db, last)
        self._advice_next = self._advice

    def write(self, frame: Frame) -> int:
        """Store `frame` in one transaction; its frame id. On an error nothing is stored."""
        fid = self.frame_id + 1
        self.db.execute("BEGIN")
        try:
            steps = self._rows(frame, fid)
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            for cache in self._caches():
                cache.discard()
            raise
        for cache in self._caches():
            cache.commit()
        self._advice = self._advice_next
        self.frame_id = fid
        self.frames_written += 1
        self.steps_written += steps
        return fid

    def _caches(self) -> tuple[_Pending, ...]:
        return (self._texts, self._process_ids, self._trainers, self._gpu_info, self._details,
                self._group_changes)

    def _rows(self, frame: Frame, fid: int) -> int:
        host = frame.host
        gpu = frame.gpu
        per_cpu, per_cpu_classes = pack_cores(host.per_cpu_percent)
        self.db.execute("INSERT INTO frames VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", (
            fid, frame.time, round(frame.interval_s * 1000), round(frame.sample_cost_s * 1e6),
            self._text({"hostname": host.hostname, "cpu_count": host.cpu_count,
                        "memory_total_bytes": host.memory_total_bytes,
                        "swap_total_bytes": host.swap_total_bytes}),
            self._text({"source": gpu.source, "note": gpu.note,
                        "driver_version": gpu.driver_version, "scenario": gpu.scenario}),
            scaled_whole(host.cpu_percent, 10), per_cpu,
            host.memory_available_bytes, host.swap_used_bytes,
            # uptime cut down to the second, never rounded up: the screen cuts it to the minute
            *(scaled(v, 100) for v in host.load_average), int(host.uptime_s),
            len(frame.processes), self._errors(frame), per_cpu_classes))
        self._gpus(fid, gpu.gpus)
        on_gpus = [(g.index, i, p.pid, in_units(p.memory_used_bytes, MIB),
                    scaled(p.sm_util_percent, 10))
                   for g in gpu.gpus for i, p in enumerate(g.processes)]
        if on_gpus:
            self.db.execute("INSERT INTO gpu_process_ticks VALUES (?, ?)",
                            (fid, GPU_PROCESS_TICK.pack(on_gpus)))
        kept = [self._process_record(p) for p in processes_that_matter(frame, self.top)]
        if kept:
            self.db.execute("INSERT INTO process_ticks VALUES (?, ?)",
                            (fid, PROCESS_TICK.pack(kept)))
        self._groups(fid, frame.trainers)
        if frame.memory_bandwidth is not None:
            self._membw(fid, frame.memory_bandwidth)
        attached = [self._attached(fid, state) for state in frame.attached]
        if attached:
            self.db.execute("INSERT INTO attach_ticks VALUES (?, ?)",
                            (fid, ATTACH_TICK.pack(record for record, _ in attached)))
        steps = sum(stored for _, stored in attached)
        self._advice_next = self._advice_changes(fid, frame.time, frame.advice)
        return steps

    def _text(self, value: object) -> int | None:
        """The id of `value` as JSON in `texts`, stored on first use."""
        if value is None:
            return None
        text = _json(value)
        found: int | None = self._texts.get(text)
        if found is None:
            key = text_hash(text)
            row = self.db.execute("SELECT id FROM texts WHERE hash = ? AND text = ?",
                                  (key, text)).fetchone()
            found = row[0] if row else self.db.execute(
                "INSERT INTO texts (hash, text) VALUES (?, ?) RETURNING id",
                (key, text)).fetchone()[0]
            self._texts.put(text, found)
        return found

    def _errors(self, frame: Frame) -> int | None:
        if not frame.errors:
            return None
        return self._text([[e.source, e.message, e.failures, round(e.retry_in_s),
                            e.last_good, e.stopped] for e in frame.errors])

    def _gpus(self, fid: int, gpus: Iterable[GpuSample]) -> None:
        """The tick's GPU numbers as one `gpu_ticks` row, those no pane draws a `gpu_details`
        row every DETAIL_EVERY ticks (and when the devices change); a device's name, limits
        and state a `gpu_info` row when they change."""
        ticks, details = [], []
        for g in gpus:
            info_id = self._text({"name": g.name, "uuid": g.uuid,
                                  "memory_total_bytes": g.memory_total_bytes,
                                  "power_limit_w": g.power_limit_w, "lost": g.lost,
                                  "processes_known": g.processes_known})
            if self._gpu_info.get(g.index) != info_id:
                self.db.execute("INSERT INTO gpu_info VALUES (?, ?, ?)", (g.index, fid, info_id))
                self._gpu_info.put(g.index, info_id)
            ticks.append((
                g.index, scaled(g.util_percent, 1), in_units(g.memory_used_bytes, MIB),
                scaled(g.temperature_c, 1), scaled_whole(g.power_w, 10),
                in_units(g.pcie_rx_bytes_per_s, KIB), in_units(g.pcie_tx_bytes_per_s, KIB)))
            details.append((
                g.index, scaled(g.memory_util_percent, 1), g.sm_clock_mhz, g.memory_clock_mhz,
                scaled(g.sm_occupancy_percent, 10), scaled(g.tensor_active_percent, 10)))
        if not ticks:
            return
        self.db.execute("INSERT INTO gpu_ticks VALUES (?, ?)", (fid, GPU_TICK.pack(ticks)))
        indices = tuple(d[0] for d in details)
        if fid % DETAIL_EVERY == 0 or self._details.get("devices") != indices:
            self.db.execute("INSERT INTO gpu_details VALUES (?, ?)",
                            (fid, GPU_DETAIL.pack(details)))
            self._details.put("devices", indices)

    def _process_record(self, p: ProcessSample) -> tuple[int | None, ...]:
        """The tick's numbers of `p` (PROCESS_TICK); who the process is (and its role) is a
        `process_info` row, a new one whenever any of that changes, its command line a text
        stored once. Its GPU memory and devices are the tick's GPU processes' records."""
        key = (p.pid, p.start_ticks, p.ppid, p.name, p.username, p.cmdline, p.role,
               p.trainer_pid, p.has_probe, p.in_proc, p.container, p.container_pod,
               p.container_pid)
        info_id: int | None = self._process_ids.get(key)
        if info_id is None:
            info_id = self.db.execute(
                "INSERT INTO process_info (pid, start_ticks, ppid, name, username, cmdline_id, "
                "role, trainer_pid, has_probe, in_proc, container, container_pod, container_pid) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) RETURNING id",
                (p.pid, p.start_ticks, p.ppid, p.name, p.username,
                 self._text(_command_shown(p.cmdline)),
                 None if p.role == "other" else p.role, p.trainer_pid, p.has_probe,
                 p.in_proc, p.container, p.container_pod, p.container_pid)).fetchone()[0]
            self._process_ids.put(key, info_id)
        state = ord(p.state) if len(p.state) == 1 and ord(p.state) < 255 else None
        return (info_id, state, p.num_threads, scaled(p.cpu_percent, 10),
                in_units(p.rss_bytes, KIB), scaled(p.cpu_time_s, 100))

    def _groups(self, fid: int, groups: Iterable[TrainerGroup]) -> None:
        """The tick's trainer groups as one `group_ticks` row (each PID once); a group's
        workers, pin-memory thread and launcher a `group_changes` row when they change."""
        records: dict[int, tuple[int | None, ...]] = {}
        for group in groups:
            if group.pid in records:
                continue
            change = (self._text(list(group.worker_pids)), int(group.pin_memory_thread),
                      group.launcher_pid)
            if self._group_changes.get(group.pid) != change:
                self.db.execute("INSERT INTO group_changes VALUES (?,?,?,?,?)",
                                (group.pid, fid, *change))
                self._group_changes.put(group.pid, change)
            records[group.pid] = (group.pid, scaled_whole(group.workers_cpu_percent, 10),
                                  group.num_threads_total)
        if records:
            self.db.execute("INSERT INTO group_ticks VALUES (?, ?)",
                            (fid, GROUP_TICK.pack(records.values())))

    def _membw(self, fid: int, m: MemoryBandwidthSample) -> None:
        check = m.layout_check
        info = {"source": m.source, "confidence": m.confidence, "note": m.note,
                "expected_peak_bytes_per_s": m.expected_peak_bytes_per_s, "layout": m.layout,
                "measured_peak_bytes_per_s": m.measured_peak_bytes_per_s,
                "relative_to": m.relative_to,
                "layout_check": None if check is None else {
                    "verdict": check.verdict, "source": check.source,
                    "channels_populated": check.channels_populated,
                    "channels_total": check.channels_total, "findings": list(check.findings),
                    "fill_slots": list(check.fill_slots), "slow_slots": list(check.slow_slots),
                    "usual_module": check.usual_module, "reason": check.reason}}
        self.db.execute("INSERT INTO memory_bandwidth VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", (
            fid, self._text(info), scaled(m.read_bytes_per_s, 1), scaled(m.write_bytes_per_s, 1),
            scaled(m.total_bytes_per_s, 1), scaled(m.peak_bytes_per_s, 1),
            scaled(m.pressure, 1000), scaled(m.psi_some_avg10, 100),
            scaled(m.psi_full_avg10, 100), scaled(m.swap_in_per_s, 10),
            scaled(m.major_faults_per_s, 10), scaled(m.canary_bytes_per_s, 1)))
        self.db.executemany("INSERT INTO memory_consumers VALUES (?,?,?,?,?)", [
            (fid, i, c.pid, c.name, scaled(c.bytes_per_s, 1))
            for i, c in enumerate(m.top_consumers)])

    def _attached(self, fid: int, state: AttachState) -> tuple[tuple[int | None, ...], int]:
        """The trainer's ATTACH_TICK record this tick, having stored its steps not stored yet
        (with any gap) and its `trainer_changes` row if they changed; and how many steps."""
        log: _TrainerLog | None = self._trainers.get(state.pid)
        newest = state.steps[-1].step if state.steps else None
        if log is None or (newest is not None and log.last_step is not None
                           and newest < log.last_step):  # a new ring under a reused PID
            tid = self.db.execute("INSERT INTO trainers (pid, first_frame) VALUES (?, ?) "
                                  "RETURNING id", (state.pid, fid)).fetchone()[0]
            log = _TrainerLog(tid)
        new = [s for s in state.steps if log.last_step is None or s.step > log.last_step]
        self._gaps(fid, log, state, new)
        self.db.executemany("INSERT INTO step_ticks VALUES (?,?,?,?,?,?,?)",
                            [run.row(log.id, fid) for run in step_runs(new, self._text)])
        change = (state.dropped_records, self._text(_config(state.config) | {"job": state.job}),
                  self._text(state.error))
        if change != log.change:
            self.db.execute("INSERT INTO trainer_changes VALUES (?,?,?,?,?)",
                            (log.id, fid, *change))
        last = new[-1].step if new else log.last_step
        self._trainers.put(state.pid, _TrainerLog(log.id, last, state.dropped_records, change))
        record = attach_record(log.id, state.state, state.alive, scaled(state.idle_s, 1000),
                               state.steps)
        return record, len(new)

    def _gaps(self, fid: int, log: _TrainerLog, state: AttachState,
              new: list[StepRecord]) -> None:
        """A row for each run of step numbers the file will not hold, saying why."""
        dropped = max(0, state.dropped_records - log.dropped)
        rows: list[tuple[object, ...]] = []
        previous = log.last_step
        for step in new:
            expected = 0 if previous is None else previous + 1
            if step.step > expected:
                rows.append((log.id, fid, previous, step.step, step.step - expected, dropped,
                             _gap_reason(previous, dropped, len(state.steps))))
                dropped = 0
            previous = step.step
        if dropped:  # records lost with no hole in the step numbers we saw
            rows.append((log.id, fid, previous, None, None, dropped,
                         "the ring overwrote records before they were read"))
        self.db.executemany("INSERT INTO gaps VALUES (?,?,?,?,?,?,?)", rows)

    def _advice_changes(self, fid: int, now_s: float,
                        advice: Iterable[Advice]) -> dict[str, tuple[Advice, float]]:
        """A row for each piece of advice that appeared or went away, or whose severity,
        title or action changed; changed numbers alone (the evidence, the measurements an
        action quotes) at most every ADVICE_REFRESH_S."""
        shown = dict(self._advice)
        now = {a.id: a for a in advice}
        rows: list[tuple[object, ...]] = []
        for key, item in now.items():
            before, at = shown.get(key, (None, 0.0))
            if before == item or (before is not None and now_s - at < ADVICE_REFRESH_S
                                  and _wording(before) == _wording(item)):
                continue
            rows.append((fid, key, 1, item.severity, item.title, item.evidence, item.action))
            shown[key] = (item, now_s)
        for key in [key for key in shown if key not in now]:
            rows.append((fid, key, 0, None, None, None, None))
            del shown[key]
        self.db.executemany("INSERT INTO advice VALUES (?,?,?,?,?,?,?)", rows)
        return shown


def _command_shown(cmdline: tuple[str, ...]) -> list[str]:
    """The command line's words, secrets masked, up to COMMAND_CHARS characters joined, the
    word that crosses it cut and ended with an ellipsis (a browser's or a launcher's run to
    kilobytes, each new process a new line in `texts`)."""
    kept: list[str] = []
    room = COMMAND_CHARS
    for word in mask_secrets(cmdline):
        if len(word) > room:
            kept.append(word[:room] + "…")
            break
        kept.append(word)
        room -= len(word) + 1
    return kept


def note_trainers_of(db: sqlite3.Connection, label: str) -> None:
    """Say in `meta` whose trainers the file holds (`user:NAME` or `all-users`); a file
    appended to under another choice says each, in order ("user:a, then all-users")."""
    row = db.execute("SELECT value FROM meta WHERE key = 'trainers_of'").fetchone()
    if row is not None and str(row[0]).rsplit(", then ", 1)[-1] == label:
        return
    value = label if row is None else f"{row[0]}, then {label}"
    db.execute("INSERT OR REPLACE INTO meta VALUES ('trainers_of', ?)", (value,))


def _wording(item: Advice) -> tuple[str, str, str]:
    """What an advice says, its measurements aside: severity, title and action with each
    decimal number (a measured time, a ratio) blanked; integers (GPU indices, the
    num_workers it recommends) are what it says."""
    return (item.severity, MEASURED.sub("#", item.title), MEASURED.sub("#", item.action))


def _gap_reason(previous: int | None, dropped: int, window_steps: int) -> str:
    if previous is None:
        return "closed before the recording attached"
    if dropped:
        return "the ring overwrote records before they were read"
    if window_steps >= WINDOW:
        return f"more steps closed in one tick than the {WINDOW}-step window holds"
    return "not training steps (another loader's batches) or never published"


def _config(c: Any) -> dict[str, Any]:
    """A TrainerConfig by its field names (extra as pairs: the probe's argv and annotate()
    facts, secrets masked)."""
    return {"num_workers": c.num_workers, "pin_memory": c.pin_memory,
            "batch_size": c.batch_size, "prefetch_factor": c.prefetch_factor,
            "persistent_workers": c.persistent_workers, "num_threads": c.num_threads,
            "device": c.device, "rank": c.rank, "world_size": c.world_size,
            "extra": [[key, mask_fact(str(key), value)] for key, value in c.extra]}


def _advice_shown(db: sqlite3.Connection, fid: int) -> dict[str, tuple[Advice, float]]:
    """The advice shown at frame `fid` of an existing file, with when each was stored (to
    append transitions to it)."""
    rows = db.execute(
        "SELECT a.id, a.shown, a.severity, a.title, a.evidence, a.action, f.time FROM advice a "
        "JOIN frames f ON f.id = a.frame WHERE a.frame = "
        "(SELECT max(frame) FROM advice b WHERE b.id = a.id AND b.frame <= ?)", (fid,)).fetchall()
    return {r[0]: (Advice(r[0], r[2], r[3], r[4], r[5]), r[6]) for r in rows if r[1]}


def _json(value: object) -> str:
    """Compact JSON; NaN and infinities become null (JSON has no spelling for them)."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(_finite(value), separators=(",", ":"))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value
