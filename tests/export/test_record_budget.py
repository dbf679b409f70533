"""The recording's size, counted in bytes and never timed: a day at 1 Hz of an 8-GPU server
with 600 processes and an attached trainer stays within 50 MB (steps come on top); an 8-rank
DDP job on it, every rank attached and closing steps, within its own budget, steps included."""

from __future__ import annotations

import random
import sqlite3
from dataclasses import replace
from itertools import islice
from pathlib import Path

from gputop.core.model import (
    Advice,
    AttachState,
    Frame,
    GpuReport,
    MemoryBandwidthSample,
    ProcessSample,
    TrainerConfig,
)
from gputop.recording.writer import RecordWriter, open_record
from tests.helpers.builders import GIB, gpu, host, process, steps, trainer_with_workers
from tests.helpers.ddp_job import RANKS, STEPS_PER_S, ddp_ticks

DAY_S = 86_400
DAY_BUDGET_BYTES = 50_000_000
T0 = 1_800_000_000.0
CPUS = 128  # an 8-GPU server's: more CPUs than GPUs by far
GPUS = 8
PROCESSES = 600
TRAINER = 4000
WARMUP = 60  # GPU names, process identities, command lines: stored once, then referenced
TICKS = 1200  # the file grows by 4 KiB pages: ticks are counted by the thousand
DDP_TICKS = 600
# bytes a tick, steps included: 406 MB a day at 1 Hz (each step also keeps its host and
# sync time and the stack sampler's counts and sites, 22 bytes more than before, and its
# host and data parts' samples, 4 more)
DDP_TICK_BUDGET = 4_700
CONFIG = TrainerConfig(num_workers=3, pin_memory=True, batch_size=64, device="cuda:0")
STARVED = Advice("gpu-starved", "critical", "GPUs are waiting for input, not computing",
                 "GPU 0 idle in 61% of samples", "Raise num_workers or cache the dataset.")


def _idle_processes() -> list[ProcessSample]:
    """The processes that do nothing all day (sshd, shells, daemons), but for 16: 8 busy
    with something (the top by CPU churns among them) and 8 large (the top by RSS)."""
    rows = [replace(process(10_000 + i), cpu_percent=0.0, rss_bytes=(i % 90 + 1) << 20,
                    cmdline=("/usr/sbin/daemon", f"--instance={i}"))
            for i in range(PROCESSES - 4 - 16)]
    rows += [replace(process(20_000 + i), cmdline=("make", f"-j{i}")) for i in range(8)]
    rows += [replace(process(30_000 + i), cmdline=("postgres", f"worker {i}"))
             for i in range(8)]
    return rows


def _server_tick(tick: int, rng: random.Random, idle: list[ProcessSample]) -> Frame:
    """Tick `tick` of the server: every number the screen shows moves, nobody is born."""
    rows, group = trainer_with_workers(TRAINER, workers=3, worker_cpu=0.0)

    def moved(p: ProcessSample, cpu: float, rss: int) -> ProcessSample:
        return replace(p, cpu_percent=cpu, cpu_time_s=1000.0 + tick * cpu / 100,
                       rss_bytes=rss + rng.randrange(4096) * 4096,
                       state=rng.choice("RS"), num_threads=24)

    trained = [moved(p, rng.uniform(40, 110), 6 * GIB) for p in rows]
    others = [moved(p, rng.uniform(5, 60), GIB) if 20_000 <= p.pid < 30_000
              else moved(p, 0.0, (2 + p.pid % 8) * GIB) if p.pid >= 30_000 else p
              for p in idle]
    group = replace(group, workers_cpu_percent=sum(p.cpu_percent or 0 for p in trained[1:]))
    devices = tuple(replace(
        gpu(i, util=rng.uniform(0, 100), used_gib=40 + rng.random(), pids=((TRAINER, 40),)
            if i == 0 else ()),
        temperature_c=float(rng.randrange(55, 80)), power_w=rng.uniform(80, 700),
        pcie_rx_bytes_per_s=rng.uniform(0, 20e9), pcie_tx_bytes_per_s=rng.uniform(0, 5e9),
        sm_clock_mhz=rng.randrange(1700, 1981, 15), memory_util_percent=rng.uniform(0, 60),
        sm_occupancy_percent=rng.uniform(0, 90), tensor_active_percent=rng.uniform(0, 60))
        for i in range(GPUS))
    busy = rng.uniform(10, 90)
    window = steps(32, data_ms=40.0, compute_ms=60.0)  # no new steps: they come on top
    return Frame(
        time=T0 + tick, interval_s=1.0,
        host=replace(host(CPUS, busy), per_cpu_percent=tuple(
            rng.uniform(0, 100) for _ in range(CPUS)), memory_available_bytes=rng.randrange(
            100, 400) * GIB, load_average=(busy, busy * 0.9, busy * 0.8), uptime_s=9e5 + tick),
        gpu=GpuReport(source="nvml", gpus=devices, driver_version="550.54"),
        processes=tuple(trained + others), trainers=(group,),
        memory_bandwidth=MemoryBandwidthSample(
            "estimate", "medium", pressure=rng.random(), psi_some_avg10=rng.uniform(0, 5),
            swap_in_per_s=0.0, major_faults_per_s=rng.uniform(0, 3)),
        attached=(AttachState(pid=TRAINER, config=CONFIG, dropped_records=0, steps=window),),
        advice=(replace(STARVED, evidence=f"GPU 0 idle in {tick % 40 + 30}% of samples"),))


