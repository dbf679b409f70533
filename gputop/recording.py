"""The `gputop.record/1` SQLite schema, shared by the recorder (export/) and replay (sources/).

One row of `frames` per tick; the other per-tick tables key on its `id`. A column named
`..._xN` holds the value times N, rounded to an integer (SQLite stores small integers in one
to four bytes, a REAL always in eight: a day at 1 Hz has to stay small); `_kib` and `_mib`
columns hold bytes in those units (NVML counts PCIe traffic in KiB/s, memory in MiB; /proc
counts RSS in pages). NULL is "not
measured", as in the model. Strings that repeat from tick to tick (a GPU's name, a trainer's
settings, a source's note) are JSON in `texts`, stored once and referenced by id.
README.md ("Recording") documents every table for people who query the file themselves.
"""

from __future__ import annotations

SCHEMA = "gputop.record/1"
USER_VERSION = 1
APPLICATION_ID = 0x67707472  # "gptr": `file` and sqlite3 tell our files from others
STEP_FLAGS = ("warmup", "implicit", "input_outside_model")

TABLES = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT
);
CREATE TABLE IF NOT EXISTS texts (
    id INTEGER PRIMARY KEY,
    text TEXT NOT NULL UNIQUE
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
CREATE TABLE IF NOT EXISTS gpus (
    frame INTEGER NOT NULL,
    gpu INTEGER NOT NULL,
    info_id INTEGER,
    util_percent INTEGER,
    memory_util_percent INTEGER,
    memory_used_mib INTEGER,
    temperature_c INTEGER,
    power_w_x10 INTEGER,
    sm_clock_mhz INTEGER,
    memory_clock_mhz INTEGER,
    pcie_rx_kib_per_s INTEGER,
    pcie_tx_kib_per_s INTEGER,
    sm_occupancy_percent_x10 INTEGER,
    tensor_active_percent_x10 INTEGER,
    PRIMARY KEY (frame, gpu)
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
    cmdline TEXT NOT NULL,
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
    gpu_memory_mib INTEGER,
    gpu_indices TEXT,
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
"""

# Tables with a `frame` column, trimmed together when old data is dropped (steps by range).
PER_FRAME_TABLES = ("gpus", "gpu_processes", "processes", "trainer_groups",
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
