"""The one place gputop touches Textual's private API, each piece it relies on declared below.

Textual offers no public way to write a frame's rows now instead of on its update timer,
to ask whether a screen has work of its own pending, to replace its driver's writer thread,
to reuse its key parser, to bind keys to one app rather than its class, to ask whether an
app is closing, or to fail it as a handler's exception would; what gputop does there goes
through this module alone. The
literals below name every private piece used here: tests/tui/test_textual_adapter.py reads
them (without importing this module, which a changed Textual may break) and checks each
against the installed Textual, so an upgrade that moves one fails there, by name.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from rich.console import Console, RenderableType
from textual._compositor import CompositorUpdate
from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.app import App
from textual.binding import Binding, BindingsMap
from textual.drivers.linux_driver import LinuxDriver
from textual.geometry import Region
from textual.screen import Screen
from textual.widget import Widget

# Callables by dotted path, with their parameters' names (a class: its constructor's; None:
# any): the code below calls each so.
CALLABLES = (
    ("textual._compositor.CompositorUpdate.render_segments", ("self", "console")),
    ("textual._compositor.Compositor.update_widgets", ("self", "widgets")),
    ("textual.screen.Screen._compositor_refresh", ("self",)),
    ("textual.widget.Widget._set_dirty", ("self", "regions")),
    ("textual.app.App._display", ("self", "screen", "renderable")),
    ("textual._xterm_parser.XTermParser", ("debug",)),
    ("textual._xterm_parser.XTermParser.feed", ("self", "data")),
    ("textual._xterm_parser.XTermParser.tick", ("self",)),
    ("textual._time.get_time", None),
    ("textual.drivers.linux_driver.LinuxDriver._get_terminal_size", ("self",)),
    ("textual.drivers._writer_thread.WriterThread.stop", ("self",)),
    ("textual.app.App._handle_exception", ("self", "error")),
)
# Properties by dotted path.
PROPERTIES = ("textual._compositor.Compositor.visible_widgets", "textual.app.App._screen_stack")
# Attributes a live object of a Textual class has.
ATTRIBUTES = (
    ("textual.app.App", "_batch_count"),
    ("textual.app.App", "_bindings"),
    ("textual.app.App", "_closing"),
    ("textual.screen.Screen", "_compositor"),
    ("textual.screen.Screen", "_layout_required"),
    ("textual.screen.Screen", "_scroll_required"),
    ("textual.screen.Screen", "_repaint_required"),
    ("textual.screen.Screen", "_recompose_required"),
    ("textual.screen.Screen", "_dirty_widgets"),
    ("textual._xterm_parser.XTermParser", "_timeout_time"),
)
# Names a Textual function's code uses, each a behaviour the code below counts on.
CODE_NAMES = (
    # App._display writes a CompositorUpdate as its render_segments give it
    ("textual.app.App._display", "CompositorUpdate"),
    ("textual.app.App._display", "render_segments"),
    # LinuxDriver starts its writer thread in _writer_thread, and stops it there on close
    ("textual.drivers.linux_driver.LinuxDriver.start_application_mode", "_writer_thread"),
    ("textual.drivers.linux_driver.LinuxDriver.close", "_writer_thread"),
    # it measures the terminal with _get_terminal_size on every resize
    ("textual.drivers.linux_driver.LinuxDriver.start_application_mode", "_get_terminal_size"),
    # the parser times out a lone Escape at _timeout_time, on get_time's clock
    ("textual._xterm_parser.XTermParser.tick", "_timeout_time"),
    ("textual._xterm_parser.XTermParser.tick", "get_time"),
    # a key is looked up in the app's own _bindings, not its class's
    ("textual.screen.Screen._binding_chain.fget", "_bindings"),
)

VisibleWidgets = dict[Widget, tuple[Region, Region]]

__all__ = ["LinuxDriverHooks", "VisibleWidgets", "XTermParser", "bind_keys", "can_draw",
           "closing", "compose_now", "display_rows", "fail", "has_work_pending",
           "parser_timeout", "visible_widgets"]


def bind_keys(app: App[Any], bindings: Iterable[Binding]) -> None:
    """Bind `bindings` on `app` alone, each key replacing what its class bound to it (as a
    subclass's BINDINGS replace its base's)."""
    app._bindings.key_to_bindings.update(BindingsMap(bindings).key_to_bindings)


def closing(app: App[Any]) -> bool:
    """Whether `app` has begun to close (safe to ask from any thread)."""
    return app._closing


def can_draw(app: App[Any]) -> bool:
    """Whether `app` is up with a screen to draw on, and not on its way out (asked to exit,
    or closing)."""
    return (app.is_running and bool(app._screen_stack)
            and app.return_code is None and not app._closing)


def fail(app: App[Any], error: Exception) -> None:
    """End `app` over `error` as an exception in a message handler would (its traceback
    shown)."""
    app._handle_exception(error)


def visible_widgets(screen: Screen[object]) -> VisibleWidgets:
    """The widgets `screen` shows, each with its region and clip: the same dict until the
    screen is arranged again."""
    return screen._compositor.visible_widgets


def has_work_pending(screen: Screen[object]) -> bool:
    """Whether `screen` waits to lay out, scroll, repaint or recompose, or its app holds
    repaints back in a batch."""
    return bool(screen.app._batch_count
                or screen._layout_required or screen._scroll_required
                or screen._repaint_required or screen._recompose_required
                or screen._dirty_widgets)


class _RowsUpdate(CompositorUpdate):
    """Terminal sequences that `App._display` writes as it writes Textual's own updates."""

    __slots__ = ("sequences",)

    def __init__(self, sequences: str) -> None:
        self.sequences = sequences

    def render_segments(self, console: Console) -> str:
        return self.sequences


def display_rows(screen: Screen[object], sequences: str) -> None:
    """Write `sequences` on `screen` now, as Textual writes an update (in a synchronized
    update, the cursor put back after)."""
    # _display writes any CompositorUpdate by render_segments (Textual's types say renderable)
    screen.app._display(screen, cast(RenderableType, _RowsUpdate(sequences)))


def compose_now(screen: Screen[object], regions: dict[Widget, list[Region]]) -> None:
    """Have `screen` compose `regions` of its widgets (each in its own coordinates) with
    whatever lies over them and write the result now, not on its update timer."""
    for widget, widget_regions in regions.items():
        widget._set_dirty(*widget_regions)
    screen._compositor.update_widgets(set(regions))
    screen._compositor_refresh()


def parser_timeout(parser: XTermParser) -> float | None:
    """Seconds until `parser` stops waiting for the rest of a sequence (a lone Escape), or
    None while it waits for none."""
    deadline = parser._timeout_time
    if deadline is None:
        return None
    return max(0.0, deadline - get_time())


class LinuxDriverHooks(LinuxDriver):
    """LinuxDriver with the private parts a subclass changes given public names."""

    def terminal_size(self) -> tuple[int, int]:
        """The terminal's size, measured on every resize: LinuxDriver's own way here."""
        return LinuxDriver._get_terminal_size(self)

    def _get_terminal_size(self) -> tuple[int, int]:
        return self.terminal_size()

    def retire_stock_writer(self) -> None:
        """End the writer thread LinuxDriver started (once it wrote what it holds): this
        driver's own `write` must write from now on."""
        writer = self._writer_thread
        if writer is not None:
            writer.stop()
            self._writer_thread = None
