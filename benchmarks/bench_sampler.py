"""`make bench`: one process scan + grouping, and one Sampler.sample, at 100/600/3000 processes.

Spawns idle `sleep` children until the machine holds N processes, measures our /proc source
beside a psutil.process_iter pass over the same processes (reference, same run), prints
ms per Frame, µs per process and the ratio, and kills every child it started.

Then, at ~600 and ~3000 processes, the floor: the cheapest pass over the same data in
Python (list /proc, then open, pread and close each /proc/PID/stat and nothing else; and
the same through fds kept open between passes, pread only), taken in turns with the
process source's scan and with a whole sampler tick (8 simulated GPUs, a probed demo
trainer attached, every source the live view has), a tick a second apart as the live view
ticks. CPU time of this thread, medians of the rounds: "scan = N x floor".
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gputop.analysis import grouping
from gputop.core.model import GpuReport
from gputop.frames.sampler import Sampler
from gputop.sources.host import ProcHostSource
from gputop.sources.processes import DEEP_QUIET_TICKS, ProcProcessSource

SIZES = (100, 600, 3000)
FLOOR_SIZES = (600, 3000)
FLOOR_ROUNDS = 15  # --quick: 5
WARM_TICKS = DEEP_QUIET_TICKS + 8
TICK_GAP_S = 1.0  # between rounds, as the live view ticks (a gate skips what did not run)
PSUTIL_ATTRS = ["pid", "ppid", "name", "status", "num_threads", "cpu_percent", "memory_info",
                "cpu_times", "create_time"]


def spawn_sleepers(count: int) -> list[int]:
    """Start `count` idle processes (posix_spawn, no shell)."""
    sleep = "/bin/sleep" if os.path.exists("/bin/sleep") else "/usr/bin/sleep"
    return [os.posix_spawn(sleep, ["sleep", "3600"], os.environ) for _ in range(count)]


def kill_all(pids: list[int]) -> None:
    """SIGKILL and reap every child we started."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def reach(target: int, sleepers: list[int]) -> None:
    """Start or end our sleepers until the machine holds about `target` processes."""
    have = len(psutil.pids())
    if have < target:
        sleepers += spawn_sleepers(target - have)
    surplus = sleepers[max(0, len(sleepers) - (have - target)):] if have > target else []
    kill_all(surplus)
    del sleepers[len(sleepers) - len(surplus):]


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of `fn` in milliseconds."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def gpu_source(owners: list[int]):
    """Eight simulated GPUs owned by a few of our sleepers, or an empty report."""
    try:
        from gputop.sources.gpu import open_gpu_source

        return open_gpu_source(simulate="mixed", count=8, owner_pids=owners[:8])
    except Exception as exc:  # the simulated source is another engineer's; degrade visibly
        print(f"   (no simulated GPUs: {exc}; Sampler measured with an empty GPU report)")

        class _None:
            def sample(self) -> GpuReport:
                return GpuReport("none")

            def close(self) -> None:
                pass

        return _None()


def measure(target: int, sleepers: list[int], repeats: int) -> dict[str, float]:
    """All figures for the machine as it is now."""
    none = GpuReport("none")
    source = ProcProcessSource()
    source.sample(none)
    rows = source.sample(none).rows
    steady = median_ms(lambda: source.sample(none), repeats)

    def relisted() -> None:
        source._listed_at = None  # as if a PID was allocated: list /proc again
        source.sample(none)

    relist = median_ms(relisted, repeats)
    classify = median_ms(lambda: grouping.classify(rows), repeats)
    first = median_ms(lambda: ProcProcessSource().sample(none), 3)
    source.close()

    sampler = Sampler(gpu=gpu_source(sleepers), host=ProcHostSource(),
                      processes=ProcProcessSource())
    sampler.sample()
    whole = median_ms(sampler.sample, repeats)
    sampler.close()

    list(psutil.process_iter(PSUTIL_ATTRS))  # first pass primes cpu_percent, as tools do
    ref = median_ms(lambda: list(psutil.process_iter(PSUTIL_ATTRS)), repeats)
    return {"n": len(rows), "steady": steady, "relist": relist, "classify": classify,
            "first": first, "sampler": whole, "psutil": ref}


def floor_pass() -> None:
    """The cheapest pass over /proc/PID/stat of every live process: list, open, pread, close."""
    for entry in os.scandir("/proc"):
        name = entry.name
        if name.isdigit():
            try:
                fd = os.open(f"/proc/{name}/stat", os.O_RDONLY)
                try:
                    os.pread(fd, 1024, 0)
                finally:
                    os.close(fd)
            except OSError:  # gone meanwhile
                continue


class KeptFloor:
    """The same pass through fds kept open between passes: one pread per process (the pids
    listed once, at the start: a floor, not a scanner)."""

    def __init__(self) -> None:
        self.fds: list[int] = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    self.fds.append(os.open(f"/proc/{entry.name}/stat", os.O_RDONLY))

    def __call__(self) -> None:
        for fd in self.fds:
            try:
                os.pread(fd, 1024, 0)
            except OSError:  # gone meanwhile
                continue

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)


def cpu_ms(fn: Callable[[], object]) -> float:
    """CPU time of this thread spent in one call of `fn`, in milliseconds (a shared machine's
    other tenants do not count, as they would in wall time)."""
    started = time.thread_time()
    fn()
    return (time.thread_time() - started) * 1e3


