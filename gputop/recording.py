"""The `gputop.record/1` SQLite schema, shared by the recorder (export/) and replay (sources/).

One row of `frames` per tick; the other per-tick tables key on its `id`. A column named
`..._xN` holds the value times N, rounded to an integer (SQLite stores small integers in one
to four bytes, a REAL always in eight: a day at 1 Hz has to stay small); `_kib` and `_mib`
columns hold bytes in those units (NVML counts PCIe traffic in KiB/s, memory in MiB; /proc
counts RSS in pages). NULL is "not
measured", as in the model. Strings that repeat from tick to tick (a GPU's name, a trainer's
settings, a process's command line, a source's note) are JSON in `texts`, stored once and
referenced by id.
The GPUs' numbers of a tick are one BLOB (GPU_FIELDS, fixed width, big-endian, all bits set
for NULL): a row per device repeated a key and a header byte per column, most of a tick's
bytes with 8 GPUs; the `gpus` view decodes it back to a row per device for SQL.
README.md ("Recording") documents every table for people who query the file themselves.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence

SCHEMA = "gputop.record/1"
USER_VERSION = 2  # the layout within the schema: 1 stored GPUs as a row per device
APPLICATION_ID = 0x67707472  # "gptr": `file` and sqlite3 tell our files from others
STEP_FLAGS = ("warmup", "implicit", "input_outside_model")

# A device's numbers within a tick's `gpu_ticks.devices`, in order: (column, bytes). The
# `gpus` view's columns, the struct format and the README's table are this one list.
GPU_FIELDS = (
    ("gpu", 1), ("util_percent", 1), ("memory_util_percent", 1), ("memory_used_mib", 4),
    ("temperature_c", 1), ("power_w_x10", 2), ("sm_clock_mhz", 2), ("memory_clock_mhz", 2),
    ("pcie_rx_kib_per_s", 4), ("pcie_tx_kib_per_s", 4), ("sm_occupancy_percent_x10", 2),
    ("tensor_active_percent_x10", 2),
)
GPU_RECORD = struct.Struct(">" + "".join({1: "B", 2: "H", 4: "I"}[n] for _, n in GPU_FIELDS))
GPU_VALUES = tuple(name for name, _ in GPU_FIELDS[1:])  # what follows the device index
GPU_NULLS = tuple((1 << 8 * n) - 1 for _, n in GPU_FIELDS)  # all bits set: not measured
GPUS_VIEWED = 64  # devices per tick the `gpus` view decodes
HEX = "0123456789ABCDEF"


def pack_gpus(devices: Iterable[Sequence[int | None]]) -> bytes:
    """Each device's GPU_FIELDS values as one record, in order; None as all bits set, a
    value out of its field's range clamped into it."""
    return b"".join(GPU_RECORD.pack(*(null if v is None else min(max(v, 0), null - 1)
                                      for v, null in zip(values, GPU_NULLS, strict=True)))
                    for values in devices)


def unpack_gpus(blob: bytes) -> list[tuple[int, tuple[int | None, ...]]]:
    """`pack_gpus` read back: each device's index and its other values (GPU_VALUES)."""
    return [(index, tuple(None if v == null else v
                          for v, null in zip(values, GPU_NULLS[1:], strict=True)))
            for index, *values in GPU_RECORD.iter_unpack(blob)]


