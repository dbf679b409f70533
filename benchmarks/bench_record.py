"""`make bench`: the recorder's cost per tick and its bytes per tick, with 600 processes.

Spawns idle `sleep` children until the machine holds 600 processes, starts the demo trainer
(real probe, real steps) on simulated GPUs, and records TICKS real ticks (after a warm-up
whose one-time rows are left out) of the one sampler (1 and 8 simulated devices, memory
bandwidth as `auto` finds it, advice on). Then the live view's app (headless, 200x50) draws
the same frames. Prints, per tick, the CPU the recorder spends writing it beside the CPU
the sampler spent taking it and the TUI's whole tick (sampling + drawing), both measured in
this run, as ratios (the budget: a small fraction); the bytes per tick without steps and
per step (SQLite's dbstat: bytes of cells and headers in pages); and what an hour and a day
at 1 Hz come to. Rows written when something happens rather than every tick (a new process
identity or command line, advice, a GPU's changed info) come at a rate per second, not per
tick: they are counted per second and added to a 1 Hz tick. Frame ids start where a day's
recording has them (3-byte integers after 9 hours at 1 Hz).

Then a synthetic 8-GPU DDP node (tests/helpers/ddp_job.py: 8 ranks with 4 DataLoader workers
each, every rank attached and closing ~5 steps a second, 600 processes), recorded without
sampling: its bytes per tick by table, steps included, and what a day at 1 Hz comes to.

Twice: first in a PID namespace of its own (root: `unshare`), where the 600 processes are
the benchmark's alone, so the figures are the recorder's at 600 processes and one trainer;
then on the machine as found, where other tenants' trainers, tests and browsers come and go
(kept by the recorder as trainers or as the busiest: rows and command lines of their own).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_sampler import kill_all, spawn_sleepers

from gputop.app.children import start_demo_trainer
from gputop.app.record import ProbedTrainers
from gputop.app.wiring import build_sampler
from gputop.core.model import Frame
from gputop.recording.writer import RecordWriter, open_record

TARGET_PROCESSES = 600
TICKS = int(os.environ.get("BENCH_RECORD_TICKS", "240"))
WARMUP_TICKS = 20  # GPU names, the trainer's settings, process identities: stored once
INTERVAL_S = 0.25
HOUR_S = 3600
DAY_S = 86400
TUI_SIZE = (200, 50)
STEP_TABLES = ("steps", "step_ticks", "long_steps", "gaps", "gaps_by_trainer")  # layout 3's and 4's
EVENT_TABLES = ("process_info", "texts", "texts_by_hash", "gpu_info", "advice", "advice_by_id",
                "trainers", "trainer_changes", "group_changes")
DAY_FRAME_ID = DAY_S // 2  # the frame ids of a day's recording take 3 bytes from 32768 on
OWN = "--own-namespace"  # the run inside a PID namespace of its own
DDP_TICKS = 600


def table_bytes(path: str) -> dict[str, int]:
    """Bytes each table and index fills in its pages: cells and headers, not the room left
    free inside pages (SQLite's dbstat). A b-tree filled by appends keeps some: ~12% of a
    WITHOUT ROWID table's pages, ~1% of a rowid table's; a run this short would count the
    half-empty pages of small tables' first splits instead."""
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT name, sum(pgsize) - sum(unused) FROM dbstat "
                               "GROUP BY name").fetchall())


class HeldFeed:
    """A FrameFeed that delivers nothing by itself: the benchmark hands the app its frames."""

    paused = False

    def start(self, on_frame: object, *, on_prime: object = None) -> None:
        """Nothing to start."""

    def stop(self) -> None:
        """Nothing to stop."""

    def set_paused(self, paused: bool) -> None:
        """Nothing plays."""

    def attach(self, pid: int) -> None:
        """Nothing to attach to."""

    def detach(self, pid: int) -> None:
        """Nothing to let go of."""

    def add_deferred_sources(self) -> None:
        """No sources."""


def draw_cpu_ms(frames: list[Frame]) -> float:
    """Median CPU ms the live view's app spends showing one of `frames` and drawing it."""
    from gputop.tui import build_app

    app = build_app(HeldFeed())
    spent: list[float] = []

    async def show_all() -> None:
        async with app.run_test(size=TUI_SIZE) as pilot:
            for frame in frames:
                started = time.process_time()
                app.show_frame(frame)
                await pilot.pause()
                spent.append((time.process_time() - started) * 1e3)

    asyncio.run(show_all())
    return statistics.median(spent)