def demo_sampler(trainer_pid: int) -> Sampler:
    """The live view's sampler on 8 simulated GPUs with the demo trainer attached."""
    from gputop.app.wiring import build_sampler

    sampler = build_sampler(demo="mixed", gpus=8, owner_pids=[trainer_pid])
    sampler.attach(trainer_pid)
    return sampler


def floor_figures(trainer_pid: int, rounds: int) -> dict[str, float]:
    """Medians of rounds taken in turns: the floors, the process scan, the whole tick."""
    none = GpuReport("none")
    source = ProcProcessSource()
    sampler = demo_sampler(trainer_pid)
    kept = KeptFloor()
    runs: dict[str, list[float]] = {"floor": [], "kept": [], "scan": [], "tick": []}
    try:
        # The first ticks read every cmdline and open every fd; then quiet processes age
        # into the every-4th-tick look a monitor left open reaches (after DEEP_QUIET_TICKS
        # ticks: ticks, not seconds, so they may come fast).
        for _ in range(WARM_TICKS):
            source.sample(none)
            sampler.sample()
            time.sleep(0.02)
        for _ in range(rounds):
            time.sleep(TICK_GAP_S)
            runs["floor"].append(cpu_ms(floor_pass))
            runs["kept"].append(cpu_ms(kept))
            runs["scan"].append(cpu_ms(lambda: source.sample(none)))
            runs["tick"].append(cpu_ms(sampler.sample))
        processes = len(source.sample(none).rows)
    finally:
        kept.close()
        source.close()
        sampler.close()
    figures = {name: statistics.median(values) for name, values in runs.items()}
    for name in ("scan", "tick"):  # a ratio per round, then the median: noise hits both
        figures[f"{name}/floor"] = statistics.median(
            a / b for a, b in zip(runs[name], runs["floor"], strict=True) if b > 0)
        figures[f"{name}/kept"] = statistics.median(
            a / b for a, b in zip(runs[name], runs["kept"], strict=True) if b > 0)
    figures["n"] = processes
    return figures


def print_floor(sleepers: list[int], rounds: int) -> None:
    """The floor section: each size, its floors, the scan and the tick as multiples."""
    from gputop.app.children import start_demo_trainer

    print(f"\nfloor: CPU ms per pass, median of {rounds} rounds taken in turns, "
          f"{TICK_GAP_S:g} s apart")
    print(f"{'procs':>6} {'floor':>6} {'kept-fd':>7} {'scan':>6} {'scan/floor':>10} "
          f"{'scan/kept':>9} {'tick':>6} {'tick/floor':>10} {'tick/kept':>9}")
    trainer = start_demo_trainer(extra_args=("--scenario", "mixed"))
    try:
        for target in FLOOR_SIZES:
            reach(target, sleepers)
            f = floor_figures(trainer.pid, rounds)
            print(f"{f['n']:>6.0f} {f['floor']:>6.2f} {f['kept']:>7.2f} {f['scan']:>6.2f} "
                  f"{f['scan/floor']:>9.2f}x {f['scan/kept']:>8.2f}x {f['tick']:>6.2f} "
                  f"{f['tick/floor']:>9.2f}x {f['tick/kept']:>8.2f}x", flush=True)
    finally:
        trainer.stop()
    print("floor: list /proc, open + pread + close each /proc/PID/stat; kept-fd: one pread per "
          "process through fds kept open; scan: the process source (a process's CPU clock, one "
          "clock_gettime, where that shows it did not run; its stat where it did; every other "
          f"tick once it has not run for 8 ticks, every 4th once it has not for 64: a warm-up of "
          f"{WARM_TICKS} ticks ages them first); tick: Sampler.sample with 8 simulated GPUs and "
          "an attached demo trainer (every source of the live view)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args()
    repeats_scale = 3 if args.quick else 1
    print(f"cpus={os.cpu_count()}  (shared machine: compare the ratio, not the absolute ms)")
    header = (f"{'target':>6} {'procs':>6} {'steady ms':>9} {'us/proc':>7} {'relist ms':>9} "
              f"{'classify':>8} {'first ms':>8} {'Sampler':>8} {'psutil ms':>9} {'psutil/us':>9} "
              f"{'vs relist':>9}")
    print(header)
    sleepers: list[int] = []
    try:
        for target in SIZES:
            have = len(psutil.pids())
            if have < target:
                sleepers += spawn_sleepers(target - have)
            f = measure(target, sleepers,
                        repeats=(9 if target >= 3000 else 21) // repeats_scale)
            print(f"{target:>6} {f['n']:>6} {f['steady']:>9.2f} "
                  f"{1e3 * f['steady'] / f['n']:>7.1f} {f['relist']:>9.2f} {f['classify']:>8.2f} "
                  f"{f['first']:>8.1f} {f['sampler']:>8.2f} {f['psutil']:>9.2f} "
                  f"{f['psutil'] / f['steady']:>8.1f}x {f['psutil'] / f['relist']:>8.1f}x",
                  flush=True)
        print("steady: no new PID since the last tick (listing skipped, grouping cached); "
              "relist: /proc listed and grouping redone; first: a fresh source (reads every "
              "cmdline); Sampler: a whole Frame with 8 simulated GPUs; psutil: process_iter "
              "with the per-tick fields, Process objects kept between passes.")
        print_floor(sleepers, 5 if args.quick else FLOOR_ROUNDS)
    finally:
        kill_all(sleepers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
