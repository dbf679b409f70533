"""Records the sampler's Frames on a thread of its own: handing a frame over never blocks the
sampler (nor the UI), an error becomes one line in the next Frame, and a full disk stops the
recording, never the monitor. Retention (--max-size, --keep) trims the oldest ticks.
"""

from __future__ import annotations

import contextlib
import queue
import sqlite3
import threading
from dataclasses import dataclass

from gputop.core import debuglog
from gputop.core.model import Frame, SourceError
from gputop.core.safe_files import PRIVATE
from gputop.recording.schema import PER_FRAME_TABLES
from gputop.recording.writer import TOP_PROCESSES, RecordWriter, open_record

QUEUE_FRAMES = 32  # frames waiting for the disk before new ones are skipped
TRIM_EVERY = 60  # ticks between retention checks
TRIM_TO = 0.9  # a file over --max-size is cut to this share of it
CLOSE_WAIT_S = 10.0
TRANSIENT = ("locked", "busy")  # another connection holds the file: try the next tick


@dataclass(frozen=True)
class Retention:
    """How much to keep: at most `max_bytes` of data, ticks no older than `keep_s`."""

    max_bytes: int | None = None
    keep_s: float | None = None


class Recorder:
    """Writes each submitted Frame to `path` on its own thread (a FrameSink of the sampler)."""

    def __init__(self, path: str, retention: Retention | None = None,
                 top: int = TOP_PROCESSES, mode: int = PRIVATE) -> None:
        self.path = path
        self.retention = retention or Retention()
        self.db = open_record(path, mode)  # RecordError: bad input, before any thread starts
        self.writer = RecordWriter(self.db, top)
        self.skipped = 0
        self.failures = 0
        self.error: SourceError | None = None
        self.stopped = False
        self._last_time = float("-inf")
        self._queue: queue.Queue[Frame | None] = queue.Queue(maxsize=QUEUE_FRAMES)
        self._thread = threading.Thread(target=self._run, name="gputop-recorder", daemon=True)
        self._thread.start()

    def submit(self, frame: Frame) -> SourceError | None:
        """Queue `frame` for writing (never waits); the recorder's error to show, if any."""
        if self.stopped:
            return self.error
        try:
            self._queue.put_nowait(frame)
        except queue.Full:
            self.skipped += 1
            self.error = SourceError("record", f"{self.skipped} ticks not recorded: writing "
                                     f"{self.path} falls behind the ticks", self.skipped, 0.0,
                                     frame.time)
        return self.error

    def _run(self) -> None:
        while True:
            frame = self._queue.get()
            if frame is None:
                return
            if frame.time <= self._last_time:  # a failed tick repeats the last frame
                continue
            self._last_time = frame.time
            try:
                self.writer.write(frame)
                if self.writer.frames_written % TRIM_EVERY == 0:
                    trim(self.db, self.retention)
            except sqlite3.Error as exc:
                if self._give_up(exc, frame):
                    return
                continue
            except Exception as exc:  # a bug in the writer: stop recording, keep monitoring
                debuglog.log_exception("recorder failed", exc)
                self._stop(f"{type(exc).__name__}: {exc}")
                return
            if self.failures or self.skipped:
                self.failures, self.skipped, self.error = 0, 0, None

    def _give_up(self, exc: sqlite3.Error, frame: Frame) -> bool:
        """Count a failed tick; whether the recording stops (anything but a busy file)."""
        message = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        if any(word in message for word in TRANSIENT):
            self.failures += 1
            self.error = SourceError("record", f"{message} ({self.path})", self.failures, 0.0,
                                     frame.time)
            return False
        self._stop(message)
        return True

    def _stop(self, message: str) -> None:
        """Stop for good with one line that says what is in the file."""
        self.error = SourceError(
            "record", f"{message} ({self.path}); {self.writer.frames_written} ticks recorded "
            "before it", 1, 0.0, None, stopped=True)
        self.stopped = True

    def close(self) -> None:
        """Write what is queued, then close the file (its write-ahead log folded in)."""
        if self._thread.is_alive():
            with contextlib.suppress(queue.Full):
                self._queue.put(None, timeout=CLOSE_WAIT_S)
            self._thread.join(timeout=CLOSE_WAIT_S)
        if self._thread.is_alive():
            return  # still writing to a stuck disk: its daemon thread ends with the process
        with contextlib.suppress(sqlite3.Error):
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        with contextlib.suppress(sqlite3.Error):
            self.db.close()


