"""A tick builds its Frame directly: once without an advisor, twice with one (the advisor
reads the frame the advice then joins), never through dataclasses.replace."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gputop.core.model import Advice, Frame
from gputop.frames import sampler as sampler_module
from gputop.frames.sampler import Sampler
from gputop.sources.gpu import open_gpu_source
from gputop.sources.host import ProcHostSource
from gputop.sources.processes import ProcProcessSource

ADVICE = Advice(id="test", severity="info", title="a test", evidence="none", action="none")


def _counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Frames built and replace() calls in the sampler module from now on."""
    counts = {"frames": 0, "replaced": 0}

    class CountedFrame(Frame):
        __slots__ = ()

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            counts["frames"] += 1
            super().__init__(*args, **kwargs)

    def replace(obj: Any, **changes: Any) -> Any:
        counts["replaced"] += 1
        return dataclasses.replace(obj, **changes)

    monkeypatch.setattr(sampler_module, "Frame", CountedFrame)
    monkeypatch.setattr(sampler_module, "replace", replace)
    return counts


def _sampler(advisor: Any = None) -> Sampler:
    return Sampler(gpu=open_gpu_source(simulate="mixed", count=2), host=ProcHostSource(),
                   processes=ProcProcessSource(), advisor=advisor)


@pytest.mark.parametrize("with_advisor", [False, True])
def test_a_tick_builds_its_frame_without_replace(
        monkeypatch: pytest.MonkeyPatch, with_advisor: bool) -> None:
    seen: list[Frame] = []

    def advisor(frame: Frame) -> tuple[Advice, ...]:
        seen.append(frame)
        return (ADVICE,)

    sampler = _sampler(advisor if with_advisor else None)
    try:
        sampler.sample()
        counts = _counted(monkeypatch)
        frame = sampler.sample()
    finally:
        sampler.processes.close()
    assert counts == {"frames": 2 if with_advisor else 1, "replaced": 0}
    assert frame.errors == () and frame.sample_cost_s > 0
    if with_advisor:
        assert frame.advice == (ADVICE,) and seen[-1].advice == ()
        assert dataclasses.replace(seen[-1], advice=(ADVICE,)) == frame