def text_hash(text: str) -> int:
    """The 32-bit key `texts` finds a text by (its index holds this, not a copy of the text)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest(), "big",
                          signed=True)


def _decoded(offset: int, size: int) -> str:
    """SQL reading the unsigned big-endian field at `offset` of device `d.i`'s record
    (SQLite has no function from bytes to an integer: its hex digits, one at a time)."""
    digits = f"hex(substr(t.devices, d.i * {GPU_RECORD.size} + {offset + 1}, {size}))"
    value = " + ".join(f"(instr('{HEX}', substr({digits}, {k + 1}, 1)) - 1) * "
                       f"{16 ** (2 * size - 1 - k)}" for k in range(2 * size))
    return f"CASE {digits} WHEN '{'F' * 2 * size}' THEN NULL ELSE {value} END"


def _gpus_view() -> str:
    """The view giving a row per tick and device, as a table of them would."""
    values, offset = [], 0
    for _, size in GPU_FIELDS:
        values.append(_decoded(offset, size))
        offset += size
    columns = [f"{value} AS {name}" for value, (name, _) in zip(values, GPU_FIELDS, strict=True)]
    info = (f"(SELECT i.info_id FROM gpu_info i WHERE i.gpu = {values[0]} AND i.frame <= "
            "t.frame ORDER BY i.frame DESC LIMIT 1) AS info_id")
    return (f"CREATE VIEW IF NOT EXISTS gpus AS WITH RECURSIVE d(i) AS (SELECT 0 UNION ALL "
            f"SELECT i + 1 FROM d WHERE i + 1 < {GPUS_VIEWED}) SELECT t.frame AS frame, "
            f"{columns[0]}, {info}, {', '.join(columns[1:])} FROM gpu_ticks t CROSS JOIN d "
            f"WHERE d.i * {GPU_RECORD.size} < length(t.devices);\n")

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
    errors_id INTEGER
);
CREATE TABLE IF NOT EXISTS gpu_ticks (
    frame INTEGER PRIMARY KEY,
    devices BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS gpu_info (
    gpu INTEGER NOT NULL,
    frame INTEGER NOT NULL,
    info_id INTEGER NOT NULL,
    PRIMARY KEY (gpu, frame)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gpu_processes (
    frame INTEGER NOT NULL,
    gpu INTEGER NOT NULL,
    position INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    memory_used_mib INTEGER,
    sm_util_percent_x10 INTEGER,
    PRIMARY KEY (frame, gpu, position)
) WITHOUT ROWID;
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
    in_proc INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS processes (
    frame INTEGER NOT NULL,
    process INTEGER NOT NULL,
    state TEXT,
    num_threads INTEGER,
    cpu_percent_x10 INTEGER,
    rss_kib INTEGER,
    cpu_time_s_x100 INTEGER,
    PRIMARY KEY (frame, process)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS trainer_groups (
    frame INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    workers_id INTEGER NOT NULL,
    workers_cpu_percent_x10 INTEGER NOT NULL,
    num_threads_total INTEGER NOT NULL,
    pin_memory_thread INTEGER NOT NULL,
    launcher_pid INTEGER,
    PRIMARY KEY (frame, pid)
) WITHOUT ROWID;
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
CREATE TABLE IF NOT EXISTS trainers (
    id INTEGER PRIMARY KEY,
    pid INTEGER NOT NULL,
    first_frame INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS trainer_ticks (
    frame INTEGER NOT NULL,
    position INTEGER NOT NULL,
    trainer INTEGER NOT NULL,
    state TEXT NOT NULL,
    idle_ms INTEGER,
    alive INTEGER NOT NULL,
    dropped_records INTEGER NOT NULL,
    first_step INTEGER,
    last_step INTEGER,
    config_id INTEGER,
    error_id INTEGER,
    PRIMARY KEY (frame, position)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS steps (
    trainer INTEGER NOT NULL,
    step INTEGER NOT NULL,
    frame INTEGER NOT NULL,
    end_ns INTEGER,
    duration_ns INTEGER NOT NULL,
    data_ns INTEGER,
    h2d_ns INTEGER,
    forward_ns INTEGER,
    backward_ns INTEGER,
    optimizer_ns INTEGER,
    gpu_ns INTEGER,
    gpu_gap_ns INTEGER,
    batch_size INTEGER,
    epoch INTEGER NOT NULL,
    flags INTEGER NOT NULL,
    verdict TEXT NOT NULL,
    PRIMARY KEY (trainer, step)
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
""" + _gpus_view()

# Tables with a `frame` column, trimmed together when old data is dropped (steps by range).
PER_FRAME_TABLES = ("gpu_ticks", "gpu_info", "gpu_processes", "processes", "trainer_groups",
                    "memory_bandwidth", "memory_consumers", "trainer_ticks", "gaps")


KIB = 1 << 10
MIB = 1 << 20


def in_units(value: float | None, unit: int) -> int | None:
    """`value` (bytes, bytes/s) in whole `unit`s, rounded; None stays None."""
    return None if value is None else round(value / unit)


def from_units(value: int | None, unit: int) -> int | None:
    """A `_kib` / `_mib` column back to bytes."""
    return None if value is None else value * unit


def step_flags(warmup: bool, implicit: bool, input_outside_model: bool) -> int:
    """The step's flags as bits, in STEP_FLAGS order (1 warm-up, 2 implicit, 4 input outside)."""
    return int(warmup) | int(implicit) << 1 | int(input_outside_model) << 2


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


def unscaled(value: int | None, factor: int) -> float | None:
    """A `_xN` column back to its value."""
    return None if value is None else value / factor
