"""A recording played back: stepped, jumped and paced; nothing in it is attached or signalled
(the recorded PIDs are not the machine's now)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.binding import Binding

from gputop.core.model import Frame
from gputop.tui.feeds import PlaybackFeed
from gputop.tui.history import KEEP, History
from gputop.tui.modes.base import Mode
from gputop.tui.modes.keys import FILTER, FILTER_LINE, HELP, INTERRUPT, PAUSE, QUIT, TABLE, sorting
from gputop.tui.views.header import ReplayPlace

if TYPE_CHECKING:
    from gputop.tui.app import GputopApp


class ReplayMode(Mode):
    """A recording's Frames, with the keys that move through it (g jumps here, never sorts)."""

    BINDINGS = (QUIT, INTERRUPT, HELP, PAUSE, FILTER,
                Binding("left", "mode('step', -1)", "back", key_display="←"),
                Binding("right", "mode('step', 1)", "step", key_display="→"),
                Binding("g", "mode('jump', 'start')", "first"),
                Binding("G", "mode('jump', 'end')", "last"),
                Binding("plus,equals_sign", "mode('faster', 1)", "faster", key_display="+"),
                Binding("minus", "mode('faster', -1)", "slower", key_display="-"),
                *sorting("cpu", "rss", "pid", "time"), *TABLE, *FILTER_LINE)
    banner_rows = 1

    def __init__(self, app: GputopApp, playback: PlaybackFeed) -> None:
        super().__init__(app)
        self.playback = playback

    def show(self, frame: Frame) -> None:
        """A replay draws what was recorded up to the tick, jumped or not."""
        trend = self.playback.trend(frame.time, KEEP)
        if trend is not None:
            self.app.history = History.recorded(trend)
        else:
            self.app.history.add(frame)
        self.app.draw(frame)

    def place(self) -> ReplayPlace:
        tick, ticks = self.playback.position()
        return ReplayPlace(tick, ticks, self.playback.speed, self.playback.paused)

    def action_step(self, ticks: int) -> None:
        """Hold the replay and show the tick before or after."""
        self.playback.step(ticks)
        self.app.refresh_panes()

    def action_jump(self, where: str) -> None:
        """Show the first or the newest tick of the recording."""
        self.playback.jump(where)

    def action_faster(self, steps: int) -> None:
        """Play faster or slower."""
        self.playback.faster(steps)
        self.app.refresh_panes()
