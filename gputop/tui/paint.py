"""A frame's changed lines composed and written in one pass, on the app's thread, at once.

Textual repaints through messages: a pane that refreshes wakes its own task, which tells the
screen, which arms a 1/60 s timer that composes and writes the update. On a 1 Hz monitor
that is a task switch per pane and a second wake-up of the app's thread a tick (each paid
with caches gone cold in the second between). While a frame is shown, the panes instead
hand their changed lines to the open batch, which writes them when it closes: each row
rendered by its pane alone and put at its place on the screen, as Textual's compositor
writes it (which renders every line of every widget under the changed rows, the screen's
own background included, to keep the few that changed). What the batch cannot paint alone
(a pane that changes height, a layout or repaint already pending, a screen not on top, a
pane partly out of view or under another widget, such as a notification) takes Textual's
way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from textual.geometry import Region
from textual.screen import Screen
from textual.widget import Widget

from gputop.tui.textual_adapter import (
    VisibleWidgets,
    compose_now,
    display_rows,
    has_work_pending,
    visible_widgets,
)


class _Batch:
    """The panes a frame changed, each with the regions (its own coordinates) to repaint."""

    __slots__ = ("regions", "relayout")

    def __init__(self) -> None:
        self.regions: dict[Widget, list[Region]] = {}
        self.relayout = False  # a pane changed height: the screen lays out and repaints


_open: _Batch | None = None


def repaint(widget: Widget, regions: Sequence[Region]) -> None:
    """Repaint `regions` of `widget`: with the open batch when one is, else at once."""
    if _open is None:
        widget.refresh(*regions)
    else:
        _open.regions.setdefault(widget, []).extend(regions)


def relayout(widget: Widget) -> None:
    """`widget` changed size: lay the screen out again (the open batch leaves its panes to
    that, and paints nothing itself)."""
    widget.refresh()
    if _open is not None:
        _open.relayout = True


@contextmanager
def together(screen: Screen[object]) -> Iterator[None]:
    """Collect the repaints made inside, then paint them on `screen` in one pass (an inner
    batch leaves its repaints to the outer one)."""
    global _open
    if _open is not None:
        yield
        return
    batch = _open = _Batch()
    try:
        yield
    finally:
        _open = None
    if batch.regions:
        _paint(screen, batch)


def _paint(screen: Screen[object], batch: _Batch) -> None:
    """Write the batch's rows now (each alone where it can be, else composed by the screen),
    or leave them to Textual's update timer where something else must happen first."""
    if batch.relayout or not _paints_alone(screen, batch.regions):
        for widget, regions in batch.regions.items():
            widget.refresh(*regions)
        return
    sequences = _rows_alone(screen, batch.regions)
    if sequences is not None:
        display_rows(screen, sequences)
        return
    compose_now(screen, batch.regions)


def _paints_alone(screen: Screen[object], widgets: dict[Widget, list[Region]]) -> bool:
    """Whether `screen` is drawn on top with nothing of its own pending, and holds every one
    of `widgets` (mounted, laid out)."""
    visible = visible_widgets(screen)  # only this screen's widgets are in it
    return (screen.is_current and not has_work_pending(screen)
            and all(widget.is_mounted and widget in visible for widget in widgets))


def _rows_alone(screen: Screen[object], widgets: dict[Widget, list[Region]]) -> str | None:
    """The batch's rows as terminal sequences, each rendered by its own pane, or None where
    a pane is partly out of view or another widget overlaps it (the compositor must combine
    them)."""
    if screen.app.is_inline:
        return None
    visible = visible_widgets(screen)
    console = screen.app.console
    sequences: list[str] = []
    for widget, regions in widgets.items():
        if not _whole_and_alone(widget, visible):
            return None
        region = visible[widget][0]
        x, top, width = region.x, region.y, region.width
        row_sequence = getattr(widget, "row_sequence", None)
        for row in regions:
            for y in range(row.y, row.bottom):
                sequences.append(f"\x1b[{top + y + 1};{x + 1}H")  # Control.move_to(x, top + y)
                if row_sequence is not None:  # a LinePane renders a row with no Strip
                    sequences.append(row_sequence(y, width, console))
                else:
                    sequences.append(widget.render_lines(Region(0, y, width, 1))[0]
                                     .render(console))
    return "".join(sequences)


_judged: tuple[VisibleWidgets | None, dict[Widget, bool]] = (None, {})


def _whole_and_alone(widget: Widget, visible: VisibleWidgets) -> bool:
    """Whether `widget` is wholly in view with no other widget over it, judged once per
    arrangement of the screen (the compositor makes a new `visible` on every reflow)."""
    global _judged
    judged_in, judged = _judged
    if judged_in is not visible:
        judged = {}
        _judged = (visible, judged)
    alone = judged.get(widget)
    if alone is None:
        region, clip = visible[widget]
        alone = judged[widget] = (clip.contains_region(region)
                                  and not _overlapped(widget, region, visible))
    return alone


def _overlapped(widget: Widget, region: Region, visible: VisibleWidgets) -> bool:
    """Whether a visible widget other than `widget` and those it lies in overlaps `region`."""
    below = set(widget.ancestors_with_self)
    return any(other not in below and region.overlaps(other_region)
               for other, (other_region, _clip) in visible.items())
