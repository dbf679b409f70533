"""The attach source returns raw facts (steps without verdicts, no summary, nothing removed
as a side effect of a listing); the sampler's Derivation classifies and summarizes."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from gputop.analysis import steps as step_analysis
from gputop.core.model import EMPTY_STEP_SUMMARY, AttachState, StepRecord, TrainerConfig
from gputop.frames.derive import Derivation
from gputop.probe import ring as ring_format
from gputop.sources.attach import WINDOW, RingAttachSource
from tests.helpers.probe import header_only_ring, payload
from tests.helpers.spy import spy

MS = 1_000_000


def _record(n: int, data_ns: int) -> tuple[int, ...]:
    """A training step's payload: `data_ns` waiting for input, 10 ms in all."""
    return payload(step=n, start_ns=n * 10 * MS, duration_ns=10 * MS, data_ns=data_ns,
                   forward_ns=2 * MS, batch_size=8, epoch=0, flags=ring_format.F_OPTIMIZER,
                   loader=1)


def test_the_source_returns_steps_without_verdicts_and_no_summary(tmp_path: Path) -> None:
    writer = ring_format.RingWriter(ring_format.ring_path(os.getpid(), directory=str(tmp_path)))
    try:
        writer.append([_record(n, 7 * MS) for n in range(20)])
        source = RingAttachSource(directory=str(tmp_path))
        source.attach(os.getpid())
        (state,) = source.sample()
        source.close()
    finally:
        writer.close()
    assert len(state.steps) == 20
    assert {s.verdict for s in state.steps} == {"unknown"}
    assert state.summary.steps == 0 and state.summary.verdict == "unknown"
    (derived,), _ = Derivation().attached((state,), time.monotonic_ns())
    assert {s.verdict for s in derived.steps} == {"data-bound"}
    assert derived.summary.steps == 20 and derived.summary.verdict == "data-bound"


def test_each_step_is_classified_once_across_ticks(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = step_analysis.classify
    monkeypatch.setattr(step_analysis, "classify", spy(real, lambda step: calls.append(step.step)))
    window = [StepRecord(step=n, duration_ns=10 * MS, data_ns=n % 9 * MS, end_ns=n * 10 * MS)
              for n in range(WINDOW + 5)]
    derivation = Derivation()
    now = time.monotonic_ns()
    for tick in range(5):  # each tick the window moves on by one new step
        steps = tuple(window[tick : tick + WINDOW])
        state = AttachState(1, TrainerConfig(), 0, steps)
        (derived,), _ = derivation.attached((state,), now)
        assert [s.verdict for s in derived.steps] == [real(s) for s in steps]
        assert derived.summary == step_analysis.summarize(derived.steps)
    assert calls == list(range(WINDOW + 4))
    assert AttachState(1, TrainerConfig(), 0, ()).summary == EMPTY_STEP_SUMMARY


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait(timeout=30)
    return proc.pid


def test_listing_probe_pids_removes_nothing(tmp_path: Path) -> None:
    """Our dead trainer's ring, and a ring of ours left by an earlier process with our PID:
    neither is listed, both stay until remove_dead_rings() is called."""
    ours = ring_format.pid_namespace()
    pid = _dead_pid()
    dead = Path(ring_format.ring_path(pid, directory=str(tmp_path)))
    dead.write_bytes(header_only_ring(pid, 1, ours))
    stale = Path(ring_format.ring_path(os.getpid(), directory=str(tmp_path)))
    stale.write_bytes(header_only_ring(os.getpid(), (ring_format.own_start_ticks() or 0) + 1, ours))
    source = RingAttachSource(directory=str(tmp_path))
    assert source.probe_pids() == frozenset()
    assert dead.exists() and stale.exists()
    source.remove_dead_rings()
    assert not dead.exists() and not stale.exists()


def test_a_ring_created_again_after_the_listing_is_not_removed(tmp_path: Path) -> None:
    pid = _dead_pid()
    path = Path(ring_format.ring_path(pid, directory=str(tmp_path)))
    path.write_bytes(header_only_ring(pid, 1, ring_format.pid_namespace()))
    source = RingAttachSource(directory=str(tmp_path))
    assert source.probe_pids() == frozenset()
    assert source.rings.leftovers  # it would be removed, were it not replaced
    keep = path.with_suffix(".keep")
    keep.write_bytes(b"\1" * ring_format.FILE_SIZE)  # a new file (inode) under the same name
    os.replace(keep, path)
    source.remove_dead_rings()
    assert path.exists()
