"""A pane's strip cache stays near the size of the pane, however many lines came and went,
and the strips it drops are freed at once (no reference cycle waits for the collector)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from rich.segment import Segment
from textual.app import App, ComposeResult
from textual.strip import Strip

from gputop.tui import build_app
from gputop.tui.widgets.linepane import STRIP_SLACK, LinePane, PaneStrip
from tests.helpers.tui import FedSampler, frames, sync

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


@contextmanager
def cyclic_garbage() -> Iterator[list[object]]:
    """What only the cyclic collector could free of what the block dropped (listed at its end)."""
    found: list[object] = []
    gc.collect()
    flags, enabled = gc.get_debug(), gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield found
        gc.collect()
        found.extend(gc.garbage)
    finally:
        gc.garbage.clear()
        gc.set_debug(flags)
        if enabled:
            gc.enable()


def test_a_cut_pane_strip_divides_whole_without_a_cycle() -> None:
    with cyclic_garbage() as garbage:
        strip = PaneStrip([Segment("0123456789")], 10).cut(2, 6)
        assert isinstance(strip, PaneStrip)
        assert strip.text == "2345"
        assert strip.divide([4]) == [strip]
        assert [part.text for part in strip.divide([1, 4])] == ["2", "345"]
        del strip
    assert sum(isinstance(o, Strip) for o in garbage) == 0


@sync
async def test_dropped_strips_are_freed_without_the_cyclic_collector() -> None:
    app = _OnePane()
    async with app.run_test(size=(60, 10)) as pilot:
        pane = app.query_one(LinePane)
        with cyclic_garbage() as garbage:
            for tick in range(100):
                pane.set_lines([((f"line {i} tick {tick}", "plain"),) for i in range(LINES)])
                await pilot.pause()
        assert sum(isinstance(o, Strip) for o in garbage) == 0


@sync
async def test_the_live_app_leaves_no_strips_to_the_cyclic_collector() -> None:
    app = build_app(FedSampler())
    fed = frames("data-starved", 60, attach=True, advice=True)
    async with app.run_test(size=(120, 40)) as pilot:
        for frame in fed[:10]:  # first screens, styles and caches
            app.show_frame(frame)
            await pilot.pause()
        with cyclic_garbage() as garbage:
            for frame in fed[10:]:
                app.show_frame(frame)
                await pilot.pause()
        assert sum(isinstance(o, Strip) for o in garbage) == 0
