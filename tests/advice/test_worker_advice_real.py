"""The worker advice, followed: real trainers on a deliberately busy host.

One CPU hog pinned to each core, each in a session of its own (another user's job, as on a
shared GPU server), keeps the host 100% busy; the hogs and the trainer are favoured alike
(tests/helpers/scheduling.py), so other work on a shared host changes the scenario little.
A probed trainer runs under the real sampler until the advice shows; then the test does
what it says (restarts the trainer with the suggested num_workers) and measures samples/s
before and after, interleaved (tests/helpers/follow.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gputop.advice.context import Context, figure, job_cpu, step_shape, worker_load
from gputop.core.model import Frame
from tests.helpers.advice_run import (
    CORES,
    advice,
    followed,
    ids,
    number,
    probed_trainer,
    sample_until,
    shows,
    state,
    watching,
)
from tests.helpers.arithmetic import printed_arithmetic
from tests.helpers.follow import busy_host, interleaved, report, with_workers

pytestmark = [pytest.mark.slow, pytest.mark.alone]

MEASURED_STEPS = 60


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
        after = followed(tmp_path, with_workers(suggested, *args).args)
    assert report("I/O-like loader", f"num_workers 2 -> {suggested}", runs) > 1.0
    # Followed: never told to go back; any further "more" asks for more still.
    assert "too-many-workers" not in ids(after)
    more = [number(r"Try num_workers=(\d+)", a.action) for f in after for a in f.advice
            if a.id == "raise-num-workers"]
    assert all(n > suggested for n in more), more


def _check_more_arithmetic(evidence: str, frame: Frame, pid: int, suggested: int) -> None:
    """The evidence's numbers are the frame's, its arithmetic holds as printed, and the
    suggestion is its conclusion."""
    ctx = Context(frame, {})
    shape, load = step_shape(state(frame)), worker_load(ctx, pid)
    assert shape is not None and load is not None
    assert load.words() in evidence
    step = figure(shape.step_ms)
    assert f"a batch every {step} ms on average, so each takes 2 x {step} = " in evidence
    assert printed_arithmetic(evidence) == 2
    assert f"→ {suggested} workers" in evidence
    job = job_cpu(ctx, pid, load.starved)
    assert job is not None and f"({job.words()})" in evidence


# A CPU-heavy loader beyond the cores: each sample burns 8 ms of CPU (as decoding does) and
# each step 7 ms beside the model, both in CPU time, so the same on any machine; the job is
# pinned to one core beside that core's hog (all three favoured alike, so other work on a
# shared host changes little). The trainer and its busy workers share half a core: each
# busy worker queues for it several times as long as it runs, and the workers run ahead of
# the step (compute-bound, about a quarter of step time waiting for input) yet are busy
# about 45% of the time each: in the middle of what the rule needs to speak (from 30% to
# (n - 1) / (1.5 n): fewer workers with headroom must still fit the work).
HEAVY_WORKERS = max(8, 2 * CORES)  # more than the cores; what it suggests still covers them
HEAVY = ("--spin-ms", "8", "--step-spin-ms", f"{7 * 8 / HEAVY_WORKERS:g}")
ONE_CORE = frozenset({min(os.sched_getaffinity(0))})
HEAVY_STEPS = 40  # CPU time on a favoured, pinned core: its samples/s barely vary


def test_cpu_heavy_loader_beyond_the_cores_gets_too_many_and_following_it_costs_nothing(
        tmp_path: Path) -> None:
    workers = HEAVY_WORKERS
    frames: list[Frame] = []
    with busy_host():
        with probed_trainer(tmp_path / "advised", "--workers", str(workers), *HEAVY,
                            cpus=ONE_CORE) as trainer, watching(trainer) as sampler:
            frame = sample_until(sampler, shows("too-many-workers", min_steps=1), frames)
        assert "raise-num-workers" not in ids(frames)  # never told to add workers
        # Not waiting for data: its step's own spin is host code (Python outside the model),
        # and the hog beside it on its one core may starve it.
        assert state(frame).summary.verdict in ("compute-bound", "host-bound", "cpu-starved")
        found = advice(frame, "too-many-workers")
        load = worker_load(Context(frame, {}), trainer.pid)
        assert load is not None and load.starved and load.words() in found.evidence
        suggested = int(number(r"Try num_workers=(\d+)", found.action))
        assert CORES <= suggested < workers
        runs = interleaved(tmp_path, with_workers(workers, *HEAVY, cpus=ONE_CORE),
                           with_workers(suggested, *HEAVY, cpus=ONE_CORE), HEAVY_STEPS)
    # Fewer processes doing the same work: no fewer samples/s (the box's noise aside).
    assert report("CPU-heavy loader", f"num_workers {workers} -> {suggested}", runs) >= 0.9
