"""A trainer that loads its batches in the training process (num_workers=0, each sample
waiting 5 ms as on slow storage), shared by the tests that read what the advice says of it:
one trainer for the module, each test with a real Sampler of its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.advice.context import counted
from gputop.core.model import Frame
from gputop.sources.membw import open_membw_source
from gputop.sources.simulated import SimulatedGpuSource
from tests.helpers.advice_run import (
    CORES,
    Trainer,
    advice,
    check_input_share,
    number,
    probed_trainer,
    sample_until,
    shows,
    state,
    watching,
)
from tests.helpers.membw import write_vmstat
from tests.helpers.probe import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.alone]

FIXTURES = ROOT / "tests" / "sources" / "fixtures" / "membw"


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trainer]:
    """The module's trainer, running until its last test is done."""
    with probed_trainer(tmp_path_factory.mktemp("inline"), "--workers", "0",
                        "--sleep-ms", "5") as running:
        yield running


def test_num_workers_zero(trainer: Trainer) -> None:
    with watching(trainer) as sampler:
        frame = sample_until(sampler, shows("num-workers-zero"))
        found = advice(frame, "num-workers-zero")
        assert found.severity == "critical"
        assert state(frame).config.num_workers == 0
        assert f"num_workers=0 on a {CORES}-core host" in found.evidence
        check_input_share(found, frame, trainer)
        suggested = int(number(r"num_workers=(\d+)", found.action))
        assert 1 <= suggested <= 16 and f"→ {counted(suggested, 'worker')}" in found.evidence
        assert "pin_memory" not in found.action  # a CPU trainer: pinning buys nothing


def test_gpu_starved_names_the_gpu(trainer: Trainer) -> None:
    frames: list[Frame] = []
    gpu = SimulatedGpuSource("data-starved", count=1, owner_pids=[trainer.pid])
    with watching(trainer, gpu=gpu) as sampler:
        frame = sample_until(sampler, shows("gpu-starved"), frames)
    found = advice(frame, "gpu-starved")
    assert found.title == "GPU is waiting for input, not computing"
    assert found.severity == "warn"  # a sawtooth, not flat zero
    (dev,) = frame.gpu.gpus
    assert [p.pid for p in dev.processes] == [trainer.pid]
    assert dev.memory_used_bytes is not None and dev.memory_total_bytes is not None
    utils = [f.gpu.gpus[0].util_percent or 0.0 for f in frames]
    idle = sum(u <= 10 for u in utils) / len(utils)
    assert found.evidence == (
        f"GPU 0: memory {dev.memory_used_bytes / dev.memory_total_bytes:.0%} used, util "
        f"averaged {sum(utils) / len(utils):.0f}% over {len(utils)} samples, spiking to "
        f"{max(utils):.0f}% then idle in {idle:.0%} of samples")
    assert "num-workers-zero" in {a.id for a in frame.advice}  # the cause, from the probe


def test_host_wide_faults_and_swap_in_alone_give_no_paging_advice(
        trainer: Trainer, tmp_path: Path) -> None:
    """The host's vmstat counts every process's faults (loading torch's libraries is enough):
    its rates are measured and shown, but paging advice speaks only of the trainer's own."""
    proc_root = tmp_path / "proc"
    proc_root.mkdir()
    counters = {"pswpin": 0, "pgmajfault": 0}
    times: list[tuple[float, float]] = []
    write_vmstat(proc_root, **counters)
    membw = open_membw_source("estimate", proc_root=proc_root,
                              udev_root=FIXTURES / "udev-none")
    with watching(trainer, membw=membw) as sampler:

        def sample_after(step: dict[str, int]) -> Frame:
            for key in counters:
                counters[key] += step[key]
            write_vmstat(proc_root, **counters)
            before = time.monotonic()
            frame = sampler.sample()
            times.append((before, time.monotonic()))
            return frame

        sample_after({"pswpin": 0, "pgmajfault": 0})  # no rate from one read
        for step in ({"pswpin": 0, "pgmajfault": 100_000},
                     {"pswpin": 5_000, "pgmajfault": 100_000}):
            frame = sample_after(step)
            _check_rates(frame, times, step)
            assert "swap" not in {a.id for a in frame.advice}
            assert state(frame).alive


def _check_rates(frame: Frame, times: list[tuple[float, float]], step: dict[str, int]) -> None:
    m = frame.memory_bandwidth
    assert m is not None and m.swap_in_per_s is not None and m.major_faults_per_s is not None
    (prev_before, prev_after), (before, after) = times[-2], times[-1]
    for rate, delta in ((m.swap_in_per_s, step["pswpin"]),
                        (m.major_faults_per_s, step["pgmajfault"])):
        # The reader's clock ran somewhere inside each sample() call.
        assert delta / (after - prev_before) - 1e-6 <= rate <= delta / (before - prev_after) + 1e-6


