"""SVG snapshots of the real app: fixed sizes, frozen frame clock, simulated GPUs, recorded procs.

Update after an intended change: `pytest tests/tui/test_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import pytest

from gputop.tui import build_app
from gputop.tui.app import GputopApp
from tests.helpers.tui import FedSampler, frames, scenario_frames

if TYPE_CHECKING:
    from textual.pilot import Pilot

RunBefore = Callable[["Pilot[int]"], Coroutine[Any, Any, None]]

SIZES = [(80, 24), (160, 48)]
DEMO_SCENARIOS = ["idle", "compute-bound", "data-starved", "small-batch",
                  "memory-full-util-zero"]


def _runner(scenario: str, count: int = 70, gpus: int = 4, attach: bool = False,
            advice: bool = False) -> RunBefore:
    """Show `frames(scenario, count, gpus, attach, advice)` before the snapshot."""

    async def run_before(pilot: Pilot[int]) -> None:
        app = pilot.app
        assert isinstance(app, GputopApp)
        for frame in frames(scenario, count, gpus, attach, advice):
            app.show_frame(frame)
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("scenario", ["data-starved", "compute-bound"])
def test_demo_screen(snap_compare, scenario: str, size: tuple[int, int]) -> None:
    app = build_app(FedSampler())
    assert snap_compare(app, terminal_size=size, run_before=_runner(scenario))


@pytest.mark.parametrize("size", SIZES)
def test_attached_with_advice(snap_compare, size: tuple[int, int]) -> None:
    app = build_app(FedSampler())
    assert snap_compare(app, terminal_size=size,
                        run_before=_runner("data-starved", attach=True, advice=True))


def test_sixteen_gpus_compact(snap_compare) -> None:
    app = build_app(FedSampler())
    assert snap_compare(app, terminal_size=(160, 48),
                        run_before=_runner("mixed", 70, gpus=16))


def test_filter_line_and_folded_group(snap_compare) -> None:
    app = build_app(FedSampler())
    assert snap_compare(app, terminal_size=(80, 24), press=["space", "slash", "p", "y"],
                        run_before=_runner("memory-full-util-zero"))


def test_help_screen(snap_compare) -> None:
    app = build_app(FedSampler())
    assert snap_compare(app, terminal_size=(100, 30), press=["question_mark"],
                        run_before=_runner("idle", 3))


@pytest.mark.parametrize("scenario", DEMO_SCENARIOS)
def test_demo_scenario_tells_one_story(snap_compare, scenario: str) -> None:
    # GPU rows, step pane and advice of `gputop --demo SCENARIO`, its trainer behaving as named.
    async def run_before(pilot: Pilot[int]) -> None:
        app = pilot.app
        assert isinstance(app, GputopApp)
        for frame in scenario_frames(scenario):
            app.show_frame(frame)
        await pilot.pause()

    app = build_app(FedSampler())
    assert snap_compare(app, terminal_size=(160, 48), run_before=run_before)