def trim(db: sqlite3.Connection, retention: Retention) -> int:
    """Drop the oldest ticks beyond the retention; how many frames went."""
    cutoff = max(_cutoff_by_age(db, retention.keep_s), _cutoff_by_size(db, retention.max_bytes))
    if cutoff is None:
        return 0
    return drop_before(db, cutoff)


def _cutoff_by_age(db: sqlite3.Connection, keep_s: float | None) -> int:
    """The first frame young enough to keep (reading only the frames that go, oldest first)."""
    if keep_s is None:
        return 0
    newest = db.execute("SELECT time FROM frames ORDER BY id DESC LIMIT 1").fetchone()
    if newest is None:
        return 0
    oldest_kept = newest[0] - keep_s
    for fid, at in db.execute("SELECT id, time FROM frames ORDER BY id"):
        if at >= oldest_kept:
            return int(fid)
    return 0


def _cutoff_by_size(db: sqlite3.Connection, max_bytes: int | None) -> int:
    """The first frame to keep so the data falls to TRIM_TO of `max_bytes` (0: all fit)."""
    if max_bytes is None:
        return 0
    pages, free, size = (db.execute(f"PRAGMA {name}").fetchone()[0]
                         for name in ("page_count", "freelist_count", "page_size"))
    used = (pages - free) * size
    if used <= max_bytes:
        return 0
    first, last = db.execute("SELECT min(id), max(id) FROM frames").fetchone()
    if first is None:
        return 0
    share = 1.0 - TRIM_TO * max_bytes / used
    return min(last, first + max(1, round((last - first + 1) * share)))


def drop_before(db: sqlite3.Connection, cutoff: int) -> int:
    """Delete every tick before frame `cutoff` in one transaction; the advice shown, each
    GPU's info and details at the cutoff are carried onto it, so a replay there still shows
    them."""
    db.execute("BEGIN")
    try:
        gone = db.execute("SELECT count(*) FROM frames WHERE id < ?", (cutoff,)).fetchone()[0]
        db.execute(
            "INSERT OR IGNORE INTO advice SELECT ?, a.id, 1, a.severity, a.title, a.evidence, "
            "a.action FROM advice a WHERE a.shown = 1 AND a.frame = (SELECT max(frame) FROM "
            "advice b WHERE b.id = a.id AND b.frame < ?)", (cutoff, cutoff))
        db.execute("DELETE FROM advice WHERE frame < ?", (cutoff,))
        db.execute(
            "INSERT OR IGNORE INTO gpu_info SELECT a.gpu, ?, a.info_id FROM gpu_info a WHERE "
            "a.frame = (SELECT max(frame) FROM gpu_info b WHERE b.gpu = a.gpu AND b.frame < ?)",
            (cutoff, cutoff))
        db.execute(
            "INSERT OR IGNORE INTO gpu_details SELECT ?, devices FROM gpu_details WHERE frame = "
            "(SELECT max(frame) FROM gpu_details WHERE frame < ?)", (cutoff, cutoff))
        db.execute(
            "INSERT OR IGNORE INTO trainer_changes SELECT a.trainer, ?, a.dropped_records, "
            "a.config_id, a.error_id FROM trainer_changes a WHERE a.frame = (SELECT max(frame) "
            "FROM trainer_changes b WHERE b.trainer = a.trainer AND b.frame < ?)",
            (cutoff, cutoff))
        db.execute(
            "INSERT OR IGNORE INTO group_changes SELECT a.pid, ?, a.workers_id, "
            "a.pin_memory_thread, a.launcher_pid FROM group_changes a WHERE a.frame = (SELECT "
            "max(frame) FROM group_changes b WHERE b.pid = a.pid AND b.frame < ?)",
            (cutoff, cutoff))
        _drop_steps_before(db, cutoff)
        for table in PER_FRAME_TABLES:
            db.execute(f"DELETE FROM {table} WHERE frame < ?", (cutoff,))
        db.execute("DELETE FROM frames WHERE id < ?", (cutoff,))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return int(gone)


def _drop_steps_before(db: sqlite3.Connection, cutoff: int) -> None:
    """Delete the steps stored before frame `cutoff`: each trainer's stored in step order, its
    first kept is the first stored from the cutoff on (the scan stops there)."""
    for (trainer,) in db.execute("SELECT id FROM trainers").fetchall():
        kept = db.execute("SELECT first_step FROM step_ticks WHERE trainer = ? AND frame >= ? "
                          "ORDER BY first_step LIMIT 1", (trainer, cutoff)).fetchone()
        db.execute("DELETE FROM step_ticks WHERE trainer = ? AND first_step < ?",
                   (trainer, kept[0] if kept else 1 << 62))
