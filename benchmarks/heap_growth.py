"""Where the live TUI's memory goes: the real sampler and the app in one process, traced.

Each tick does what `gputop --demo data-starved --interval 0.1` does: the real Sampler
(simulated GPUs, /proc, rings, advice) attached to the real demo trainer, and its Frame
shown by the app users run (fed through the test FedSampler, drawn by Textual's headless
driver), so the panes' caches are included. Short-lived processes are started beside it
(`--churn` per tick) so that anything kept per PID would show. Python's traced heap is
snapshotted at `--first` and at the end; the lines that grew most between them, and the
object types whose count grew, are printed with the growth per 1000 ticks.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SIZE = (120, 40)
TOP = 25


def object_counts() -> Counter[str]:
    """Live gc-tracked objects by type name."""
    return Counter(type(o).__qualname__ for o in gc.get_objects())


class Checkpoint:
    """The heap at one tick: its size, object counts, and a tracemalloc snapshot kept in a
    file (held in memory it would count as growth by the next checkpoint)."""

    def __init__(self, tick: int, folder: str) -> None:
        gc.collect()
        self.tick = tick
        self.traced = tracemalloc.get_traced_memory()[0]
        self.objects = object_counts()
        self.path = f"{folder}/tick-{tick}.snapshot"
        tracemalloc.take_snapshot().dump(self.path)

    @property
    def snapshot(self) -> tracemalloc.Snapshot:
        """The snapshot, read back (without tracemalloc's and this script's own traces)."""
        return tracemalloc.Snapshot.load(self.path).filter_traces(
            (tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, __file__)))


def report(first: Checkpoint, last: Checkpoint) -> None:
    """The growth between two checkpoints: total, by line, by object type."""
    ticks = last.tick - first.tick
    per_1000 = (last.traced - first.traced) / ticks * 1000 / 1024
    print(f"\ntraced heap: {first.traced / 2**20:.2f} MiB at tick {first.tick} -> "
          f"{last.traced / 2**20:.2f} MiB at tick {last.tick}: {per_1000:+.1f} KiB per 1000 ticks")
    print(f"\ntop {TOP} lines by growth (KiB, count):")
    for stat in last.snapshot.compare_to(first.snapshot, "lineno")[:TOP]:
        frame = stat.traceback[0]
        name = frame.filename.replace(str(REPO) + "/", "")
        for marker in ("site-packages/", "lib/python3"):
            if marker in name:
                name = name.split(marker, 1)[1]
        print(f"  {stat.size_diff / 1024:+9.1f} {stat.count_diff:+7d}  {name}:{frame.lineno}")
    grown = {k: last.objects[k] - first.objects.get(k, 0) for k in last.objects}
    print("\nobject types whose count grew most:")
    for name, diff in sorted(grown.items(), key=lambda kv: -kv[1])[:15]:
        if diff > 0:
            print(f"  {diff:+7d}  {name} ({last.objects[name]})")


def churn(count: int, children: list[subprocess.Popen[bytes]]) -> None:
    """Start `count` short-lived processes and reap those that ended."""
    for _ in range(count):
        children.append(subprocess.Popen(["sleep", "0.3"]))
    children[:] = [c for c in children if c.poll() is None]


async def soak(ticks: int, first_at: int, sleep_s: float, churn_per_tick: int,
               with_app: bool = True) -> None:
    """Run the ticks, checkpointing at `first_at` and at the end."""
    from gputop.app.children import start_demo_trainer
    from gputop.app.wiring import build_sampler
    from gputop.tui import build_app
    from gputop.tui.widgets.linepane import LinePane
    from tests.helpers.tui import FedSampler

    folder = tempfile.mkdtemp(prefix="gputop-heap-")
    trainer = start_demo_trainer()
    children: list[subprocess.Popen[bytes]] = []
    try:
        sampler = build_sampler(demo="data-starved", interval_s=0.1, owner_pids=[trainer.pid])
        sampler.attach(trainer.pid)
        app = build_app(FedSampler())
        first: Checkpoint | None = None
        started = time.monotonic()
        async with app.run_test(size=SIZE) as pilot:
            for tick in range(1, ticks + 1):
                churn(churn_per_tick, children)
                frame = sampler.sample()
                if with_app:
                    app.show_frame(frame)
                    await pilot.pause()
                if sleep_s:
                    await asyncio.sleep(sleep_s)
                if tick == first_at:
                    first = Checkpoint(tick, folder)
                if tick % 500 == 0:
                    traced, peak = (size / 2**20 for size in tracemalloc.get_traced_memory())
                    tracemalloc.reset_peak()
                    strips = sum(pane.cached_strips for pane in app.query(LinePane))
                    print(f"tick {tick:6d}  {time.monotonic() - started:6.0f} s  traced "
                          f"{traced:6.2f} MiB (peak {peak:6.2f} since the last line)  "
                          f"strips cached {strips:5d}", flush=True)
            last = Checkpoint(ticks, folder)
        sampler.close()
    finally:
        trainer.stop()
        for child in children:
            child.wait(5)
    assert first is not None
    report(first, last)
    shutil.rmtree(folder)


def main() -> int:
    """Parse the options and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=5000)
    parser.add_argument("--first", type=int, default=1000, help="tick of the first snapshot")
    parser.add_argument("--sleep", type=float, default=0.02, help="seconds between ticks")
    parser.add_argument("--churn", type=int, default=1, help="short-lived processes per tick")
    parser.add_argument("--frames", type=int, default=1, help="traceback depth traced")
    parser.add_argument("--no-app", action="store_true", help="the sampler alone")
    args = parser.parse_args()
    tracemalloc.start(args.frames)
    asyncio.run(soak(args.ticks, args.first, args.sleep, args.churn, not args.no_app))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
