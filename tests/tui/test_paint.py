"""A frame's changed lines are composed and written while the frame is shown, in one pass:
no message round per pane, no 1/60 s update timer to wake the app's thread a second time.
Where that cannot be done alone (a pane changes height, a page is on top), Textual paints."""

from __future__ import annotations

import pytest
from textual.screen import Screen

from gputop.tui import build_app
from gputop.tui.app import GputopApp
from gputop.tui.widgets.help import HelpScreen
from gputop.tui.widgets.linepane import LinePane
from tests.helpers.spy import spy
from tests.helpers.tui import FedSampler, first_frames, frames, running, sync


def _app() -> GputopApp:
    return build_app(FedSampler())


def _displayed(app: GputopApp, monkeypatch: pytest.MonkeyPatch) -> list[Screen[object]]:
    """The screens each update written from now on was composed for."""
    shown: list[Screen[object]] = []
    monkeypatch.setattr(app, "_display", spy(
        app._display, lambda screen, renderable: shown.append(screen)))
    return shown


@sync
async def test_a_frame_is_written_before_show_frame_returns_and_only_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = _app()
    later = frames("data-starved", 8)
    async with running(app, *later[:5], size=(120, 40)) as pilot:
        shown = _displayed(app, monkeypatch)
        app.show_frame(later[5])
        assert shown == [app.screen], "the frame waited for Textual's update timer"
        await pilot.pause(0.1)  # six periods of the update timer
        assert shown == [app.screen], "the frame's lines were composed twice"


@sync
async def test_a_pane_that_changes_height_is_laid_out_by_textual() -> None:
    app = _app()
    quiet = frames("data-starved", 6, attach=True)
    advised = frames("data-starved", 6, attach=True, advice=True)
    async with running(app, *quiet[:5], size=(120, 40)) as pilot:
        advice = app.query_one("#advice", LinePane)
        assert advice.lines == []
        app.show_frame(advised[5])
        await pilot.pause()
        assert advice.lines, "the advice pane was not given its lines"
        assert advice.size.height == len(advice.lines), "the advice pane was not laid out"


@sync
async def test_a_frame_under_a_page_is_left_to_textual_and_shows_when_it_closes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = _app()
    later = frames("data-starved", 8)
    async with running(app, *later[:5], size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        shown = _displayed(app, monkeypatch)
        app.show_frame(later[5])
        assert shown == [], "a frame under the help page was written over it"
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)
        header = app.query_one("#header", LinePane)
        assert any(app.screen is screen for screen in shown)
        assert header.lines and "data-starved" in header.text


@sync
async def test_panes_outside_a_frame_repaint_as_textual_does() -> None:
    """A key press redraws the table alone, through Textual's own refresh."""
    app = _app()
    async with running(app, *first_frames(), size=(120, 40)) as pilot:
        table_before = app.query_one("#procs", LinePane).text
        await pilot.press("n")  # sort by PID
        await pilot.pause()
        assert app.query_one("#procs", LinePane).text != table_before