def record(gpus: int, path: str) -> dict[str, float]:
    """Record TICKS ticks to `path`, then draw them in the app; the figures."""
    trainer = start_demo_trainer()
    sampler = build_sampler(demo="mixed", gpus=gpus, interval_s=INTERVAL_S,
                            owner_pids=[trainer.pid])
    follow = ProbedTrainers(sampler)
    writer = RecordWriter(open_record(path))
    writer.frame_id = DAY_FRAME_ID
    write_ms, write_cpu_ms, sample_ms, sample_cpu_ms, processes = [], [], [], [], []
    shown: list[Frame] = []
    empty: dict[str, int] = {}
    try:
        sampler.prime()
        for tick in range(WARMUP_TICKS + TICKS):
            if tick == WARMUP_TICKS:
                writer.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                empty = table_bytes(path)
                steps_before = writer.steps_written
                began = time.monotonic()
            sampler.wait(INTERVAL_S)
            sampling = time.thread_time()
            frame = sampler.sample()
            sampled = time.thread_time() - sampling
            follow.attach_new(frame)
            started, cpu = time.perf_counter(), time.thread_time()
            writer.write(frame)
            if tick >= WARMUP_TICKS:
                write_ms.append((time.perf_counter() - started) * 1e3)
                write_cpu_ms.append((time.thread_time() - cpu) * 1e3)
                sample_ms.append(frame.sample_cost_s * 1e3)
                sample_cpu_ms.append(sampled * 1e3)
                processes.append(len(frame.processes))
                shown.append(frame)
        seconds = time.monotonic() - began
    finally:
        sampler.close()
        trainer.stop()
    writer.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    writer.db.close()
    grown = {name: size - empty.get(name, 0) for name, size in table_bytes(path).items()}
    step_bytes = sum(grown.get(name, 0) for name in STEP_TABLES)
    event_bytes = sum(grown.get(name, 0) for name in EVENT_TABLES)
    tick_bytes = sum(grown.values()) - step_bytes - event_bytes
    if os.environ.get("BENCH_RECORD_TABLES"):
        print("B/tick", {name: round(size / TICKS) for name, size in sorted(grown.items())
                         if size and name not in EVENT_TABLES + STEP_TABLES},
              "B/s", {name: round(size / seconds) for name, size in sorted(grown.items())
                      if size and name in EVENT_TABLES})
    with sqlite3.connect(path) as db:
        kept = db.execute("SELECT count(*) FROM processes WHERE frame > ?",
                          (DAY_FRAME_ID + WARMUP_TICKS,)).fetchone()[0] / TICKS
    steps = writer.steps_written - steps_before
    return {"gpus": gpus, "processes": statistics.median(processes), "kept": kept,
            "write_ms": statistics.median(write_ms), "sample_ms": statistics.median(sample_ms),
            "write_cpu_ms": statistics.median(write_cpu_ms),
            "sample_cpu_ms": statistics.median(sample_cpu_ms), "draw_cpu_ms": draw_cpu_ms(shown),
            "tick_bytes": tick_bytes / TICKS, "event_bytes_per_s": event_bytes / seconds,
            "step_bytes": step_bytes / max(1, steps),
            "steps": steps, "steps_per_s": steps / seconds}


def run_host(host: str) -> None:
    """Record with 1 and 8 GPUs on the processes this host shows, printing a row each."""
    sleepers: list[int] = []
    try:
        have = len(psutil.pids())
        if have < TARGET_PROCESSES:
            sleepers = spawn_sleepers(TARGET_PROCESSES - have)
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["GPUTOP_RING_DIR"] = tmp  # our trainer's ring alone, out of others' reach
            for gpus in (1, 8):
                f = record(gpus, os.path.join(tmp, f"bench-{gpus}.sqlite"))
                tui = f["sample_cpu_ms"] + f["draw_cpu_ms"]
                step_mb_h = f["step_bytes"] * f["steps_per_s"] * HOUR_S / 1e6
                second_bytes = f["tick_bytes"] + f["event_bytes_per_s"]  # a tick a second
                print(f"{host:<6} {f['gpus']:>4} {f['processes']:>5.0f} {f['kept']:>5.1f} "
                      f"{f['write_cpu_ms']:>6.2f} {f['sample_cpu_ms']:>6.2f} "
                      f"{f['draw_cpu_ms']:>6.2f} {f['write_cpu_ms'] / f['sample_cpu_ms']:>6.3f} "
                      f"{f['write_cpu_ms'] / tui:>6.3f} {f['write_ms']:>6.2f} "
                      f"{f['tick_bytes']:>7.0f} {f['event_bytes_per_s']:>5.0f} "
                      f"{second_bytes * HOUR_S / 1e6:>6.2f} {second_bytes * DAY_S / 1e6:>7.1f} "
                      f"{f['step_bytes']:>6.0f} "
                      f"{f['steps_per_s']:>6.1f} {step_mb_h:>6.2f}", flush=True)
    finally:
        kill_all(sleepers)


