"""Following advice in a test: run the test trainer one way and the way the advice says,
interleaved, and compare the samples/s the trainer measured itself.

Runs take turns in ORDER (A B B A) and the result is the median of the after/before ratios
of the runs taken side by side: a ratio, so the box's speed does not matter, and pairing
cancels its drift (other jobs on a shared host come and go). Two pairs suffice for effects
far from the bound a test checks; LONG_ORDER's four pairs are for effects near it. Each run
is favoured (tests/helpers/scheduling.py), as are the hogs of a busy host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence, Set
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from statistics import median

import pytest

from tests.helpers.advice_run import Job, start_failure, trainer_command
from tests.helpers.memcg import MemoryCgroup
from tests.helpers.scheduling import favoured

HOG = "while True:\n    pass"
ORDER = ("before", "after", "after", "before")
LONG_ORDER = ORDER + ORDER
PREFETCH = 4  # the test trainer's prefetch_factor: batches each worker loads ahead
START_STEPS = 20  # steps the trainer takes before it counts (imports, first batches)
RUN_TIMEOUT_S = 300.0  # a bound on one run, not a speed check


@dataclass(frozen=True)
class Setting:
    """One way to run the test trainer: its flags, the steps it takes before its samples/s
    count (start-up, and the batches its workers loaded ahead at start), the CPUs it and
    its workers are pinned to (None: any), the ranks torchrun starts (0: no torchrun), and
    the memory cgroup it runs in (None: the test's own)."""

    args: tuple[str, ...]
    warm_steps: int = START_STEPS
    cpus: frozenset[int] | None = None
    ranks: int = 0
    cgroup: MemoryCgroup | None = None


def with_workers(workers: int, *args: str, cpus: frozenset[int] | None = None) -> Setting:
    """The trainer with `workers` DataLoader workers, measured once the batches they load
    ahead at start are used."""
    return Setting(("--workers", str(workers), *args), START_STEPS + 2 * PREFETCH * workers,
                   cpus)


@contextmanager
def busy_host() -> Iterator[list[int]]:
    """One CPU hog pinned to each core, each in a favoured session of its own (another
    user's job, as on a shared GPU server, as heavy as the test's trainer); killed
    afterwards."""
    hogs = [subprocess.Popen([sys.executable, "-c", HOG], start_new_session=True,
                             preexec_fn=favoured({cpu}), stdin=subprocess.DEVNULL)
            for cpu in sorted(os.sched_getaffinity(0))]
    try:
        yield [h.pid for h in hogs]
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait(timeout=30)


@dataclass(frozen=True)
class Run:
    """What one run measured: the trainer's own samples/s, and the cores the host's other
    work (anything outside the trainer's session) kept busy meanwhile, on average."""

    samples_per_s: float
    other_cores: float


def samples_per_s(out: Path, setting: Setting, steps: int) -> Run:
    """One plain run of the trainer (no probe): its own samples/s over `steps` steps after
    its warm steps. A torchrun job that ends before its first step is run once more,
    saying so (torchrun on a busy host now and then aborts at start)."""
    run = _one_run(out, setting, steps)
    if isinstance(run, str) and setting.ranks:
        print(f"\n{out.name}: torchrun ended at start ({start_failure(run)}); retried once")
        out = out.with_name(f"{out.name}-retry")
        run = _one_run(out, setting, steps)
    if isinstance(run, str):
        pytest.fail(f"run {setting.args} ended before its first step: {run[-2000:]}")
    return run


def _one_run(out: Path, setting: Setting, steps: int) -> Run | str:
    """The run's figures, or its stderr when it ended before its first step."""
    out.mkdir(parents=True)
    ready, stats = out / "READY", out / "stats.json"
    err = open(out / "stderr.txt", "w+b")  # noqa: SIM115 - closed in finally
    host_before, wall_before = _host_busy_s(), time.monotonic()
    job = Job.start([*trainer_command(setting.ranks), "--ready", str(ready), "--stats",
                     str(stats), "--measure-after", str(setting.warm_steps), *setting.args],
                    err, setting.cpus, setting.ranks, cgroup=setting.cgroup)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            if stats.exists():
                seen = json.loads(stats.read_text())
                if seen["steps"] >= setting.warm_steps + steps:
                    others = (_host_busy_s() - host_before - _sessions_cpu_s(job.sessions)) / (
                        time.monotonic() - wall_before)
                    return Run(float(seen["samples_per_s"]), max(0.0, others))
            if job.poll() is not None or time.monotonic() > deadline:
                err.seek(0)
                text = err.read().decode(errors="replace")
                if job.proc.returncode is not None and not ready.exists():
                    return text
                pytest.fail(f"run {setting.args} never finished (rc={job.proc.returncode}): "
                            f"{text[-2000:]}")
            time.sleep(0.1)
    finally:
        job.kill()
        err.close()


def _host_busy_s() -> float:
    """CPU seconds the host's cores spent busy since boot (all but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _sessions_cpu_s(sids: Set[int]) -> float:
    """CPU seconds of the processes still in sessions `sids` (the trainer, its ranks and
    their workers)."""
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = Path(f"/proc/{name}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[3]) in sids:  # fields after the name: state ppid pgrp session ...
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


Runs = dict[str, list[Run]]


def interleaved(tmp_path: Path, before: Setting, after: Setting, steps: int,
                order: Sequence[str] = ORDER) -> Runs:
    """The runs of each setting, taken in `order`."""
    runs: Runs = {"before": [], "after": []}
    settings = {"before": before, "after": after}
    for i, which in enumerate(order):
        runs[which].append(samples_per_s(tmp_path / f"run{i}-{which}", settings[which], steps))
    return runs


def report(name: str, change: str, runs: Runs) -> float:
    """Print the figures (pytest -s shows them); the median of the after/before ratios of
    the runs taken side by side."""
    rates = {k: [r.samples_per_s for r in v] for k, v in runs.items()}
    pairs = [a / b for a, b in zip(rates["after"], rates["before"], strict=True)]
    ratio = median(pairs)
    print(f"\n{name}: {change}: samples/s before {[round(r) for r in rates['before']]} "
          f"(median {median(rates['before']):.0f}), after {[round(r) for r in rates['after']]} "
          f"(median {median(rates['after']):.0f}); ratio of medians "
          f"{median(rates['after']) / median(rates['before']):.2f}, median of paired ratios "
          f"{ratio:.2f}; other work {max(other_cores(runs).values()):.2f} cores at most")
    return ratio


def other_cores(runs: Runs) -> dict[str, float]:
    """Per setting, the median cores other work kept busy during its runs."""
    return {k: median(r.other_cores for r in v) for k, v in runs.items()}
