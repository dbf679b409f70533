"""Every trainer knob the advice turns, followed: a real probed trainer gets the advice, the
test restarts the trainer the way the advice says, measures samples/s before and after
(interleaved, tests/helpers/follow.py), checks the effect goes the way the advice predicted,
and that the advice is gone once it is followed.

The worker advice on a busy host is followed in test_worker_advice_real.py. Rules that need
a GPU to act (pin-memory-off, and raise-batch-size's memory evidence) are followed as far
as a CPU-only host allows: see each test.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gputop.model import Frame
from gputop.sources.base import GpuSource
from tests.advice.test_advice_real import (
    TICK_S,
    advice,
    number,
    probed_trainer,
    sample_until,
    shows,
    state,
    watching,
)
from tests.helpers.follow import Setting, interleaved, report, with_workers

pytestmark = pytest.mark.slow

FOLLOWED_TICKS = 8  # frames of the followed trainer in which the advice must stay away
MIN_STEPS = 10


def followed(tmp_path: Path, setting: Setting,
             gpu: Callable[[int], GpuSource] | None = None) -> list[Frame]:
    """FOLLOWED_TICKS frames of the trainer run as `setting` says, under the probe and the
    real sampler, once its window holds MIN_STEPS steps."""
    with probed_trainer(tmp_path / "followed", *setting.args) as trainer, \
            watching(trainer, gpu=gpu(trainer.pid) if gpu else None) as sampler:
        frames = [sample_until(sampler, lambda f: bool(f.attached)
                               and state(f).summary.steps >= MIN_STEPS)]
        while len(frames) < FOLLOWED_TICKS:
            time.sleep(TICK_S)
            frames.append(sampler.sample())
    return frames


def shown(frames: list[Frame]) -> set[str]:
    """Every advice id shown in any of `frames`."""
    return {a.id for f in frames for a in f.advice}


def test_num_workers_zero_followed_overlaps_the_loading(tmp_path: Path) -> None:
    # Each sample waits 5 ms (storage-like) in the training process itself.
    args = ("--sleep-ms", "5")
    with probed_trainer(tmp_path / "advised", "--workers", "0", *args) as trainer, \
            watching(trainer) as sampler:
        frame = sample_until(sampler, shows("num-workers-zero"))
    found = advice(frame, "num-workers-zero")
    suggested = int(number(r"num_workers=(\d+)", found.action))
    predicted = number(r"instead of ([\d.]+) ms", found.action) / number(
        r"predicted step ([\d.]+) ms", found.action)
    assert suggested >= 1 and predicted >= 1.1
    rates = interleaved(tmp_path, with_workers(0, *args), with_workers(suggested, *args), 100)
    ratio = report("num-workers-zero", f"num_workers 0 -> {suggested} (predicted "
                   f"{predicted:.1f}x)", rates)
    assert 1.1 <= ratio <= 1.5 * predicted  # at least the gain the rule needs to speak
    after = shown(followed(tmp_path, with_workers(suggested, *args)))
    assert not after & {"num-workers-zero", "too-many-workers"}, after
