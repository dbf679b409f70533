"""host-memory-bandwidth (its pressure half), followed: a real probed trainer whose one
worker normalizes each decoded image in float64 and back several times (large per-sample
copies), beside a memory hog (sysbench) on the other core, while gputop's canary estimate
measures the bandwidth pressure. The advice must fire with the pressure and the input
share; the test then follows it (uint8 until the model, no round trips), measures samples/s
before and after, interleaved (tests/helpers/follow.py) with the hog running throughout,
and the followed trainer must not get the advice.

The pressure is gputop's own, from the rung `--membw auto` picks: where there is none (no
counters, and the canary off as the reported LLC is too large to leave), or where one hog
thread does not slow memory to 40 % of the canary's idle peak, the rule cannot speak, and
the test skips saying what it saw. That is the usual case on shared VMs: one hog thread
barely slows a large machine's memory, and a forced large canary reads high pressure only
while the hog faults its buffer in; where the rule does fire, the followed trainer is
several times faster (benchmarks/RESULTS.md, "Figures behind test constants").
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from statistics import median

import pytest

from gputop.advice.context import is_data_bound
from gputop.advice.host_rules import HIGH_PRESSURE
from gputop.core.model import Frame, MemoryBandwidthSample
from gputop.sources.membw import open_membw_source
from tests.helpers.advice_run import (
    FOLLOWED_TICKS,
    TICK_S,
    Need,
    advice,
    ids,
    number,
    probed_trainer,
    ready,
    sample_until,
    shows,
    state,
    watching,
)
from tests.helpers.follow import interleaved, report, with_workers
from tests.helpers.membw import hog_cpus, sysbench_hog
from tests.helpers.scheduling import pinned

pytestmark = [pytest.mark.slow, pytest.mark.alone]

RULE = "host-memory-bandwidth"
IMAGE_KB = 144  # a decoded 3x224x224 image, 64 rows of it pooled into the model's width
ROUND_TRIPS = 4
BATCH = 32
HOG_BLOCK = "256M"
MEASURED_STEPS = 40  # the effect is several-fold: a few seconds a run tell
PRESSURE_WAIT_S = 60.0
HOG_S = 600  # longer than the test: killed when it ends


class EveryTick:
    """gputop's own memory-bandwidth source, as `--membw auto` picks it here (its idle peak
    kept under the test's folder); where that is the canary estimate, the canary runs on
    every sample instead of as its CPU budget allows (every 20 s or so): the same
    estimate, often enough for a test. Skips where gputop has no bandwidth reading here."""

    def __init__(self, state_dir: Path) -> None:
        monitor = open_membw_source("auto", state_dir=state_dir)
        assert monitor is not None
        if monitor.meter is None and monitor.estimator is None:
            note = monitor.sample().note
            monitor.close()
            pytest.skip(f"gputop measures no memory bandwidth on this machine: {note}")
        self.monitor = monitor

    def calibrate(self) -> None:
        """The canary's idle peak measured now (before the hog), if the canary is the rung;
        skips when the machine was too busy for it to count as idle."""
        estimator = self.monitor.estimator
        if estimator is None:
            return
        estimator.calibrate()
        if estimator.unsettled is not None:
            pytest.skip(f"the canary's idle peak could not be measured: {estimator.unsettled}")

    def sample(self) -> MemoryBandwidthSample:
        if self.monitor.estimator is not None:
            self.monitor.estimator.measure()
        return self.monitor.sample()

    def close(self) -> None:
        self.monitor.close()


@contextmanager
def hogged(state_dir: Path) -> Iterator[tuple[frozenset[int], EveryTick]]:
    """gputop's bandwidth source calibrated, then a memory hog on the second core; the
    trainer's core (and the canary's: the test's thread is pinned there) is the first.
    Skips where sysbench, a second core or a bandwidth reading is missing."""
    cpus = hog_cpus("the trainer and the canary")
    source = EveryTick(state_dir)
    try:
        with pinned({cpus[0]}):
            source.calibrate()
            with sysbench_hog(HOG_BLOCK, cpus[1], HOG_S):
                yield frozenset({cpus[0]}), source
    finally:
        source.close()


def pressure_words(frames: list[Frame]) -> str:
    """The pressure over `frames`, in a phrase."""
    seen = [m.pressure for f in frames if (m := f.memory_bandwidth) and m.pressure is not None]
    if not seen:
        return "no pressure reading"
    return (f"the canary's pressure was {median(seen):.2f} in the median frame (most "
            f"{max(seen):.2f}): the hog does not slow this machine's memory that much")


def test_membw_pressure_while_data_bound_gets_advice_and_uint8_pays(tmp_path: Path) -> None:
    images = ("--batch-size", str(BATCH), "--image-kb", str(IMAGE_KB))
    with hogged(tmp_path / "state") as (cpus, canary):
        before = with_workers(1, *images, "--float64-round-trips", str(ROUND_TRIPS), cpus=cpus)
        after = with_workers(1, *images, cpus=cpus)
        need = Need(f"bandwidth pressure >= {HIGH_PRESSURE} while data-bound",
                    lambda f: _pressure(f) >= HIGH_PRESSURE and bool(f.attached)
                    and is_data_bound(state(f)), pressure_words)
        with probed_trainer(tmp_path / "advised", *before.args, cpus=cpus) as trainer, \
                watching(trainer, membw=_Unclosed(canary)) as sampler:
            frame = sample_until(sampler, shows(RULE), need=need, wait_s=PRESSURE_WAIT_S)
        found = advice(frame, RULE)
        print(f"\n{RULE}: {found.evidence}")
        assert found.title == "Host memory bandwidth is saturated while steps wait for data"
        assert number(r"bandwidth pressure ([\d.]+)", found.evidence) == round(_pressure(frame), 2)
        quoted = number(r"input is (\d+)% of step time", found.evidence)
        assert quoted == round(state(frame).summary.input_bound_percent or 0)
        assert "uint8 until the GPU" in found.action
        runs = interleaved(tmp_path, before, after, MEASURED_STEPS)
        assert report(RULE, f"uint8 until the model, no float64 round trips "
                      f"(was {ROUND_TRIPS})", runs) > 1.1
        frames = _followed(tmp_path, after.args, cpus, canary)
    pressures = [round(_pressure(f), 2) for f in frames]
    print(f"followed: pressure {pressures}, verdicts {[state(f).summary.verdict for f in frames]}")
    assert RULE not in ids(frames)


def _followed(tmp_path: Path, args: tuple[str, ...], cpus: frozenset[int],
              canary: EveryTick) -> list[Frame]:
    """FOLLOWED_TICKS frames of the followed trainer beside the hog, once it steps."""
    with probed_trainer(tmp_path / "followed", *args, cpus=cpus) as trainer, \
            watching(trainer, membw=_Unclosed(canary)) as sampler:
        frames = [sample_until(sampler, lambda f: ready(f, 10))]
        while len(frames) < FOLLOWED_TICKS:
            time.sleep(TICK_S)
            frames.append(sampler.sample())
    return frames


class _Unclosed:
    """The canary for one sampler of several: hogged() closes it, not the sampler."""

    def __init__(self, canary: EveryTick) -> None:
        self.canary = canary

    def sample(self) -> MemoryBandwidthSample:
        return self.canary.sample()

    def close(self) -> None:
        pass


def _pressure(frame: Frame) -> float:
    """The frame's bandwidth pressure (-1 when unknown)."""
    m = frame.memory_bandwidth
    return -1.0 if m is None or m.pressure is None else m.pressure
