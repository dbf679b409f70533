"""The worker advice, followed: real trainers on a deliberately busy host.

One CPU hog per core, each in a session of its own (another user's job, as on a shared GPU
server), keeps the host 100% busy. A probed trainer runs under the real sampler until the
advice shows; then the test does what it says (restarts the trainer with the suggested
num_workers) and measures samples/s before and after, interleaved (A B B A A B B A), and
compares the median of the after/before ratios of the runs taken side by side: a ratio, so
the box's speed does not matter, and pairing cancels its drift.
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
from pathlib import Path
from statistics import median

import pytest

from gputop.advice.context import Context, job_cpu, step_shape, worker_load
from gputop.model import Frame
from tests.advice.test_advice_real import (
    CORES,
    TRAINER,
    advice,
    number,
    probed_trainer,
    sample_until,
    shows,
    state,
    watching,
)
from tests.helpers.probe import ROOT

pytestmark = pytest.mark.slow

HOG = "while True:\n    pass"
ORDER = ("before", "after", "after", "before", "before", "after", "after", "before")
MEASURED_STEPS = 150
PREFETCH = 4  # the test trainer's prefetch_factor: batches each worker loads ahead
RUN_TIMEOUT_S = 300.0  # a bound on one run, not a speed check


@contextmanager
def busy_host() -> Iterator[list[int]]:
    """One CPU hog per core, each in a session of its own; killed afterwards."""
    hogs = [subprocess.Popen([sys.executable, "-c", HOG], start_new_session=True,
                             stdin=subprocess.DEVNULL) for _ in range(CORES)]
    try:
        yield [h.pid for h in hogs]
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait(timeout=30)


def samples_per_s(out: Path, workers: int, args: Sequence[str], steps: int) -> float:
    """One plain run of the trainer with `workers`: its own samples/s over `steps` steps,
    counted after start-up and after the batches loaded ahead at start are used."""
    out.mkdir(parents=True)
    ready, stats = out / "READY", out / "stats.json"
    after = 20 + 2 * PREFETCH * workers
    err = open(out / "stderr.txt", "w+b")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(
        [sys.executable, str(TRAINER), "--ready", str(ready), "--stats", str(stats),
         "--workers", str(workers), "--measure-after", str(after), *args],
        cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            if stats.exists():
                seen = json.loads(stats.read_text())
                if seen["steps"] >= after + steps:
                    return float(seen["samples_per_s"])
            if proc.poll() is not None or time.monotonic() > deadline:
                err.seek(0)
                pytest.fail(f"run with {workers} workers never finished (rc={proc.returncode}): "
                            f"{err.read().decode(errors='replace')[-2000:]}")
            time.sleep(0.1)
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        err.close()


def interleaved(tmp_path: Path, before: int, after: int, args: Sequence[str],
                steps: int = MEASURED_STEPS) -> dict[str, list[float]]:
    """samples/s of each setting, runs in ORDER."""
    rates: dict[str, list[float]] = {"before": [], "after": []}
    for i, which in enumerate(ORDER):
        workers = before if which == "before" else after
        rates[which].append(samples_per_s(tmp_path / f"run{i}-{which}", workers, args, steps))
    return rates


def report(name: str, before: int, after: int, rates: dict[str, list[float]]) -> float:
    """Print the figures (pytest -s shows them); the median of the after/before ratios of
    the runs taken side by side in ORDER (each pair saw the box in the same state)."""
    pairs = [a / b for a, b in zip(rates["after"], rates["before"], strict=True)]
    ratio = median(pairs)
    print(f"\n{name}: num_workers {before} -> {after}: samples/s before "
          f"{[round(r) for r in rates['before']]} (median {median(rates['before']):.0f}), after "
          f"{[round(r) for r in rates['after']]} (median {median(rates['after']):.0f}); "
          f"ratio of medians {median(rates['after']) / median(rates['before']):.2f}, "
          f"median of paired ratios {ratio:.2f}")
    return ratio


def ids(frames: list[Frame]) -> set[str]:
    """Every advice id shown in any frame."""
    return {a.id for f in frames for a in f.advice}


def test_io_like_loader_on_a_busy_host_gets_more_workers_and_following_it_pays(
        tmp_path: Path) -> None:
    args = ("--sleep-ms", "10")  # each sample waits 10 ms, as on slow storage
    frames: list[Frame] = []
    with busy_host():
        with probed_trainer(tmp_path / "advised", "--workers", "2", *args) as trainer, \
                watching(trainer) as sampler:
            frame = sample_until(sampler, shows("raise-num-workers"), frames)
        assert "too-many-workers" not in ids(frames)  # never told to remove workers
        found = advice(frame, "raise-num-workers")
        suggested = int(number(r"Try num_workers=(\d+)", found.action))
        assert suggested > 2
        _check_more_arithmetic(found.evidence, frame, trainer.pid, suggested)
        rates = interleaved(tmp_path, 2, suggested, args)
    assert report("I/O-like loader", 2, suggested, rates) > 1.0


def _check_more_arithmetic(evidence: str, frame: Frame, pid: int, suggested: int) -> None:
    """The evidence's numbers are the frame's, and the suggestion follows from them."""
    ctx = Context(frame, {})
    shape, load = step_shape(state(frame)), worker_load(ctx, pid)
    assert shape is not None and load is not None
    assert load.words() in evidence
    per_batch = 2 * shape.step_ms
    assert f"each takes 2 x {shape.step_ms:.1f} = {per_batch:.1f} ms per batch" in evidence
    floor = number(rf"{per_batch:.1f} / ([\d.]+) = ", evidence)
    assert suggested == min(16, -(-per_batch // floor)) or abs(per_batch / floor
                                                                - round(per_batch / floor)) < 0.1
    job = job_cpu(ctx, pid, load.starved)
    assert job is not None and f"({job.words()})" in evidence


def test_cpu_heavy_loader_beyond_the_cores_gets_too_many_and_following_it_costs_nothing(
        tmp_path: Path) -> None:
    # Each sample burns 8 ms of CPU, as decoding does; the model's 100 passes a step take
    # longer still, so the workers run ahead of the step and queue for the cores.
    workers = CORES + 2
    args = ("--spin-ms", "8", "--passes", "100")
    frames: list[Frame] = []
    with busy_host():
        with probed_trainer(tmp_path / "advised", "--workers", str(workers), *args) as trainer, \
                watching(trainer) as sampler:
            frame = sample_until(sampler, shows("too-many-workers", min_steps=1), frames)
        assert "raise-num-workers" not in ids(frames)  # never told to add workers
        found = advice(frame, "too-many-workers")
        load = worker_load(Context(frame, {}), trainer.pid)
        assert load is not None and load.starved and load.words() in found.evidence
        suggested = int(number(r"Try num_workers=(\d+)", found.action))
        assert CORES <= suggested < workers
        rates = interleaved(tmp_path, workers, suggested, args, steps=100)
    # Fewer processes doing the same work: no fewer samples/s (the box's noise aside).
    assert report("CPU-heavy loader", workers, suggested, rates) >= 0.9