def _grown(path: Path, writer: RecordWriter) -> int:
    """The file's bytes (its write-ahead log folded in)."""
    writer.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with sqlite3.connect(path) as db:
        pages, size = (db.execute(f"PRAGMA {name}").fetchone()[0]
                       for name in ("page_count", "page_size"))
    return int(pages * size)


def test_a_day_of_an_8_gpu_server_with_600_processes_fits_50_mb(tmp_path: Path) -> None:
    """Bytes the file grows by per tick, every number moving every tick, within 50 MB a day
    at 1 Hz (579 a tick): 748 before a tick's processes were a BLOB like its GPUs (a row a
    process kept, with its key and a header byte per column), the GPU numbers no pane draws
    every tenth tick, and 128 CPUs a nibble each instead of a byte; 519 after."""
    path = tmp_path / "day.sqlite"
    writer = RecordWriter(open_record(str(path)))
    rng = random.Random(16)
    idle = _idle_processes()
    for tick in range(WARMUP):
        writer.write(_server_tick(tick, rng, idle))
    before = _grown(path, writer)
    for tick in range(WARMUP, WARMUP + TICKS):
        writer.write(_server_tick(tick, rng, idle))
    per_tick = (_grown(path, writer) - before) / TICKS
    writer.db.close()
    assert per_tick <= DAY_BUDGET_BYTES / DAY_S, per_tick


def test_a_day_of_an_8_rank_ddp_job_fits_its_budget(tmp_path: Path) -> None:
    """8 ranks with 4 DataLoader workers each, every rank attached and closing ~5.3 steps a
    second, on the 8-GPU server with 600 processes: every step kept, within 3.6 KB a tick,
    steps included. 5345 before (a row per step, 75 bytes each; a row per rank, group and
    GPU process every tick); 3407 after (a tick's steps of a rank one row, 37 bytes a step,
    exact to the ns; the ranks, groups and GPU processes of a tick one row each)."""
    path = tmp_path / "ddp.sqlite"
    writer = RecordWriter(open_record(str(path)))
    writer.frame_id = DAY_S // 2  # frame ids as a day's recording has them (3 bytes)
    frames = ddp_ticks()
    for frame in islice(frames, WARMUP):
        writer.write(frame)
    before, stored = _grown(path, writer), writer.steps_written
    for frame in islice(frames, DDP_TICKS):
        writer.write(frame)
    per_tick = (_grown(path, writer) - before) / DDP_TICKS
    closed = sum(state.steps[-1].step + 1 for state in frame.attached)
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*), count(DISTINCT trainer) FROM steps").fetchone() == (
            closed, RANKS)
    writer.db.close()
    assert (writer.steps_written - stored) / DDP_TICKS > RANKS * STEPS_PER_S
    assert per_tick <= DDP_TICK_BUDGET, per_tick
