"""A frame's changed lines are composed and written while the frame is shown, in one pass:
no message round per pane, no 1/60 s update timer to wake the app's thread a second time,
each changed row rendered alone, as Textual's compositor would write it. Where that cannot
be done alone (a pane changes height, a page is on top, a notification over a pane),
Textual paints."""

from __future__ import annotations

import re

import pytest
from textual.screen import Screen

from gputop.core.model import Frame
from gputop.tui import build_app, paint
from gputop.tui.app import GputopApp
from gputop.tui.textual_adapter import visible_widgets
from gputop.tui.widgets.help import HelpScreen
from gputop.tui.widgets.linepane import LinePane
from tests.helpers.spy import spy
from tests.helpers.terminal import cells, ends_plain
from tests.helpers.tui import FedSampler, first_frames, frames, running, sync


def _app() -> GputopApp:
    return build_app(FedSampler())


def _written(app: GputopApp, monkeypatch: pytest.MonkeyPatch) -> list[dict[tuple[int, int], str]]:
    """What each update written from now on puts where: (row, column) to the sequences
    written there (the text with its styles), as a terminal would take them."""
    written: list[dict[tuple[int, int], str]] = []

    def record(screen: Screen[object], renderable: object) -> None:
        sequences = renderable.render_segments(app.console)  # type: ignore[attr-defined]
        parts = re.split(r"\x1b\[(\d+);(\d+)H", sequences.replace("\n", ""))
        written.append({(int(row), int(column)): text for row, column, text
                        in zip(parts[1::3], parts[2::3], parts[3::3], strict=True)})

    monkeypatch.setattr(app, "_display", spy(app._display, record))
    return written


async def _writes_for(later: list[Frame], monkeypatch: pytest.MonkeyPatch
                      ) -> list[dict[tuple[int, int], str]]:
    """What showing each of `later` after the first five writes, on a fresh app."""
    app = _app()
    async with running(app, *later[:5], size=(120, 40)) as pilot:
        written = _written(app, monkeypatch)
        for frame in later[5:]:
            app.show_frame(frame)
            await pilot.pause()
        return written


@pytest.mark.parametrize("no_color", ["", "1"])
@sync
async def test_a_frames_rows_are_written_as_textuals_compositor_writes_them(
    monkeypatch: pytest.MonkeyPatch, no_color: str,
) -> None:
    monkeypatch.setenv("NO_COLOR", no_color)
    later = frames("data-starved", 9, attach=True)
    alone = await _writes_for(later, monkeypatch)
    monkeypatch.setattr(paint, "_rows_alone", lambda screen, widgets: None)
    composed = await _writes_for(later, monkeypatch)
    assert all(alone) and len(alone) == len(composed) == 4
    assert [update.keys() for update in alone] == [update.keys() for update in composed]
    for by_us, by_textual in zip(alone, composed, strict=True):
        for place, text in by_us.items():
            assert cells(text) == cells(by_textual[place]), f"row {place} shows otherwise"
            assert ends_plain(text), f"row {place} leaves its style on for the next move"


@sync
async def test_a_row_written_alone_changes_only_what_differs_between_spans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Colours only where they change, a reset only where an attribute goes and at the row's
    end: fewer bytes than Textual's whole style and reset around every span, which was
    nearly half of a frame's bytes."""
    monkeypatch.setenv("NO_COLOR", "")
    later = frames("data-starved", 9, attach=True)
    alone = await _writes_for(later, monkeypatch)
    monkeypatch.setattr(paint, "_rows_alone", lambda screen, widgets: None)
    composed = await _writes_for(later, monkeypatch)
    ours, theirs = ("".join(text for update in way for text in update.values())
                    for way in (alone, composed))
    assert len(ours) < 0.8 * len(theirs), f"{len(ours)} characters, Textual's way {len(theirs)}"
    assert ours.count("\x1b[0m") < 0.5 * theirs.count("\x1b[0m")


@sync
async def test_a_frame_renders_its_changed_rows_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not every line of every widget under them, the screen's own background included."""
    app = _app()
    later = frames("data-starved", 8)
    async with running(app, *later[:5], size=(120, 40)):
        rendered: list[object] = []
        for widget in (app.screen, *app.query(LinePane)):
            monkeypatch.setattr(widget, "render_lines", spy(widget.render_lines, rendered.append))
        written = _written(app, monkeypatch)
        app.show_frame(later[5])
        assert written and written[0], "the frame changed no row"
        assert rendered == [], "whole widgets were rendered for a frame's changed rows"


@sync
async def test_rows_under_a_notification_are_composed_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A notification tall enough to cover the GPU rows, which change every frame."""
    app = _app()
    later = frames("data-starved", 8)
    async with running(app, *later[:5], size=(120, 40), notifications=True) as pilot:
        app.notify("\n".join(f"note {n}" for n in range(34)), timeout=60)
        await pilot.pause(0.3)
        toast = next(region for widget, (region, _) in visible_widgets(app.screen).items()
                     if type(widget).__name__ == "Toast")
        written = _written(app, monkeypatch)
        for frame in later[5:]:
            app.show_frame(frame)
            await pilot.pause()
        rows_under = {row for update in written for row, _ in update
                      if row - 1 in range(toast.y, toast.bottom)}
        assert rows_under, "no frame changed a row under the notification"
        notes = [update[row, toast.x + 1] for update in written for row in rows_under
                 if (row, toast.x + 1) in update]
        assert len(notes) >= len(rows_under), "a row was written over the notification"
        assert any("note" in text for text in notes)


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


@sync
async def test_a_line_wider_than_its_row_is_cut_as_its_strip_is() -> None:
    """A row whose spans overrun the width shows their first cells, each in its span's
    style, as the rows that fit do; the spans past the edge are not written."""
    app = _app()
    async with running(app, *first_frames(), size=(120, 40)):
        pane = app.query_one("#advice", LinePane)
        spans = (("warn text ", "warn"), ("plain text ", "plain"), ("dim " * 10, "dim"),
                 ("never shown", "crit"))
        pane.set_lines([spans, spans[:2]])
        whole = cells(pane.row_sequence(1, 21, app.console))
        for width in (5, 10, 15, 21, 30):
            cut = cells(pane.row_sequence(0, width, app.console))
            assert "".join(c[0] for c in cut) == "".join(t for t, _ in spans)[:width]
            assert cut[:min(width, 21)] == whole[:min(width, 21)]
            assert ends_plain(pane.row_sequence(0, width, app.console))
