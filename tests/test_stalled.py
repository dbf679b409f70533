"""A trainer that stops closing steps is `stalled`, one that is gone `exited`; its numbers are
then shown as old, and advice stops quoting them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from gputop.advice import evaluate
from gputop.advice.context import Context
from gputop.analysis.steps import trainer_state
from gputop.core.model import AttachState
from gputop.export.snapshot import dumps
from gputop.export.text import render
from gputop.frames.sampler import Sampler
from gputop.sources.attach import RingAttachSource
from gputop.sources.gpu import open_gpu_source
from gputop.sources.host import ProcHostSource
from gputop.sources.processes import ProcProcessSource
from tests.helpers.builders import attached, frame
from tests.helpers.probe import ROOT, TRAINERS, sample_until, trainer_env

# Not `alone`: a SIGSTOPped trainer closes no step and uses no CPU however busy the box is,
# and its limit scales with its own median step.

S = 1_000_000_000


def _ending_at(state_ms: float, end_ns: int) -> AttachState:
    """A 50-step data-bound trainer whose newest step closed at `end_ns`."""
    state = attached(7, data_ms=state_ms, compute_ms=20, num_workers=0)
    steps = (*state.steps[:-1], replace(state.steps[-1], end_ns=end_ns))
    return replace(state, steps=steps)


def test_quiet_for_longer_than_five_seconds_or_ten_steps_is_stalled() -> None:
    now = 1000 * S
    assert trainer_state(_ending_at(80, now - 4 * S), now) == ("running", 4.0)
    assert trainer_state(_ending_at(80, now - 6 * S), now) == ("stalled", 6.0)
    slow = _ending_at(900, now - 6 * S)  # 920 ms steps: ten of them are 9.2 s
    assert trainer_state(slow, now)[0] == "running"
    assert trainer_state(_ending_at(80, now - 10 * S), now)[0] == "stalled"
    assert trainer_state(replace(_ending_at(80, now), alive=False), now)[0] == "exited"
    assert trainer_state(replace(_ending_at(80, now), steps=()), now) == ("running", None)


def test_advice_stops_quoting_a_stalled_trainer() -> None:
    running = frame(attach=(_ending_at(80, time.monotonic_ns()),), cores=8)
    stalled = frame(attach=(_ending_at(80, time.monotonic_ns() - 60 * S),), cores=8)
    assert running.attached[0].state == "running" and stalled.attached[0].state == "stalled"
    assert "num-workers-zero" in {a.id for a in evaluate(Context(running, {}))}
    assert not {a.id for a in evaluate(Context(stalled, {}))} & {
        "num-workers-zero", "raise-num-workers", "pin-memory-off"}


@pytest.mark.slow
def test_a_sigstopped_trainer_is_stalled_then_running_again(tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputop.probe", str(TRAINERS / "until_stopped.py"), str(stop)],
        env=trainer_env(tmp_path), cwd=ROOT)
    sampler = Sampler(gpu=open_gpu_source(simulate="idle"), host=ProcHostSource(),
                      processes=ProcProcessSource(),
                      attach=RingAttachSource(directory=str(tmp_path)))
    try:
        sampler.attach(proc.pid)
        f = sample_until(sampler, lambda f: bool(f.attached and len(f.attached[0].steps) >= 20),
                         pause_s=0.2)
        assert f.attached[0].state == "running"
        os.kill(proc.pid, signal.SIGSTOP)
        f = sample_until(sampler, lambda f: f.attached[0].state == "stalled")
        state = f.attached[0]
        assert state.idle_s is not None and state.idle_s > 5
        assert json.loads(dumps(f))["attach"]["state"] == "stalled"
        assert "STALLED: no step closed" in render(f)
        os.kill(proc.pid, signal.SIGCONT)
        f = sample_until(sampler, lambda f: f.attached[0].state == "running")
        stop.touch()
        assert proc.wait(timeout=60) == 0
        f = sample_until(sampler, lambda f: f.attached[0].state == "exited")
        assert f.attached[0].steps and "exited, final summary" in render(f)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        sampler.close()

