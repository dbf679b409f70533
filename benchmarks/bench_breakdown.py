"""`make bench`: where the live view's CPU goes, part by part, at ~600 processes with 8
simulated GPUs and the demo trainer attached (bench_tui's gputop+8gpu), 80x24 and 200x50.

The live view runs in tmux as bench_tui runs it, with its parts wrapped: each call of a
part adds the CPU time its thread spent in it. The figures are the steady state (after the
process scan's quiet processes aged into its every-4th-tick look): each thread's CPU per
second, and each part's with its calls per second. A part includes the parts it calls (the
sampler's tick includes its process scan); the wrapping adds about a microsecond a call, a
few dozen calls a second. bench_tui gives the live view's total beside btop's; this says
which parts make it up, so the next cut goes where the time is.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_tui import gputop_command, reach, start, stop

PROCESSES = 600
SIZES = ((80, 24), (200, 50))
WARM_S, QUICK_WARM_S = 75.0, 20.0  # a process quiet for 64 ticks is looked at every 4th
SECONDS, QUICK_SECONDS = 40.0, 15.0
# The parts: (module, qualified name, what it is). Sampler parts, then the app's.
PARTS = (
    ("gputop.frames.sampler", "Sampler.sample", "sampler tick (all of the below)"),
    ("gputop.sources.processes", "ProcProcessSource.sample", "process scan"),
    ("gputop.frames.derive", "Derivation.processes", "roles, groups, waits"),
    ("gputop.sources.attach", "RingAttachSource.sample", "trainer ring read"),
    ("gputop.frames.derive", "Derivation.attached", "step window, verdicts"),
    ("gputop.advice", "Advisor.__call__", "advice"),
    ("gputop.sources.simulated", "SimulatedGpuSource.sample", "8 simulated GPUs"),
    ("gputop.sources.membw", "MemoryBandwidthMonitor.sample", "memory bandwidth"),
    ("gputop.sources.host", "ProcHostSource.sample", "host CPU and memory"),
    ("gputop.sources.attach", "RingAttachSource.probe_pids", "rings listing"),
    ("gputop.tui.app", "GputopApp.show_frame", "frame shown (all of the below)"),
    ("gputop.tui.app", "GputopApp._gpu_lines", "GPU pane lines"),
    ("gputop.tui.app", "GputopApp._step_lines", "step pane lines"),
    ("gputop.tui.app", "GputopApp._host_lines", "host pane lines"),
    ("gputop.tui.widgets.table", "ProcessTable.show", "process table"),
    ("gputop.tui.widgets.linepane", "LinePane.set_lines", "pane lines compared"),
    ("gputop.tui.paint", "_paint", "changed rows written"),
    ("textual.app", "App._display", "Textual's write"),
)
THREAD_OF = {"Sampler.sample": "sampler", "GputopApp.show_frame": "app"}


class Parts:
    """CPU time spent in each wrapped part, by the thread that called it."""

    def __init__(self) -> None:
        self.totals: dict[str, list[int]] = {}  # name -> [ns, calls]
        self.tids: dict[str, int] = {}  # name -> the thread that called it last
        self._lock = threading.Lock()

    def wrap(self, module: str, qualified: str) -> None:
        """Count the calls of `module`'s `qualified` (Class.method) from now on."""
        owner: Any = importlib.import_module(module)
        *path, name = qualified.split(".")
        for part in path:
            owner = getattr(owner, part)
        original: Callable[..., Any] = owner.__dict__[name]
        totals = self.totals.setdefault(qualified, [0, 0])

        @functools.wraps(original)
        def counted(*args: Any, **kwargs: Any) -> Any:
            began = time.thread_time_ns()
            try:
                return original(*args, **kwargs)
            finally:
                spent = time.thread_time_ns() - began
                with self._lock:
                    totals[0] += spent
                    totals[1] += 1
                    self.tids[qualified] = threading.get_native_id()

        setattr(owner, name, counted)

    def snapshot(self) -> dict[str, tuple[int, int]]:
        with self._lock:
            return {name: (ns, calls) for name, (ns, calls) in self.totals.items()}


