"""A frame's changed lines composed and written in one pass, on the app's thread, at once.

Textual repaints through messages: a pane that refreshes wakes its own task, which tells the
screen, which arms a 1/60 s timer that composes and writes the update. On a 1 Hz monitor
that is a task switch per pane and a second wake-up of the app's thread a tick (each paid
with caches gone cold in the second between). While a frame is shown, the panes instead
hand their changed lines to the open batch, which marks them and has the screen compose
and write them when it closes. What the batch cannot paint alone (a pane that changes
height, a layout or repaint already pending, a screen not on top) takes Textual's way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from textual.geometry import Region
from textual.screen import Screen
from textual.widget import Widget


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
    """Compose and write the batch's regions now, or leave them to Textual's update timer
    where something else must happen first."""
    if batch.relayout or not _paints_alone(screen, batch.regions):
        for widget, regions in batch.regions.items():
            widget.refresh(*regions)
        return
    for widget, regions in batch.regions.items():
        widget._set_dirty(*regions)
    screen._compositor.update_widgets(set(batch.regions))
    screen._compositor_refresh()


def _paints_alone(screen: Screen[object], widgets: dict[Widget, list[Region]]) -> bool:
    """Whether `screen` is drawn on top with nothing of its own pending, and holds every one
    of `widgets` (mounted, laid out)."""
    return (screen.is_current and not screen.app._batch_count
            and not (screen._layout_required or screen._scroll_required
                     or screen._repaint_required or screen._recompose_required
                     or screen._dirty_widgets)
            and all(widget.is_mounted and widget.screen is screen
                    and widget in screen._compositor.visible_widgets for widget in widgets))