def ddp_breakdown() -> None:
    """Record the synthetic 8-rank DDP node and print its bytes per tick by table."""
    from tests.helpers.ddp_job import ddp_ticks

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ddp.sqlite")
        writer = RecordWriter(open_record(path))
        writer.frame_id = DAY_FRAME_ID
        frames = ddp_ticks()
        for frame in islice(frames, WARMUP_TICKS):
            writer.write(frame)
        writer.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        empty, size, stored = table_bytes(path), os.path.getsize(path), writer.steps_written
        for frame in islice(frames, DDP_TICKS):
            writer.write(frame)
        writer.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        writer.db.close()
        grown = {name: (after - empty.get(name, 0)) / DDP_TICKS
                 for name, after in table_bytes(path).items()}
        tick = (os.path.getsize(path) - size) / DDP_TICKS
        steps = (writer.steps_written - stored) / DDP_TICKS
    tables = "  ".join(f"{name} {b:.0f}" for name, b in sorted(grown.items(), key=lambda i: -i[1])
                       if b >= 1)
    print(f"ddp    8 ranks x 4 workers, {steps:.1f} steps a tick: file {tick:.0f} B/tick, "
          f"{tick * DAY_S / 1e6:.0f} MB/day at 1 Hz; cells and headers by table, B/tick: "
          f"{tables}", flush=True)


def run_in_own_namespace() -> None:
    """The same in a PID namespace of its own: 600 processes that are the benchmark's (its
    sleepers, the demo trainer and its workers), none of the other tenants' (their tests
    start trainers, browsers and compilers all the time here: rows for each). Needs root."""
    unshare = shutil.which("unshare")
    command = [unshare or "unshare", "--pid", "--fork", "--mount-proc", sys.executable,
               __file__, OWN]
    try:
        done = subprocess.run(command, timeout=1800, check=False) if unshare else None
    except (OSError, subprocess.TimeoutExpired) as exc:
        done = None
        print(f"own    (not measured: {exc})")
    if done is not None and done.returncode:
        print(f"own    (not measured: unshare exit {done.returncode}; it needs root)")
    elif unshare is None:
        print("own    (not measured: no unshare here)")


def main() -> int:
    if sys.argv[1:] == [OWN]:
        run_host("own")
        return 0
    print(f"cpus={os.cpu_count()}  ticks={TICKS} every {INTERVAL_S} s  (shared machine: "
          "compare the ratio, not the absolute ms)")
    print(f"{'host':<6} {'gpus':>4} {'procs':>5} {'kept':>5} {'write':>6} {'sample':>6} "
          f"{'draw':>6} {'w/smp':>6} {'w/tui':>6} {'write':>6} {'B/tick':>7} {'+B/s':>5} "
          f"{'MB/h':>6} {'MB/day':>7} {'B/step':>6} {'step/s':>6} {'MB/h':>6}")
    print(f"{'':>23} {'cpu ms':>6} {'cpu ms':>6} {'cpu ms':>6} {'':>13} {'wall':>6} {'':>7} "
          f"{'':>5} {'1 Hz':>6} {'1 Hz':>7} {'':>6} {'':>6} {'steps':>6}", flush=True)
    run_in_own_namespace()
    run_host("shared")
    ddp_breakdown()
    print("medians per tick. host: own, a PID namespace holding the benchmark's 600 "
          "processes alone; shared, the machine's as found (other tenants' processes too). "
          "write cpu: the recorder's CPU to store one tick (its own thread); "
          "sample cpu: the sampler's CPU to take it; draw cpu: the live view's app showing it "
          f"({TUI_SIZE[0]}x{TUI_SIZE[1]}, headless); w/smp: write / sample; w/tui: write / "
          "(sample + draw), the TUI's whole tick; write wall: the transaction's wall time. "
          "B/tick: bytes of pages per tick without steps; +B/s: rows written as things "
          "happen (process identities, texts, advice), per second; MB/h, MB/day: a tick a "
          "second with those; "
          "B/step: bytes per stored step; steps come on top at step/s (the demo trainer's "
          "here): MB/h steps.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