def threads_ns() -> dict[int, int]:
    """Run time of each of this process's threads now, by TID."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        with suppress(OSError):
            out[int(tid)] = int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])
    return out


def serve(report_path: str, warm_s: float, seconds: float, gputop_args: list[str]) -> int:
    """Run the real gputop command line with its parts counted; after `warm_s`, count for
    `seconds` and write the figures, as JSON, to `report_path`."""
    parts = Parts()
    for module, qualified, _ in PARTS:
        parts.wrap(module, qualified)

    def report() -> None:
        time.sleep(warm_s)
        parts_before, threads_before = parts.snapshot(), threads_ns()
        time.sleep(seconds)
        parts_after, threads_after = parts.snapshot(), threads_ns()
        role = {tid: THREAD_OF[part] for part, tid in parts.tids.items() if part in THREAD_OF}
        threads: dict[str, float] = {}
        for tid, ns in threads_after.items():
            name = role.get(tid, "other threads")
            spent_ms = (ns - threads_before.get(tid, 0)) / 1e6
            threads[name] = threads.get(name, 0.0) + spent_ms / seconds
        figures = {
            "threads": threads,
            "parts": {k: ((ns - parts_before[k][0]) / 1e6 / seconds,
                          (calls - parts_before[k][1]) / seconds)
                      for k, (ns, calls) in parts_after.items()},
        }
        Path(report_path).write_text(json.dumps(figures))

    threading.Thread(target=report, daemon=True).start()
    from gputop.app.cli import main as gputop_main

    return gputop_main(gputop_args)


def measure(size: tuple[int, int], warm_s: float, seconds: float) -> dict[str, Any]:
    """The figures of one run at `size`."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "parts.json"
        command = [gputop_command()[0], str(Path(__file__).resolve()), "--serve", str(report),
                   str(warm_s), str(seconds), "--demo", "mixed", "--gpus", "8"]
        name = f"gputop-breakdown-{os.getpid()}"
        pid = start(name, command, size, {"TERM": "xterm-256color"})
        try:
            deadline = time.monotonic() + warm_s + seconds + 60
            while not report.exists():
                if time.monotonic() > deadline or not os.path.exists(f"/proc/{pid}"):
                    raise SystemExit(f"the live view at {size[0]}x{size[1]} wrote no figures")
                time.sleep(0.5)
            time.sleep(0.1)  # written whole: one write_text of a small file
            return dict(json.loads(report.read_text()))
        finally:
            stop(name, pid)


def print_figures(size: tuple[int, int], figures: dict[str, Any]) -> None:
    """Threads, then each part: ms of CPU a second, its share of the total, calls a second."""
    threads = figures["threads"]
    total = sum(threads.values())
    print(f"\n{size[0]}x{size[1]}: {total:.2f} ms CPU per second in all "
          + ", ".join(f"{name} {ms:.2f}" for name, ms in
                      sorted(threads.items(), key=lambda kv: -kv[1])))
    print(f"  {'part':<30} {'what':<32} {'ms/s':>6} {'share':>6} {'calls/s':>7}")
    for _, qualified, what in PARTS:
        ms, calls = figures["parts"].get(qualified, (0.0, 0.0))
        print(f"  {qualified:<30} {what:<32} {ms:>6.2f} {ms / total:>6.0%} {calls:>7.1f}")


def main() -> int:
    if sys.argv[1:2] == ["--serve"]:
        return serve(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a shorter warm-up and window")
    args = parser.parse_args()
    warm_s, seconds = (QUICK_WARM_S, QUICK_SECONDS) if args.quick else (WARM_S, SECONDS)
    sleepers: list[Any] = []
    try:
        reach(PROCESSES, sleepers)
        print(f"gputop --demo mixed --gpus 8 at ~{PROCESSES} processes: CPU by part after "
              f"{warm_s:g} s, over {seconds:g} s (thread CPU time; a part includes those it "
              "calls)")
        for size in SIZES:
            print_figures(size, measure(size, warm_s, seconds))
    finally:
        for proc in sleepers:
            proc.kill()
            proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
