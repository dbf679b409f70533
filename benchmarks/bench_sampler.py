"""`make bench`: one process scan + grouping, and one Sampler.sample, at 100/600/3000 processes.

Spawns idle `sleep` children until the machine holds N processes, measures our /proc source
beside a psutil.process_iter pass over the same processes (reference, same run), prints
ms per Frame, µs per process and the ratio, and kills every child it started.
"""

from __future__ import annotations

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
from gputop.model import GpuReport
from gputop.sampler import Sampler
from gputop.sources.host import ProcHostSource
from gputop.sources.processes import ProcProcessSource

SIZES = (100, 600, 3000)
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


def main() -> int:
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
            f = measure(target, sleepers, repeats=9 if target >= 3000 else 21)
            print(f"{target:>6} {f['n']:>6} {f['steady']:>9.2f} "
                  f"{1e3 * f['steady'] / f['n']:>7.1f} {f['relist']:>9.2f} {f['classify']:>8.2f} "
                  f"{f['first']:>8.1f} {f['sampler']:>8.2f} {f['psutil']:>9.2f} "
                  f"{f['psutil'] / f['steady']:>8.1f}x {f['psutil'] / f['relist']:>8.1f}x",
                  flush=True)
    finally:
        kill_all(sleepers)
    print("steady: no new PID since the last tick (listing skipped, grouping cached); relist: "
          "/proc listed and grouping redone; first: a fresh source (reads every cmdline); "
          "Sampler: a whole Frame with 8 simulated GPUs; psutil: process_iter with the "
          "per-tick fields, Process objects kept between passes.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
