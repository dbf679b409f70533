"""num-workers-zero, followed on a CPU-only trainer whose model's threads fill the cores.

The issue's finding: on a 2-core CPU-only host, minGPT's 2 intra-op threads held both cores
and its batches were CPU work in the training process; the advice predicted 1.57x with 2
workers and following it lost 5 % of the samples/s. Here a real probed trainer (as many
intra-op threads as the host has cores, each sample burning CPU in the training process)
runs under the real sampler; the rule either speaks, and following it pays what it
predicted, or stays quiet, and the workers the job's CPU alone called for do not deliver
what that core-blind prediction promised. Samples/s are measured before and after in the
same test, interleaved (tests/helpers/follow.py): a ratio, never a time.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gputop.advice.context import Context, ceil_div, job_cpu, step_shape
from gputop.advice.loader_rules import MAX_WORKERS, MIN_GAIN
from gputop.core.model import Frame
from tests.helpers.advice_run import (
    CORES,
    PARALLEL,
    TICK_S,
    Need,
    number,
    probed_trainer,
    sample_until,
    state,
    watching,
)
from tests.helpers.follow import interleaved, report, with_workers

pytestmark = [pytest.mark.slow, pytest.mark.alone]

# Each sample burns this much CPU in the training process (decoding-like): a batch's loading
# takes about half as long again as the model's compute of it (as in the minGPT run,
# 60 % of the step), so its steps wait for data.
LOADING = ("--spin-ms", "0.8")
STEADY_FRAMES = 10  # frames of a data-bound window in which the rule had its chance
MEASURED_STEPS = 40


def _data_bound(frame: Frame) -> bool:
    """The trainer's window holds enough steps and says it waits for data."""
    if not frame.attached or frame.host.cpu_percent is None:
        return False
    summary = state(frame).summary
    return summary.steps >= 20 and summary.verdict == "data-bound"


def test_num_workers_zero_where_the_models_threads_fill_the_cores(tmp_path: Path) -> None:
    if CORES < 2:
        pytest.skip("one core: no threads to fill it with beside a worker")
    model = ("--threads", str(CORES), *PARALLEL)
    inline = with_workers(0, *model, *LOADING)
    frames: list[Frame] = []
    with probed_trainer(tmp_path / "advised", *inline.args) as trainer, \
            watching(trainer) as sampler:
        # The model's compute takes longer on a host whose other work holds the cores: where
        # its steps never wait for data, the rule has nothing to say and the test skips.
        sample_until(sampler, _data_bound, frames, need=Need("a data-bound window", _data_bound))
        steady: list[Frame] = []
        while len(steady) < STEADY_FRAMES:
            time.sleep(TICK_S)
            steady.append(sampler.sample())
    assert state(steady[-1]).config.num_threads == CORES  # the model's threads fill the cores
    spoken = [a for f in steady for a in f.advice if a.id == "num-workers-zero"]
    if spoken:
        found = spoken[-1]
        suggested = int(number(r"num_workers=(\d+)", found.action))
        predicted = number(r"\(([\d.]+)x the samples/s\)", found.action)
        assert suggested >= 1 and predicted >= 1 + MIN_GAIN
        runs = interleaved(tmp_path, inline, with_workers(suggested, *model, *LOADING),
                           MEASURED_STEPS)
        ratio = report("num-workers-zero, model threads filling the cores",
                       f"num_workers 0 -> {suggested} (predicted {predicted:.2f}x)", runs)
        assert ratio >= 1.0, f"following the advice slowed training: {found.evidence}"
        assert predicted / 1.5 <= ratio <= 1.5 * predicted, found.evidence
        return
    # Quiet: what the job's CPU alone predicted (the advice, blind to the cores the
    # workers take from the model's threads) is not what following it delivers.
    workers, promised = _core_blind_prediction(steady[-1])
    if promised < 1 + MIN_GAIN:
        pytest.skip(f"the job's CPU alone predicted {promised:.2f}x: nothing was held back")
    runs = interleaved(tmp_path, inline, with_workers(workers, *model, *LOADING),
                       MEASURED_STEPS)
    ratio = report("num-workers-zero quiet, model threads filling the cores",
                   f"num_workers 0 -> {workers} (not advised; the job's CPU alone predicted "
                   f"{promised:.2f}x)", runs)
    assert ratio < promised, "the workers delivered what the core-blind prediction promised"


def _core_blind_prediction(frame: Frame) -> tuple[int, float]:
    """The workers and the gain the job's CPU alone predicts (the issue's num-workers-zero:
    the CPU the job uses a step over the cores it gets, the model's threads not counted)."""
    ctx = Context(frame, {})
    trainer = state(frame)
    shape, job = step_shape(trainer), job_cpu(ctx, trainer.pid, False)
    assert shape is not None and job is not None
    floor = max(shape.compute_ms, job.used * shape.step_ms / job.available)
    workers = max(1, min(MAX_WORKERS, ceil_div(shape.input_ms, floor)))
    return workers, shape.step_ms / max(floor, shape.input_ms / workers)
