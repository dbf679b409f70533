"""Issue 13, real torch trainers under `python -m gputop.probe`: a nanoGPT-style loop (its
own get_batch, no DataLoader) gets a verdict and an input share that agrees with timers
placed by hand; an optimizer step that runs its closure nests the closure's forward and
backward; a loop that updates its parameters by hand is attachable and says what the
probe saw (its steps close at each backward: tests/probe/test_manual_sgd.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputop.core.model import AttachState
from gputop.export.text import render
from gputop.frames.derive import Derivation
from gputop.sources.attach import RingAttachSource, check_attachable
from tests.helpers.builders import frame
from tests.helpers.probe import ROOT, TRAINERS, run_probed, trainer_env

pytest.importorskip("torch")
pytestmark = [pytest.mark.slow, pytest.mark.alone]

SHARE_POINTS = 10.0  # the bound: input share within 10 points of the hand timers
PHASE_TOLERANCE = 0.25  # a phase's median within 25 % of the hand timer's


def _nanogpt(tmp_path: Path, fetch_ms: str, width: str) -> tuple[float, AttachState]:
    own = tmp_path / "own.json"
    code, state = run_probed("nanogpt_like.py", str(own), fetch_ms, width, "40",
                             ring_dir=tmp_path)
    assert code == 0 and state.dropped_records == 0
    return json.loads(own.read_text())["input_percent"], state


def test_a_slow_get_batch_makes_a_loop_without_a_dataloader_data_bound(tmp_path: Path) -> None:
    # A fetch about twice the width-64 model's compute on a slow 2-core VM: a fetch equal to
    # the compute sits on the verdict's edge (half the step is input), where which side it
    # falls on is the box's speed, not the probe.
    hand, state = _nanogpt(tmp_path, fetch_ms="60", width="64")
    s = state.summary
    assert s.verdict == "data-bound", s
    assert s.input_bound_percent is not None
    assert abs(s.input_bound_percent - hand) <= SHARE_POINTS, (s.input_bound_percent, hand)
    counted = [st for st in state.steps if not st.warmup]
    assert len(counted) >= 30 and all(st.input_outside_model for st in counted)
    assert all(st.forward_ns is not None and st.verdict != "unknown" for st in counted)
    assert s.median_step_ns is not None and s.unmeasured_reason is None  # whole steps


def test_a_heavy_model_makes_a_loop_without_a_dataloader_compute_bound(tmp_path: Path) -> None:
    hand, state = _nanogpt(tmp_path, fetch_ms="0", width="128")
    s = state.summary
    assert s.verdict == "compute-bound", s
    assert s.input_bound_percent is not None
    assert abs(s.input_bound_percent - hand) <= SHARE_POINTS, (s.input_bound_percent, hand)


def test_a_closures_forward_and_backward_are_not_optimizer_time(tmp_path: Path) -> None:
    own = tmp_path / "own.json"
    code, state = run_probed("closure_loop.py", str(own), ring_dir=tmp_path)
    assert code == 0
    hand = json.loads(own.read_text())
    probed = dict(state.summary.median_phase_ns)
    for phase in ("forward", "backward", "optimizer"):
        got = probed[phase]
        assert got is not None, phase
        assert abs(got - hand[phase]) <= PHASE_TOLERANCE * hand[phase], (phase, got, hand)


def _wait_for_ring(proc: subprocess.Popen[bytes], ring_dir: Path) -> str | None:
    """check_attachable's answer once the trainer has had its first backward (or it exits)."""
    deadline = time.monotonic() + 60
    reason = check_attachable(proc.pid, str(ring_dir))
    while reason is not None and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
        reason = check_attachable(proc.pid, str(ring_dir))
    return reason


def test_a_loop_updating_parameters_by_hand_says_what_the_probe_saw(tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputop.probe", str(TRAINERS / "hand_update.py"), str(stop)],
        env=trainer_env(tmp_path), cwd=ROOT)
    try:
        assert _wait_for_ring(proc, tmp_path) is None  # attachable: it is probed
        source = RingAttachSource(directory=str(tmp_path))
        source.attach(proc.pid)
        try:
            raw = source.sample()
        finally:
            source.close()
        state = Derivation().attached(raw, time.monotonic_ns())[0][0]
        if not state.steps:  # read between its first and second backward
            assert state.error is not None
            assert "no optimizer step seen yet" in state.error and "step_end" in state.error
            text = render(frame(attach=(state,)))
            assert "no optimizer step seen yet" in text and "no probe ring" not in text
        else:  # issue 38: each backward closes a step
            assert state.error is None and all(s.implicit for s in state.steps)
    finally:
        stop.touch()
        proc.wait(timeout=60)
    assert proc.returncode == 0
