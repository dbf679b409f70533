"""The `gputop.record/1` SQLite schema, shared by the writer and the one reader (reader.py).

One row of `frames` per tick; the other per-tick tables key on its `id`. A column named
`..._xN` holds the value times N, rounded to an integer (SQLite stores small integers in one
to four bytes, a REAL always in eight: a day at 1 Hz has to stay small); `_kib` and `_mib`
columns hold bytes in those units (NVML counts PCIe traffic in KiB/s, memory in MiB; /proc
counts RSS in pages). NULL is "not measured", as in the model. Strings that repeat from tick
to tick (a GPU's name, a trainer's settings, a process's command line, a source's note) are
JSON in `texts`, stored once and referenced by id.
The GPUs', GPU processes' and kept processes' numbers of a tick are one BLOB each (a
Packing: fixed width, big-endian, all bits set for NULL): a row per device or process
repeated a key and a header byte per column, most of a tick's bytes. The `gpus`,
`gpu_processes` and `processes` views decode them back to a row each for SQL. A GPU's
numbers no pane draws (memory util, clocks, SM occupancy, tensor activity) are stored every
DETAIL_EVERY ticks. The trainers' tables (groups, attached trainers, steps) are
gputop/recording/trainers.py's.
docs/recording.md documents every table for people who query the file themselves.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import math
import os
import sqlite3
import stat
from collections.abc import Sequence

from gputop.core.hashes import blake2b
from gputop.core.printable import printable
from gputop.recording.packing import Packing, unpacked_view
from gputop.recording.trainers import TRAINER_TABLES
from gputop.recording.values import READ_ERRORS, reason

SCHEMA = "gputop.record/1"
USER_VERSION = 6  # the layout, the only one written and read (PRAGMA user_version)
APPLICATION_ID = 0x67707472  # "gptr": `file` and sqlite3 tell our files from others
DETAIL_EVERY = 10  # ticks between two `gpu_details` rows
KIB = 1 << 10
MIB = 1 << 20
CORES_IN_BYTES = 32  # CPUs stored a byte each, the whole percent the screen prints beside a bar
# More CPUs than that are drawn a glyph each (their numbers would need a 367-column terminal):
# a nibble each, the class of whole percent a glyph and its colour tell apart, by where each
# class starts (eight heights, and the warn and crit colours from 75 and 90 %).
CORE_CLASSES = (0, 13, 25, 38, 50, 63, 75, 88, 90)
SIDE_FILES = ("-wal", "-shm", "-journal")  # what SQLite opens beside a database
STORED_TYPES = {"INTEGER": ("integer",), "REAL": ("real", "integer"), "TEXT": ("text",),
                "BLOB": ("blob",)}  # typeof() a column of each declared type may hold


# A tick's devices in `gpu_ticks.devices`: what the panes and the report draw.
# PCIe: to the KiB/s up to 8 GiB/s, to the MiB/s above (the screen prints 0.1 GB/s there).
GPU_TICK = Packing((
    ("gpu", 1), ("util_percent", 1), ("memory_used_mib", 3), ("temperature_c", 1),
    ("power_w_x10", 2), ("pcie_rx_kib_per_s", 3, KIB), ("pcie_tx_kib_per_s", 3, KIB)))
# Every DETAIL_EVERY ticks, `gpu_details.devices`: the rest, in the same device order.
GPU_DETAIL = Packing((
    ("gpu", 1), ("memory_util_percent", 1), ("sm_clock_mhz", 2), ("memory_clock_mhz", 2),
    ("sm_occupancy_percent_x10", 2), ("tensor_active_percent_x10", 2)))
# A tick's kept processes in `process_ticks.processes`; `process` is a `process_info` id.
PROCESS_TICK = Packing((
    ("process", 4), ("state", 1), ("num_threads", 2), ("cpu_percent_x10", 2, 10),
    ("rss_kib", 4), ("cpu_time_s_x100", 4, 100)))
# A tick's GPU compute processes in `gpu_process_ticks.processes`, by device and position.
GPU_PROCESS_TICK = Packing((
    ("gpu", 1), ("position", 1), ("pid", 4), ("memory_used_mib", 3),
    ("sm_util_percent_x10", 2)))
GPU_COLUMNS = ("gpu", "util_percent", "memory_util_percent", "memory_used_mib", "temperature_c",
               "power_w_x10", "sm_clock_mhz", "memory_clock_mhz", "pcie_rx_kib_per_s",
               "pcie_tx_kib_per_s", "sm_occupancy_percent_x10", "tensor_active_percent_x10")
# the `gpus` view's columns (after frame; info_id after gpu)
GPUS_VIEWED = 64  # devices per tick the `gpus` view decodes


def gpu_values(ticks: bytes, details: bytes | None = None) -> list[dict[str, int | None]]:
    """Each device of a `gpu_ticks` BLOB as {column: value} (GPU_COLUMNS), with the
    `gpu_details` in effect (the same devices in the same order, else None)."""
    devices = [dict(zip(GPU_TICK.names, values, strict=True)) for values in GPU_TICK.unpack(ticks)]
    extra = GPU_DETAIL.unpack(details or b"")
    for position, device in enumerate(devices):
        found = extra[position] if position < len(extra) else None
        same = found is not None and found[0] == device["gpu"]
        for name, value in zip(GPU_DETAIL.names[1:], (found or ())[1:] if same else
                               (None,) * (len(GPU_DETAIL.names) - 1), strict=True):
            device[name] = value
    return devices


def pack_cores(percents: Sequence[float]) -> tuple[bytes | None, bytes | None]:
    """Per-CPU busy percentages as stored: (`per_cpu_percent`, `per_cpu_classes`), the
    other None; a byte each up to CORES_IN_BYTES CPUs, a nibble each beyond (the first CPU
    in the high nibble, 15 after the last)."""
    whole = [min(255, max(0, round(v))) if math.isfinite(v) else 0 for v in percents]
    if len(whole) <= CORES_IN_BYTES:
        return bytes(whole), None
    classes = [bisect.bisect_right(CORE_CLASSES, w) - 1 for w in whole] + [15]
    pairs = zip(classes[::2], classes[1::2], strict=False)  # an even count drops the 15
    return None, bytes(high << 4 | low for high, low in pairs)


def unpack_cores(percent: bytes | None, classes: bytes | None) -> tuple[float, ...]:
    """`pack_cores` read back; a class as the whole percent where it starts."""
    if percent is not None or classes is None:
        return tuple(float(b) for b in percent or b"")
    found = (n for byte in classes for n in (byte >> 4, byte & 15))
    return tuple(float(CORE_CLASSES[n]) for n in found if n < len(CORE_CLASSES))


def open_read_only(path: str, fail: type[Exception]) -> sqlite3.Connection:
    """`path` opened read-only (a recorder may still be appending) and checked to be a
    recording of this gputop's layout. A refusal is one line raised as `fail`, the file
    closed."""
    refusal = not_a_file(path)
    if refusal is not None:
        raise fail(refusal)
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    except sqlite3.Error as exc:
        raise fail(f"cannot read {path}: {reason(exc)}") from None
    db.text_factory = _text_of  # text that is not UTF-8 is shown, not raised
    try:
        refusal = _refusal(db, path)
    except READ_ERRORS as exc:
        refusal = f"cannot read {path}: {reason(exc)}"
    if refusal is not None:
        db.close()
        raise fail(refusal)
    return db


def not_a_file(path: str) -> str | None:
    """Why `path`, or a file SQLite would open beside it, is not a regular file to read (None:
    they are). Opened non-blocking to look: a FIFO never holds gputop up."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return f"no recording at {path}"
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror}"
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    finally:
        os.close(fd)
    if not regular:
        return f"{path} is not a file"
    for side in (path + suffix for suffix in SIDE_FILES):
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISREG(os.lstat(side).st_mode):
                return f"{side} is not a file"
    return None


