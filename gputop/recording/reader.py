"""The one reader of a `gputop.record/1` recording: the replay, the report and the Chrome
trace read a file only through `Recording`, whose typed methods hold every query of it.

Each method returns the rows of gputop/recording/rows.py, every value checked against its
field's type and every string printable (gputop/recording/values.py); the BLOBs decoded
(gputop/recording/schema.py, trainers.py). Read inside `reading()`: what a damaged or
hostile file raises meanwhile is one line, `UnreadableRecording`.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TypeVar

from gputop.core.model import Advice, Severity
from gputop.recording.rows import (
    UNKNOWN_PROCESS,
    AdviceChange,
    AttachedRow,
    ConfigChange,
    ConsumerRow,
    GapRow,
    GpuInfoChange,
    GpuProcessRow,
    GroupRow,
    GroupTick,
    Identity,
    MemoryBandwidthRow,
    MemoryBandwidthTick,
    ProcessNumbers,
    StepRow,
    Tick,
    TickSummary,
    TrainerRow,
)
from gputop.recording.schema import GPU_PROCESS_TICK, PROCESS_TICK, gpu_values, open_read_only
from gputop.recording.trainers import (
    ATTACH_TICK,
    GROUP_TICK,
    RUN_STEPS,
    STEP_SITES,
    attach_state,
    run_steps,
)
from gputop.recording.values import Texts, checked, checked_rows, conforming, refusing, typed_rows

_Row = TypeVar("_Row", bound=tuple[Any, ...])
UNBOUNDED = (-(1 << 62), 1 << 62)  # the ticks or steps read when no first or last is given
RUN_HINTS = (int, int, int | None, int, int | None, bytes)  # a `step_ticks` row as read
_SITE_COLUMNS = tuple(StepRow._fields.index(name) for name in STEP_SITES)
Devices = list[dict[str, int | None]]  # a tick's GPUs, as gputop.recording.schema.gpu_values


class UnreadableRecording(Exception):
    """A file that cannot be read as a recording; one line saying why."""


class Recording:
    """A recording opened read-only (a recorder may still be appending to it), read by one
    thread at a time."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._db = open_read_only(path, UnreadableRecording)
        self.texts = Texts(self._db)
        self._identities: dict[int, Identity] = {}  # process_info rows never change
        self._trainer_pids: dict[int, int] = {}

    def close(self) -> None:
        """Release the file."""
        self._db.close()

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Hold the file for one reader; what a damaged or hostile file raises meanwhile comes
        out as one line (UnreadableRecording)."""
        with self._lock, refusing(self.path, UnreadableRecording):
            yield

    # ---- ticks ---------------------------------------------------------------------------

    def meta(self) -> dict[str, str | None]:
        """The `meta` table: schema, gputop version, settings the recorder ran with."""
        return dict(checked_rows(self._db.execute("SELECT key, value FROM meta"),
                                 (str, str | None), "meta"))

    def ticks(self, after: int = 0, count: int | None = None) -> list[TickSummary]:
        """The ticks stored after tick `after`, oldest first (the first `count` of them)."""
        return self._rows(TickSummary, "frames", "FROM frames WHERE id > ? ORDER BY id LIMIT ?",
                          after, -1 if count is None else count)

    def tick(self, fid: int) -> Tick | None:
        """Tick `fid`'s host numbers (None: not stored, or trimmed)."""
        return self._row(Tick, "frames", "FROM frames WHERE id = ?", fid)

    # ---- GPUs ----------------------------------------------------------------------------

    def gpu_devices(self, fid: int) -> Devices:
        """Tick `fid`'s devices with the details stored last by then."""
        row = self._db.execute("SELECT devices FROM gpu_ticks WHERE frame = ?", (fid,)).fetchone()
        if row is None:
            return []
        details = self._db.execute(
            "SELECT devices FROM gpu_details WHERE frame <= ? ORDER BY frame DESC LIMIT 1",
            (fid,)).fetchone()
        return gpu_values(conforming(row[0], bytes, "gpu_ticks.devices"),
                          conforming(details[0], bytes, "gpu_details.devices") if details
                          else None)

    def gpu_series(self, first: int | None = None, last: int | None = None
                   ) -> list[tuple[int, Devices]]:
        """(tick, its devices without the details) of the ticks from `first` to `last`."""
        return [(fid, gpu_values(devices)) for fid, devices in checked_rows(self._db.execute(
            "SELECT frame, devices FROM gpu_ticks WHERE frame BETWEEN ? AND ? ORDER BY frame",
            _between(first, last)), (int, bytes), "gpu_ticks")]

    def gpu_info_changes(self, last: int | None = None) -> list[GpuInfoChange]:
        """Each device's name and limits (a `texts` id) as they changed up to tick `last`."""
        return self._rows(GpuInfoChange, "gpu_info", "FROM gpu_info WHERE frame <= ? ORDER BY "
                          "frame", UNBOUNDED[1] if last is None else last)

    def gpu_info_id(self, gpu: int, fid: int) -> int | None:
        """The `texts` id of device `gpu`'s name and limits at tick `fid`."""
        row = self._db.execute("SELECT info_id FROM gpu_info WHERE gpu = ? AND frame <= ? "
                               "ORDER BY frame DESC LIMIT 1", (gpu, fid)).fetchone()
        return None if row is None else checked(row, (int,), "gpu_info")[0]

    def gpu_processes(self, fid: int) -> list[GpuProcessRow]:
        """Tick `fid`'s GPU compute processes, by device and position."""
        row = self._db.execute("SELECT processes FROM gpu_process_ticks WHERE frame = ?",
                               (fid,)).fetchone()
        return typed_rows(((gpu, pid, mib, sm_x10) for gpu, _, pid, mib, sm_x10
                           in GPU_PROCESS_TICK.unpack(row[0] if row else b"")),
                          GpuProcessRow, "gpu_processes")

    # ---- processes -----------------------------------------------------------------------

    def process_numbers(self, fid: int) -> list[ProcessNumbers]:
        """Each process kept at tick `fid`, in the sampler's order, with its numbers then."""
        row = self._db.execute("SELECT processes FROM process_ticks WHERE frame = ?",
                               (fid,)).fetchone()
        blob = conforming(row[0], bytes, "process_ticks.processes") if row else b""
        return typed_rows(((process, None if state is None else chr(state), *numbers)
                           for process, state, *numbers in PROCESS_TICK.unpack(blob)),
                          ProcessNumbers, "process_ticks")

    def identity(self, process: int) -> Identity:
        """Who `process` (a `process_info` id) is."""
        found = self._identities.get(process)
        if found is None:
            found = self._identities[process] = self._row(
                Identity, "process_info", "FROM process_info WHERE id = ?",
                process) or UNKNOWN_PROCESS
        return found

    def command_line(self, pid: int) -> str | None:
        """The command line the recording last kept for `pid` (its name where that is empty;
        None: it kept none)."""
        row = self._db.execute("SELECT i.cmdline_id, i.name FROM process_info i JOIN texts t ON "
                               "t.id = i.cmdline_id WHERE i.pid = ? ORDER BY i.id DESC LIMIT 1",
                               (pid,)).fetchone()
        if row is None:
            return None
        words = self.texts(row[0], tuple[str, ...])
        return " ".join(words) if words else conforming(row[1], str, "process_info.name")

    # ---- host memory ---------------------------------------------------------------------

    def memory_bandwidth(self, fid: int) -> MemoryBandwidthRow | None:
        """Tick `fid`'s memory-bandwidth numbers (None: not measured)."""
        return self._row(MemoryBandwidthRow, "memory_bandwidth",
                         "FROM memory_bandwidth WHERE frame = ?", fid)

    def memory_consumers(self, fid: int) -> list[ConsumerRow]:
        """Tick `fid`'s top memory-bandwidth consumers, in order."""
        return self._rows(ConsumerRow, "memory_consumers",
                          "FROM memory_consumers WHERE frame = ? ORDER BY position", fid)

    def memory_bandwidth_series(self) -> list[MemoryBandwidthTick]:
        """Every measured tick's memory-bandwidth pressure and PSI."""
        return self._rows(MemoryBandwidthTick, "memory_bandwidth",
                          "FROM memory_bandwidth ORDER BY frame")

    def pressures(self, first: int, last: int) -> list[float | None]:
        """`pressure_x1000` of each tick from `first` to `last` (None: not measured)."""
        return [value for (value,) in checked_rows(self._db.execute(
            "SELECT m.pressure_x1000 FROM frames f LEFT JOIN memory_bandwidth m "
            "ON m.frame = f.id WHERE f.id BETWEEN ? AND ? ORDER BY f.id", (first, last)),
            (float | None,), "memory_bandwidth")]

    # ---- trainers ------------------------------------------------------------------------

    def groups(self, fid: int) -> list[GroupRow]:
        """Tick `fid`'s trainer groups, in the order stored, with their workers then."""
        row = self._db.execute("SELECT groups FROM group_ticks WHERE frame = ?", (fid,)).fetchone()
        out = []
        for pid, cpu_x10, threads in GROUP_TICK.unpack(row[0] if row else b""):
            change = self._db.execute(
                "SELECT workers_id, pin_memory_thread, launcher_pid FROM group_changes WHERE "
                "pid = ? AND frame <= ? ORDER BY frame DESC LIMIT 1", (pid, fid)).fetchone()
            workers_id, pin, launcher = change or (None, 0, None)
            out.append((pid, workers_id, cpu_x10, threads, pin, launcher))
        return typed_rows(out, GroupRow, "trainer_groups")

    def group_series(self) -> list[GroupTick]:
        """Every stored tick's trainer groups."""
        changes: dict[int, tuple[list[int], list[int | None]]] = {}
        for pid, fid, workers_id in checked_rows(self._db.execute(
                "SELECT pid, frame, workers_id FROM group_changes ORDER BY pid, frame"),
                (int, int, int | None), "group_changes"):
            frames, ids = changes.setdefault(pid, ([], []))
            frames.append(fid)
            ids.append(workers_id)
        out = []
        for fid, blob in checked_rows(self._db.execute(
                "SELECT frame, groups FROM group_ticks ORDER BY frame"), (int, bytes),
                "group_ticks"):
            for pid, cpu_x10, _threads in GROUP_TICK.unpack(blob):
                frames, ids = changes.get(pid or 0, ([], []))
                at = bisect.bisect_right(frames, fid) - 1
                out.append((fid, pid, cpu_x10, ids[at] if at >= 0 else None))
        return typed_rows(out, GroupTick, "trainer_groups")

    def launcher_of(self, pid: int) -> int | None:
        """The launcher the newest tick that knew one gave trainer `pid`."""
        row = self._db.execute("SELECT launcher_pid FROM group_changes WHERE pid = ? AND "
                               "launcher_pid IS NOT NULL ORDER BY frame DESC LIMIT 1",
                               (pid,)).fetchone()
        return None if row is None else checked(row, (int,), "group_changes")[0]

    def trainers(self) -> list[TrainerRow]:
        """The trainers the recording attached to, in the order it did."""
        return self._rows(TrainerRow, "trainers", "FROM trainers ORDER BY id")

    def trainer_pid(self, trainer: int) -> int:
        """The PID of `trainer` (a `trainers` id; 0 where the file lacks it)."""
        found = self._trainer_pids.get(trainer)
        if found is None:
            row = self._db.execute("SELECT pid FROM trainers WHERE id = ?", (trainer,)).fetchone()
            found = self._trainer_pids[trainer] = checked(row, (int,), "trainers")[0] if (
                row) else 0
        return found

    def attached(self, fid: int) -> list[AttachedRow]:
        """The trainers attached at tick `fid`, in screen order, with what they had then."""
        row = self._db.execute("SELECT trainers FROM attach_ticks WHERE frame = ?",
                               (fid,)).fetchone()
        out = []
        for trainer, code, idle_ms, first, last in ATTACH_TICK.unpack(row[0] if row else b""):
            change = self._db.execute(
                "SELECT dropped_records, config_id, error_id FROM trainer_changes WHERE "
                "trainer = ? AND frame <= ? ORDER BY frame DESC LIMIT 1", (trainer, fid)
            ).fetchone()
            dropped, config_id, error_id = change or (0, None, None)
            state, alive = attach_state(code)
            out.append((trainer, state, idle_ms, alive, dropped, first, last, config_id,
                        error_id))
        return typed_rows(out, AttachedRow, "trainer_ticks")

    def steps(self, trainer: int, first: int | None = None,
              last: int | None = None) -> list[StepRow]:
        """The stored steps of `trainer` in step order (those from `first` to `last`)."""
        low, high = _between(first, last)
        runs = checked_rows(self._db.execute(
            "SELECT first_step, frame, end_ns, epoch, batch_size, steps FROM step_ticks "
            "WHERE trainer = ? AND first_step BETWEEN ? AND ? ORDER BY first_step",
            (trainer, low - RUN_STEPS + 1, high)), RUN_HINTS, "step_ticks")
        return typed_rows((self._sites_named(step) for run in runs for step in run_steps(*run)
                           if low <= step[0] <= high), StepRow, "step_ticks")

    def _sites_named(self, step: tuple[Any, ...]) -> tuple[Any, ...]:
        """A stored step with its sampled sites' `texts` ids as their text."""
        values = list(step)
        for at in _SITE_COLUMNS:
            values[at] = self.texts(values[at], str)
        return tuple(values)

    def config_changes(self, trainer: int) -> list[ConfigChange]:
        """`trainer`'s settings as they changed, oldest first."""
        return self._rows(ConfigChange, "trainer_changes",
                          "FROM trainer_changes WHERE trainer = ? ORDER BY frame", trainer)

    def gaps(self, trainer: int) -> list[GapRow]:
        """The runs of `trainer`'s steps the file does not hold, oldest first."""
        return self._rows(GapRow, "gaps", "FROM gaps WHERE trainer = ? ORDER BY frame", trainer)

    # ---- advice --------------------------------------------------------------------------

    def advice_shown(self, fid: int) -> list[Advice]:
        """The advice shown at tick `fid`, as it read then."""
        shown = []
        for (key,) in self._db.execute("SELECT DISTINCT id FROM advice").fetchall():
            row = self._db.execute(
                "SELECT shown, severity, title, evidence, action FROM advice WHERE id = ? AND "
                "frame <= ? ORDER BY frame DESC LIMIT 1", (key, fid)).fetchone()
            if row is not None and conforming(row[0], bool, "advice.shown"):
                words = checked(row[1:], (Severity, str, str, str), "advice")
                shown.append(Advice(conforming(key, str, "advice.id"), *words))
        return shown

    def advice_changes(self) -> list[AdviceChange]:
        """Every piece of advice appearing, changing or going, oldest first."""
        return self._rows(AdviceChange, "advice", "FROM advice ORDER BY frame")

    # ---- the queries ---------------------------------------------------------------------

    def _rows(self, row: type[_Row], where: str, query: str, *args: object) -> list[_Row]:
        """`row`s selected (its fields, by name) `query` ("FROM ..."), checked."""
        return typed_rows(self._db.execute(
            f"SELECT {', '.join(row._fields)} {query}", args),  # type: ignore[attr-defined]
            row, where)

    def _row(self, row: type[_Row], where: str, query: str, *args: object) -> _Row | None:
        """The first of `_rows` (None: there is none)."""
        found = self._rows(row, where, f"{query} LIMIT 1", *args)
        return found[0] if found else None


def _between(first: int | None, last: int | None) -> tuple[int, int]:
    """(first, last), an end not given open."""
    return (UNBOUNDED[0] if first is None else first, UNBOUNDED[1] if last is None else last)
