"""What every mode's controller offers the app, done as the live view does it."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, ClassVar

from textual.binding import Binding

from gputop.core.model import Frame
from gputop.tui.views.header import ReplayPlace

if TYPE_CHECKING:
    from gputop.tui.app import GputopApp


class Mode:
    """One mode of the app (live, replay, fleet, run): its keys, what the mode's own keys do,
    and how its Frames reach the screen."""

    BINDINGS: ClassVar[tuple[Binding, ...]] = ()
    banner_rows = 0  # rows the header gives to saying what is shown (a replay's place)

    def __init__(self, app: GputopApp) -> None:
        self.app = app

    @functools.cached_property
    def footer_keys(self) -> list[Binding]:
        """The keys the footer names (fixed for the app's life: worked out once)."""
        return list(self.BINDINGS)

    def mounted(self) -> None:
        """The app is up."""

    def show(self, frame: Frame) -> None:
        """Show a new Frame: it joins the history, then every pane is drawn."""
        self.app.history.add(frame)
        self.app.draw(frame)

    def redraw(self) -> None:
        """Draw the current Frame again (a key changed what is shown, or the size)."""
        self.app.draw_panes()

    def place(self) -> ReplayPlace | None:
        """Where in a recording the screen is, for the header; None when live."""
        return None

    def quit(self) -> None:
        """q: leave."""
        self.app.exit()

    def interrupt(self) -> None:
        """Ctrl-C: leave."""
        self.app.exit()

    def hang_up(self) -> None:
        """The terminal is gone: leave."""
        self.app.exit()

    def choose_host(self, instance: str) -> None:
        """Enter on a fleet host's row (only the fleet shows them)."""
