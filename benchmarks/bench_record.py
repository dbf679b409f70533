"""`make bench`: the recorder's cost per tick and its bytes per tick, with 600 processes.

Spawns idle `sleep` children until the machine holds 600 processes, starts the demo trainer
(real probe, real steps) on simulated GPUs, and records TICKS real ticks (after a warm-up
whose one-time rows are left out) of the one sampler
(GPUS simulated devices, memory bandwidth as `auto` finds it, advice on). Prints the median
ms a tick takes to write beside the median ms the tick took to sample (the ratio is the
budget: a small fraction), the bytes per tick without steps and per step (from SQLite's
dbstat, pages included), and what a day at 1 Hz comes to.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_sampler import kill_all, spawn_sleepers

from gputop.children import start_demo_trainer
from gputop.export.record import RecordWriter, open_record
from gputop.wiring import ProbedTrainers, build_sampler

TARGET_PROCESSES = 600
TICKS = int(os.environ.get("BENCH_RECORD_TICKS", "240"))
WARMUP_TICKS = 20  # GPU names, the trainer's settings, process identities: stored once
INTERVAL_S = 0.25
DAY_S = 86400
STEP_TABLES = ("steps", "gaps", "gaps_by_trainer")


def table_bytes(path: str) -> dict[str, int]:
    """Bytes each table and index fills in its pages, headers and free space inside full
    pages included, the unused tail of its last page not (SQLite's dbstat)."""
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT name, sum(pgsize) - sum(unused) FROM dbstat "
                               "GROUP BY name").fetchall())


def record(gpus: int, path: str) -> dict[str, float]:
    """Record TICKS ticks to `path`; the figures."""
    trainer = start_demo_trainer()
    sampler = build_sampler(demo="mixed", gpus=gpus, interval_s=INTERVAL_S,
                            owner_pids=[trainer.pid])
    follow = ProbedTrainers(sampler)
    writer = RecordWriter(open_record(path))
    write_ms, sample_ms, processes = [], [], []
    empty: dict[str, int] = {}
    try:
        sampler.prime()
        for tick in range(WARMUP_TICKS + TICKS):
            if tick == WARMUP_TICKS:
                writer.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                empty = table_bytes(path)
                steps_before = writer.steps_written
            sampler.wait(INTERVAL_S)
            frame = sampler.sample()
            follow.attach_new(frame)
            started = time.perf_counter()
            writer.write(frame)
            if tick >= WARMUP_TICKS:
                write_ms.append((time.perf_counter() - started) * 1e3)
                sample_ms.append(frame.sample_cost_s * 1e3)
                processes.append(len(frame.processes))
    finally:
        sampler.close()
        trainer.stop()
    writer.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    writer.db.close()
    grown = {name: size - empty.get(name, 0) for name, size in table_bytes(path).items()}
    if os.environ.get("BENCH_RECORD_TABLES"):
        print({name: round(size / TICKS) for name, size in sorted(grown.items()) if size})
    step_bytes = sum(grown.get(name, 0) for name in STEP_TABLES)
    tick_bytes = sum(grown.values()) - step_bytes
    with sqlite3.connect(path) as db:
        kept = db.execute("SELECT count(*) FROM processes WHERE frame > ?",
                          (WARMUP_TICKS,)).fetchone()[0] / TICKS
    steps = writer.steps_written - steps_before
    return {"gpus": gpus, "processes": statistics.median(processes), "kept": kept,
            "write_ms": statistics.median(write_ms), "sample_ms": statistics.median(sample_ms),
            "tick_bytes": tick_bytes / TICKS, "step_bytes": step_bytes / max(1, steps),
            "steps": steps}


def main() -> int:
    print(f"cpus={os.cpu_count()}  ticks={TICKS} every {INTERVAL_S} s  (shared machine: "
          "compare the ratio, not the absolute ms)")
    print(f"{'gpus':>4} {'procs':>5} {'kept':>5} {'write ms':>8} {'sample ms':>9} {'ratio':>6} "
          f"{'B/tick':>7} {'MB/day':>7} {'B/step':>6} {'steps':>6}")
    sleepers: list[int] = []
    try:
        have = len(psutil.pids())
        if have < TARGET_PROCESSES:
            sleepers = spawn_sleepers(TARGET_PROCESSES - have)
        with tempfile.TemporaryDirectory() as tmp:
            for gpus in (1, 8):
                f = record(gpus, os.path.join(tmp, f"bench-{gpus}.sqlite"))
                per_day = f["tick_bytes"] * DAY_S / 1e6
                print(f"{f['gpus']:>4} {f['processes']:>5.0f} {f['kept']:>5.1f} "
                      f"{f['write_ms']:>8.2f} {f['sample_ms']:>9.2f} "
                      f"{f['write_ms'] / f['sample_ms']:>6.2f} {f['tick_bytes']:>7.0f} "
                      f"{per_day:>7.1f} {f['step_bytes']:>6.0f} {f['steps']:>6.0f}", flush=True)
    finally:
        kill_all(sleepers)
    print("write ms: one tick's transaction (median); sample ms: the tick's own sampling; "
          "B/tick: bytes of pages per tick without steps; MB/day: that at 1 Hz for 24 h; "
          "B/step: bytes per stored step (steps come on top: steps/s x B/step x 86400).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
