"""Showing a frame looks nothing up on the screen: the panes are found once, their widths
come from the last layout, and whether a pane can be written alone is judged once per
arrangement. Each such lookup walks the DOM or the compositor's map (counted, not timed:
before, a frame made ~8 queries and ~10 region lookups)."""

from __future__ import annotations

import pytest
from textual.dom import DOMNode
from textual.widget import Widget

from gputop.tui import build_app
from gputop.tui.widgets.linepane import LinePane
from tests.helpers.tui import FedSampler, frames, running, sync


def _counting(monkeypatch: pytest.MonkeyPatch, owner: type, name: str, calls: list[str]) -> None:
    """Count each use of `owner.name` (a property or a method) in `calls`."""
    real = getattr(owner, name)
    if isinstance(real, property):
        assert real.fget is not None
        getter = real.fget

        def get(self: object) -> object:
            calls.append(name)
            return getter(self)

        monkeypatch.setattr(owner, name, property(get))
        return

    def call(self: object, *args: object, **kwargs: object) -> object:
        calls.append(name)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(owner, name, call)


@sync
async def test_a_frame_queries_no_widget_and_asks_no_region() -> None:
    later = frames("data-starved", 12, attach=True)
    app = build_app(FedSampler())
    async with running(app, *later[:6], size=(200, 50)) as pilot:
        calls: list[str] = []
        with pytest.MonkeyPatch.context() as patch:
            _counting(patch, DOMNode, "query_one", calls)
            _counting(patch, Widget, "region", calls)
            _counting(patch, Widget, "screen", calls)
            for frame in later[6:]:
                app.show_frame(frame)
        await pilot.pause()
        assert calls == [], f"{len(calls)} lookups in 6 frames: {sorted(set(calls))}"
        panes = list(app.query(LinePane))
        assert all(pane.inner_size == pane.size for pane in panes)
