"""One controller per mode of the app: live, replay, fleet and `gputop run`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gputop.tui.feeds import FleetFeed, PlaybackFeed
from gputop.tui.modes.base import Mode
from gputop.tui.modes.fleet import FleetMode
from gputop.tui.modes.live import LiveMode, Signaller
from gputop.tui.modes.replay import ReplayMode
from gputop.tui.modes.run import Command, RunMode

if TYPE_CHECKING:
    from gputop.tui.app import GputopApp

__all__ = ["MODES", "Command", "FleetMode", "LiveMode", "Mode", "ReplayMode", "RunMode",
           "Signaller", "controller_for"]

MODES = (LiveMode, ReplayMode, FleetMode, RunMode)


def controller_for(app: GputopApp, command: Command | None,
                   signaller: Signaller | None) -> Mode:
    """The controller for what `app` is fed: a fleet, a recording, or this machine (with
    `gputop run`'s `command`, when there is one)."""
    feed = app.sampler
    if isinstance(feed, FleetFeed):
        return FleetMode(app, feed)
    if isinstance(feed, PlaybackFeed):
        return ReplayMode(app, feed)
    if command is not None:
        return RunMode(app, signaller, command)
    return LiveMode(app, signaller)
