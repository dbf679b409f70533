"""`stalled` means no progress: a trainer whose step computes for longer than the stall limit
(an LBFGS step, an evaluation) is `running`, its step in progress; one that closes no step and
uses no CPU is `stalled` (issue 38)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gputop.analysis import steps
from gputop.analysis.steps import step_in_progress_s, trainer_state
from gputop.core.model import AttachState, Frame, TrainerGroup
from gputop.export.text import render
from gputop.frames.derive import trainer_cpu
from gputop.frames.sampler import Sampler
from gputop.sources.attach import RingAttachSource
from gputop.sources.gpu import open_gpu_source
from gputop.sources.host import ProcHostSource
from gputop.sources.processes import ProcProcessSource
from tests.helpers.builders import attached, process
from tests.helpers.probe import ROOT, sample_until, trainer_env

S = 1_000_000_000
LIMIT_S = 1.0  # the stall limit's floor in these tests (5 s in use)

# Trains 40 quick steps, then holds one step open until the file argv[2] exists: computing at
# full CPU ("compute") or asleep ("sleep"); touches argv[3] when the long part begins.
TRAINER = """
import os, sys, time
from pathlib import Path
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

mode, stop, started = sys.argv[1], sys.argv[2], sys.argv[3]
torch.set_num_threads(1)
loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
model = nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
deadline = time.monotonic() + 60
done = 0
while done < 50 and time.monotonic() < deadline:
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        if done == 40:
            Path(started).touch()
            while not os.path.exists(stop) and time.monotonic() < deadline:
                if mode == "sleep":
                    time.sleep(0.05)
                else:
                    total = 0
                    for i in range(200_000):
                        total += i * i
        opt.step()
        done += 1
"""


def _quiet_for(idle_s: float) -> AttachState:
    state = attached(7, data_ms=20, compute_ms=20, num_workers=0)
    now = 1000 * S
    return replace(state, steps=(*state.steps[:-1],
                                 replace(state.steps[-1], end_ns=now - int(idle_s * S))))


def test_a_quiet_trainer_that_used_cpu_within_the_limit_is_running() -> None:
    now = 1000 * S
    quiet = _quiet_for(31.2)
    assert trainer_state(quiet, now) == ("stalled", 31.2)  # CPU not measured: steps decide
    assert trainer_state(quiet, now, busy_ns=now - 1 * S) == ("running", 31.2)
    assert trainer_state(quiet, now, busy_ns=now - 6 * S) == ("stalled", 31.2)
    assert step_in_progress_s(quiet, "running", 31.2) == 31.2
    assert step_in_progress_s(quiet, "stalled", 31.2) is None
    assert step_in_progress_s(quiet, "running", 0.1) is None  # a step of the usual length


def test_trainer_cpu_counts_its_workers_and_knows_when_it_does_not_know() -> None:
    rows = (process(10, cpu=0.5), process(11, cpu=90.0), process(12, cpu=None))
    group = TrainerGroup(10, (11,), workers_cpu_percent=90.0, num_threads_total=8,
                         pin_memory_thread=False)
    assert trainer_cpu([10, 12, 13], rows, None, (group,)) == {10: 90.5, 12: None, 13: None}


def _run(tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> list[Frame]:
    """Run TRAINER in `mode` under the probe; the frames sampled while its long step ran
    (past twice the stall limit, then its end)."""
    monkeypatch.setattr(steps, "STALL_MIN_S", LIMIT_S)
    script, stop, started = tmp_path / "long_step.py", tmp_path / "stop", tmp_path / "started"
    script.write_text(TRAINER)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputop.probe", str(script), mode, str(stop), str(started)],
        env=trainer_env(tmp_path), cwd=ROOT)
    sampler = Sampler(gpu=open_gpu_source(simulate="idle"), host=ProcHostSource(),
                      processes=ProcProcessSource(),
                      attach=RingAttachSource(directory=str(tmp_path)))
    seen: list[Frame] = []

    def long_enough(f: Frame) -> bool:
        if started.exists() and f.attached and f.attached[0].steps:
            seen.append(f)
            idle = f.attached[0].idle_s
            return idle is not None and idle > 3 * LIMIT_S and len(seen) >= 5
        return False

    try:
        sampler.attach(proc.pid)
        sample_until(sampler, long_enough, pause_s=0.2)
        stop.touch()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        sampler.close()
    return seen


@pytest.mark.slow
def test_a_step_computing_past_the_limit_is_running_with_its_step_in_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frames = _run(tmp_path, "compute", monkeypatch)
    assert [f.attached[0].state for f in frames] == ["running"] * len(frames)
    last = frames[-1].attached[0]
    assert last.step_in_progress_s is not None and last.step_in_progress_s > LIMIT_S
    assert last.step_in_progress_s == last.idle_s
    assert f"(step in progress {last.step_in_progress_s:.1f} s)" in render(frames[-1])
    assert "STALLED" not in render(frames[-1])


@pytest.mark.slow
def test_a_trainer_asleep_past_the_limit_is_stalled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    last = _run(tmp_path, "sleep", monkeypatch)[-1]
    state = last.attached[0]
    assert state.state == "stalled" and state.step_in_progress_s is None
    assert "STALLED: no step closed" in render(last)
