"""The worker advice, followed: real trainers on a deliberately busy host.

One CPU hog per core, each in a session of its own (another user's job, as on a shared GPU
server), keeps the host 100% busy. A probed trainer runs under the real sampler until the
advice shows; then the test does what it says (restarts the trainer with the suggested
num_workers) and measures samples/s before and after, interleaved (tests/helpers/follow.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gputop.advice.context import Context, job_cpu, step_shape, worker_load
from gputop.model import Frame
from tests.advice.test_advice_real import (
    advice,
    number,
    probed_trainer,
    sample_until,
    shows,
    state,
    watching,
)
from tests.advice.test_follow_advice_real import followed
from tests.helpers.follow import CORES, busy_host, interleaved, report, with_workers

pytestmark = pytest.mark.slow

MEASURED_STEPS = 150


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
        assert "io-bound-loading" in ids(frames)  # its "more workers" is followed here too
        found = advice(frame, "raise-num-workers")
        suggested = int(number(r"Try num_workers=(\d+)", found.action))
        assert suggested > 2
        _check_more_arithmetic(found.evidence, frame, trainer.pid, suggested)
        runs = interleaved(tmp_path, with_workers(2, *args), with_workers(suggested, *args),
                            MEASURED_STEPS)
        after = followed(tmp_path, with_workers(suggested, *args))
    assert report("I/O-like loader", f"num_workers 2 -> {suggested}", runs) > 1.0
    # Followed: never told to go back; any further "more" asks for more still.
    assert "too-many-workers" not in ids(after)
    more = [number(r"Try num_workers=(\d+)", a.action) for f in after for a in f.advice
            if a.id == "raise-num-workers"]
    assert all(n > suggested for n in more), more


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
        runs = interleaved(tmp_path, with_workers(workers, *args),
                            with_workers(suggested, *args), 100)
    # Fewer processes doing the same work: no fewer samples/s (the box's noise aside).
    assert report("CPU-heavy loader", f"num_workers {workers} -> {suggested}", runs) >= 0.9
