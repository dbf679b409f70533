"""Each mode's controller binds every key once (g sorts live and jumps in a replay, never
both), and the app picks the controller from what it is fed."""

from __future__ import annotations

from collections import Counter

import pytest
from textual.binding import BindingsMap

from gputop.core.model import Trend
from gputop.tui import build_app
from gputop.tui.app import GputopApp
from gputop.tui.feeds import FrameFeed
from gputop.tui.modes import MODES, FleetMode, LiveMode, Mode, ReplayMode, RunMode
from tests.helpers.tui import FedFleet, FedSampler


class FedPlayback(FedSampler):
    """Stands where a recording's Playback stands: a feed with the replay's controls."""

    speed = 1.0

    def step(self, ticks: int) -> None: ...

    def jump(self, where: str) -> None: ...

    def faster(self, steps: int = 1) -> None: ...

    def position(self) -> tuple[int, int]:
        return 0, 0

    def trend(self, time: float, count: int) -> Trend | None:
        return None


class FedCommand:
    """Stands where `gputop run`'s command stands."""

    pid, log = 4242, None

    def running(self) -> bool:
        return True

    def interrupt(self) -> None: ...

    def stop(self) -> None: ...

    def detach(self) -> None: ...


def _twice(keys: list[str]) -> list[str]:
    return [key for key, count in Counter(keys).items() if count > 1]


@pytest.mark.parametrize("mode", MODES, ids=[mode.__name__ for mode in MODES])
def test_a_mode_binds_each_key_once(mode: type[Mode]) -> None:
    keys = [key for key, _ in BindingsMap(mode.BINDINGS)]
    assert not _twice(keys), f"{mode.__name__} binds {_twice(keys)} more than once"


def test_the_app_leaves_the_keys_to_its_modes() -> None:
    assert "BINDINGS" not in GputopApp.__dict__


@pytest.mark.parametrize(("feed", "command", "mode"), [
    pytest.param(FedSampler(), None, LiveMode, id="live"),
    pytest.param(FedSampler(), FedCommand(), RunMode, id="run"),
    pytest.param(FedPlayback(), None, ReplayMode, id="replay"),
    pytest.param(FedFleet(), None, FleetMode, id="fleet"),
])
def test_the_app_binds_its_modes_keys_once_each(
        feed: FrameFeed, command: FedCommand | None, mode: type[Mode]) -> None:
    app = build_app(feed, command=command, start=False)
    assert type(app.mode) is mode
    bound = app._bindings.key_to_bindings  # what Textual looks keys up in
    assert {key: len(bindings) for key, bindings in bound.items() if len(bindings) > 1} == {}
    for key, binding in BindingsMap(mode.BINDINGS):
        assert bound[key] == [binding]


def test_g_sorts_live_and_jumps_in_a_replay() -> None:
    live = build_app(FedSampler(), start=False)._bindings.key_to_bindings["g"]
    replay = build_app(FedPlayback(), start=False)._bindings.key_to_bindings["g"]
    assert [b.action for b in live] == ["sort('gpu')"]
    assert [b.action for b in replay] == ["mode('jump', 'start')"]