def contents_refusal(db: sqlite3.Connection) -> str | None:
    """Why the recording open as `db` (this gputop's layout) cannot be appended to: damaged
    pages, a table or column of TABLES missing, a value of another type than its column's
    (None: it can)."""
    if (check := db.execute("PRAGMA quick_check(1)").fetchone()[0]) != "ok":
        return printable(str(check))
    for table, columns in _declared_columns():
        found = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        missing = [name for name, _, _ in columns if name not in found]
        if missing:
            return f"table {table} lacks column {missing[0]}"
        for name, declared, required in columns:
            allowed = ", ".join(f"'{t}'" for t in (*STORED_TYPES[declared],
                                                   *(() if required else ("null",))))
            if db.execute(f"SELECT 1 FROM {table} WHERE typeof({name}) NOT IN ({allowed}) "
                          "LIMIT 1").fetchone():
                return f"{table}.{name} holds a value that is not {declared}"
    return None


@functools.cache
def _declared_columns() -> tuple[tuple[str, tuple[tuple[str, str, bool], ...]], ...]:
    """Each table of TABLES with its columns: (name, declared type, NOT NULL)."""
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(TABLES)
        tables = [name for (name,) in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return tuple((table, tuple((name, declared, bool(required)) for _, name, declared,
                                   required, *_ in db.execute(f"PRAGMA table_info({table})")))
                     for table in tables)
    finally:
        db.close()


def _text_of(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _refusal(db: sqlite3.Connection, path: str) -> str | None:
    """Why the file at `path` is not a recording this gputop reads (None: it is one)."""
    if db.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
        return f"{path} is not a gputop recording"
    row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    if row is None or row[0] != SCHEMA:
        return (f"{path} is a recording of schema {printable(str(row[0]))[:80] if row else 'none'}"
                f"; this gputop reads {SCHEMA}")
    return layout_refusal(db, path)


def layout_refusal(db: sqlite3.Connection, path: str) -> str | None:
    """Why the recording at `path`, open as `db`, is of another layout than this gputop's
    (None: it is not)."""
    layout = int(db.execute("PRAGMA user_version").fetchone()[0])
    if layout == USER_VERSION:
        return None
    when = "an earlier" if layout < USER_VERSION else "a later"
    return f"{path} is a recording of {when} gputop (layout {layout}, not {USER_VERSION})"


def text_hash(text: str) -> int:
    """The 32-bit key `texts` finds a text by (its index holds this, not a copy of the text)."""
    return int.from_bytes(blake2b(text.encode(), digest_size=4).digest(), "big",
                          signed=True)


def _gpus_view() -> str:
    """The view giving a row per tick and device, as a table of them would: the tick's
    numbers, and the details stored last at or before it."""
    columns = {**GPU_DETAIL.sql_columns("x.devices", "d.i"),
               **GPU_TICK.sql_columns("t.devices", "d.i")}
    info = (f"(SELECT i.info_id FROM gpu_info i WHERE i.gpu = {columns['gpu']} AND i.frame <= "
            "t.frame ORDER BY i.frame DESC LIMIT 1)")
    named = [f"{columns['gpu']} AS gpu", f"{info} AS info_id"]
    named += [f"{columns[name]} AS {name}" for name in GPU_COLUMNS[1:]]
    return (f"CREATE VIEW IF NOT EXISTS gpus AS WITH RECURSIVE d(i) AS (SELECT 0 UNION ALL "
            f"SELECT i + 1 FROM d WHERE i + 1 < {GPUS_VIEWED}) SELECT t.frame AS frame, "
            f"{', '.join(named)} FROM gpu_ticks t CROSS JOIN d LEFT JOIN gpu_details x ON "
            "x.frame = (SELECT max(frame) FROM gpu_details WHERE frame <= t.frame) "
            f"WHERE d.i * {GPU_TICK.size} < length(t.devices);\n")


def _gpu_processes_view() -> str:
    """The view giving a row per tick, device and compute process."""
    columns = GPU_PROCESS_TICK.sql_columns("t.processes", "d.i")
    named = ["t.frame AS frame",
             *(f"{columns[name]} AS {name}" for name in GPU_PROCESS_TICK.names)]
    return unpacked_view("gpu_processes", "gpu_process_ticks", "processes", GPU_PROCESS_TICK,
                         named)


def _processes_view() -> str:
    """The view giving a row per tick and process kept (the state a letter again)."""
    columns = PROCESS_TICK.sql_columns("t.processes", "d.i")
    columns["state"] = f"CASE WHEN ({columns['state']}) IS NULL THEN NULL ELSE char(" \
                       f"{columns['state']}) END"
    named = ["t.frame AS frame", *(f"{columns[name]} AS {name}" for name in PROCESS_TICK.names)]
    return unpacked_view("processes", "process_ticks", "processes", PROCESS_TICK, named)


TABLES = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT
);
CREATE TABLE IF NOT EXISTS texts (
    id INTEGER PRIMARY KEY,
    hash INTEGER NOT NULL,
    text TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS frames (
    id INTEGER PRIMARY KEY,
    time REAL NOT NULL,
    interval_ms INTEGER NOT NULL,
    sample_cost_us INTEGER,
    host_id INTEGER,
    gpu_id INTEGER,
    cpu_percent_x10 INTEGER,
    per_cpu_percent BLOB,
    memory_available_bytes INTEGER,
    swap_used_bytes INTEGER,
    load1_x100 INTEGER,
    load5_x100 INTEGER,
    load15_x100 INTEGER,
    uptime_s INTEGER,
    processes_total INTEGER,
    errors_id INTEGER,
    per_cpu_classes BLOB
);
CREATE TABLE IF NOT EXISTS gpu_ticks (
    frame INTEGER PRIMARY KEY,
    devices BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS gpu_details (
    frame INTEGER PRIMARY KEY,
    devices BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS gpu_info (
    gpu INTEGER NOT NULL,
    frame INTEGER NOT NULL,
    info_id INTEGER NOT NULL,
    PRIMARY KEY (gpu, frame)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gpu_process_ticks (
    frame INTEGER PRIMARY KEY,
    processes BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS process_info (
    id INTEGER PRIMARY KEY,
    pid INTEGER NOT NULL,
    start_ticks INTEGER NOT NULL,
    ppid INTEGER,
    name TEXT NOT NULL,
    username TEXT,
    cmdline_id INTEGER NOT NULL,
    role TEXT,
    trainer_pid INTEGER,
    has_probe INTEGER NOT NULL,
    in_proc INTEGER NOT NULL,
    container TEXT,
    container_pod TEXT,
    container_pid INTEGER
);
CREATE TABLE IF NOT EXISTS process_ticks (
    frame INTEGER PRIMARY KEY,
    processes BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS memory_bandwidth (
    frame INTEGER PRIMARY KEY,
    info_id INTEGER NOT NULL,
    read_bytes_per_s INTEGER,
    write_bytes_per_s INTEGER,
    total_bytes_per_s INTEGER,
    peak_bytes_per_s INTEGER,
    pressure_x1000 INTEGER,
    psi_some_avg10_x100 INTEGER,
    psi_full_avg10_x100 INTEGER,
    swap_in_per_s_x10 INTEGER,
    major_faults_per_s_x10 INTEGER,
    canary_bytes_per_s INTEGER
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS memory_consumers (
    frame INTEGER NOT NULL,
    position INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    name TEXT,
    bytes_per_s INTEGER,
    PRIMARY KEY (frame, position)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gaps (
    trainer INTEGER NOT NULL,
    frame INTEGER NOT NULL,
    after_step INTEGER,
    before_step INTEGER,
    missing_steps INTEGER,
    dropped_records INTEGER NOT NULL,
    reason TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS advice (
    frame INTEGER NOT NULL,
    id TEXT NOT NULL,
    shown INTEGER NOT NULL,
    severity TEXT,
    title TEXT,
    evidence TEXT,
    action TEXT,
    PRIMARY KEY (frame, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS advice_by_id ON advice (id, frame);
CREATE INDEX IF NOT EXISTS gaps_by_trainer ON gaps (trainer, frame);
CREATE INDEX IF NOT EXISTS texts_by_hash ON texts (hash);
""" + TRAINER_TABLES + _gpus_view() + _gpu_processes_view() + _processes_view()

# Tables with a `frame` column, trimmed together when old data is dropped; the steps' by
# each trainer's range of steps (their key).
PER_FRAME_TABLES = ("gpu_ticks", "gpu_details", "gpu_info", "gpu_process_ticks", "process_ticks",
                    "group_ticks", "group_changes", "memory_bandwidth", "memory_consumers",
                    "attach_ticks", "trainer_changes", "gaps")
STEP_TABLES = ("step_ticks",)



def in_units(value: float | None, unit: int) -> int | None:
    """`value` (bytes, bytes/s) in whole `unit`s, rounded; None stays None."""
    return None if value is None else round(value / unit)


def from_units(value: int | None, unit: int) -> int | None:
    """A `_kib` / `_mib` column back to bytes."""
    return None if value is None else value * unit


def scaled(value: float | None, factor: int) -> int | None:
    """`value` times `factor`, rounded (None stays None; NaN and infinities are unknown too)."""
    if value is None or value != value or value in (float("inf"), float("-inf")):
        return None
    return round(value * factor)


def scaled_whole(value: float | None, factor: int) -> int | None:
    """`value` times `factor` for a number the screen prints whole: rounded so that the value
    read back rounds to the same whole number (17.46 is 174, not 175: 17.5 would print 18);
    it stays within 1/`factor` of `value`."""
    stored = scaled(value, factor)
    if stored is None or value is None:
        return stored
    whole = round(value)
    if round(stored / factor) != whole:
        stored += 1 if stored / factor < whole else -1
    return stored


def unscaled(value: float | None, factor: int) -> float | None:
    """A `_xN` column back to its value."""
    return None if value is None else value / factor
