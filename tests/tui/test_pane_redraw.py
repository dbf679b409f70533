"""The GPU, host and steps panes are drawn from the frame (and the GPU history): a key
press that changes only the table does not draw them again; a new frame or width does."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from gputop.tui import app as app_module
from gputop.tui import build_app
from tests.helpers.tui import FedSampler, first_frames, running, sync

DRAWERS = ("gpu_lines", "host_lines", "step_lines")


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many times the app called each pane's drawing function."""
    calls: Counter[str] = Counter()

    def counting(name: str, draw: Callable[..., object]) -> Callable[..., object]:
        def counted(*args: object, **kwargs: object) -> object:
            calls[name] += 1
            return draw(*args, **kwargs)
        return counted

    for name in DRAWERS:
        monkeypatch.setattr(app_module, name, counting(name, getattr(app_module, name)))
    return calls


@sync
async def test_a_table_key_does_not_draw_the_panes_beside_the_table(
        drawn: Counter[str]) -> None:
    shown = first_frames(attach=True)
    app = build_app(FedSampler())
    async with running(app, *shown[:-1]) as pilot:
        assert all(drawn[name] for name in DRAWERS)
        before = drawn.copy()
        await pilot.press("t", "n", "n", "slash", *"py", "escape")
        assert drawn == before  # sorts and a filter: the table's redraws only
        app.show_frame(shown[-1])
        await pilot.pause()
        assert drawn == before + Counter(DRAWERS)  # a new frame: each pane once
        await pilot.resize_terminal(100, 40)
        await pilot.pause()
        assert drawn == before + Counter(DRAWERS) + Counter(DRAWERS)  # a new width
