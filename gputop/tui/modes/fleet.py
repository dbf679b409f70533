"""The fleet: its hosts on their own screens; the process keys are off (there is no table)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gputop.core.model import Frame
from gputop.tui.feeds import FleetFeed
from gputop.tui.modes.base import Mode
from gputop.tui.modes.keys import INTERRUPT, PAUSE, QUIT
from gputop.tui.widgets.fleet import FleetHostScreen, FleetScreen, FrameScreen

if TYPE_CHECKING:
    from gputop.tui.app import GputopApp


class FleetMode(Mode):
    """The fleet's hosts, one in detail on Enter."""

    BINDINGS = (QUIT, INTERRUPT, PAUSE)

    def __init__(self, app: GputopApp, fleet: FleetFeed) -> None:
        super().__init__(app)
        self.fleet = fleet

    def mounted(self) -> None:
        """The fleet's screen goes over the panes."""
        self.app.push_screen(FleetScreen())

    def show(self, frame: Frame) -> None:
        self.redraw()

    def redraw(self) -> None:
        """Hand the newest frame to the fleet screens on the stack."""
        for screen in self.app.screen_stack:
            if isinstance(screen, FrameScreen):
                screen.show(self.app.frame, paused=self.fleet.paused)

    def choose_host(self, instance: str) -> None:
        """That host in detail, asked for at once; Esc comes back."""
        fleet = self.fleet
        fleet.focus(instance)
        screen = FleetHostScreen(instance)
        screen.show(self.app.frame, paused=fleet.paused)
        self.app.push_screen(screen, lambda _: fleet.focus(None))
