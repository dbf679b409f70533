"""A pane's strip cache stays near the size of the pane, however many lines came and went."""

from __future__ import annotations

from textual.app import App, ComposeResult

from gputop.tui.widgets.linepane import STRIP_SLACK, LinePane
from tests.helpers.tui import sync

LINES = 3


class _OnePane(App[None]):
    def compose(self) -> ComposeResult:
        yield LinePane(id="pane")


@sync
async def test_a_pane_of_changing_lines_caches_about_twice_its_lines() -> None:
    app = _OnePane()
    async with app.run_test(size=(60, 10)) as pilot:
        pane = app.query_one(LinePane)
        for tick in range(300):  # every line new each tick, as a counter would make it
            pane.set_lines([((f"line {i} tick {tick}", "plain"),) for i in range(LINES)])
            await pilot.pause()
            assert pane.cached_strips <= 2 * LINES + STRIP_SLACK, tick
        assert pane.cached_strips >= LINES  # the lines on screen are still cached


@sync
async def test_unchanged_lines_keep_their_strips() -> None:
    app = _OnePane()
    async with app.run_test(size=(60, 10)) as pilot:
        pane = app.query_one(LinePane)
        steady = (("steady", "plain"),)
        pane.set_lines([steady, (("tick 0", "plain"),)])
        await pilot.pause()
        first = pane.render_lines(pane.region.reset_offset)[0]
        for tick in range(1, 100):
            pane.set_lines([steady, ((f"tick {tick}", "plain"),)])
            await pilot.pause()
        assert pane.render_lines(pane.region.reset_offset)[0] is first
