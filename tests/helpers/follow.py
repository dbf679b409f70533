"""Following advice in a test: run the test trainer one way and the way the advice says,
interleaved, and compare the samples/s the trainer measured itself.

Runs take turns in ORDER (A B B A A B B A) and the result is the median of the after/before
ratios of the runs taken side by side: a ratio, so the box's speed does not matter, and
pairing cancels its drift (other jobs on a shared host come and go).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from statistics import median

import pytest

from tests.helpers.probe import ROOT

TRAINER = ROOT / "tests" / "advice" / "trainer.py"
CORES = os.cpu_count() or 1
HOG = "while True:\n    pass"
ORDER = ("before", "after", "after", "before", "before", "after", "after", "before")
PREFETCH = 4  # the test trainer's prefetch_factor: batches each worker loads ahead
START_STEPS = 20  # steps the trainer takes before it counts (imports, first batches)
RUN_TIMEOUT_S = 300.0  # a bound on one run, not a speed check


@dataclass(frozen=True)
class Setting:
    """One way to run the test trainer: its flags, and the steps it takes before its
    samples/s count (start-up, and the batches its workers loaded ahead at start)."""

    args: tuple[str, ...]
    warm_steps: int = START_STEPS


def with_workers(workers: int, *args: str) -> Setting:
    """The trainer with `workers` DataLoader workers, measured once the batches they load
    ahead at start are used."""
    return Setting(("--workers", str(workers), *args), START_STEPS + 2 * PREFETCH * workers)


@contextmanager
def busy_host() -> Iterator[list[int]]:
    """One CPU hog per core, each in a session of its own (another user's job, as on a
    shared GPU server); killed afterwards."""
    hogs = [subprocess.Popen([sys.executable, "-c", HOG], start_new_session=True,
                             stdin=subprocess.DEVNULL) for _ in range(CORES)]
    try:
        yield [h.pid for h in hogs]
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait(timeout=30)


def samples_per_s(out: Path, setting: Setting, steps: int) -> float:
    """One plain run of the trainer (no probe): its own samples/s over `steps` steps after
    its warm steps."""
    out.mkdir(parents=True)
    ready, stats = out / "READY", out / "stats.json"
    err = open(out / "stderr.txt", "w+b")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(
        [sys.executable, str(TRAINER), "--ready", str(ready), "--stats", str(stats),
         "--measure-after", str(setting.warm_steps), *setting.args],
        cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            if stats.exists():
                seen = json.loads(stats.read_text())
                if seen["steps"] >= setting.warm_steps + steps:
                    return float(seen["samples_per_s"])
            if proc.poll() is not None or time.monotonic() > deadline:
                err.seek(0)
                pytest.fail(f"run {setting.args} never finished (rc={proc.returncode}): "
                            f"{err.read().decode(errors='replace')[-2000:]}")
            time.sleep(0.1)
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        err.close()


def interleaved(tmp_path: Path, before: Setting, after: Setting, steps: int,
                order: Sequence[str] = ORDER) -> dict[str, list[float]]:
    """samples/s of each setting, runs in `order`."""
    rates: dict[str, list[float]] = {"before": [], "after": []}
    settings = {"before": before, "after": after}
    for i, which in enumerate(order):
        rates[which].append(samples_per_s(tmp_path / f"run{i}-{which}", settings[which], steps))
    return rates


def report(name: str, change: str, rates: dict[str, list[float]]) -> float:
    """Print the figures (pytest -s shows them); the median of the after/before ratios of
    the runs taken side by side."""
    pairs = [a / b for a, b in zip(rates["after"], rates["before"], strict=True)]
    ratio = median(pairs)
    print(f"\n{name}: {change}: samples/s before {[round(r) for r in rates['before']]} "
          f"(median {median(rates['before']):.0f}), after {[round(r) for r in rates['after']]} "
          f"(median {median(rates['after']):.0f}); ratio of medians "
          f"{median(rates['after']) / median(rates['before']):.2f}, median of paired ratios "
          f"{ratio:.2f}")
    return ratio
