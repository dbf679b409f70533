"""Textual's floor for gputop's drawing: a bare app that repaints as many lines as gputop-ui.

Run by bench_tui.py beside gputop-ui (the real app fed recorded frames), in a tmux pane of
the same size: one widget, a timer on the app's own loop (no thread, no data), and each
second a new strip for as many lines as gputop-ui marked for repaint in its last second
(`--follow FILE`, the count it keeps there; without it, every line), ten styled spans a
line as a process row has, painted in one pass as gputop's panes are (gputop.tui.paint:
each row rendered alone, here through Textual's Strip, and written through gputop's
driver). What is left is what it costs to put those lines on the terminal from a Textual
app: gputop-ui's CPU over this one says how far drawing is from the floor.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.segment import Segment
from rich.style import Style
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from repaint_count import RepaintCount

from gputop.tui import paint
from gputop.tui.driver import QuietLinuxDriver
from gputop.tui.terminal_caps import PLAIN

SPANS = 10  # a process row's spans: PID, user, %CPU, bars, memory, threads, command...
STYLES = tuple(Style(color=colour, bold=bold) for colour in ("green", "cyan", "yellow", "white",
                                                             "magenta") for bold in (False, True))


class EveryLine(Widget):
    """Paints `tick`-numbered lines; a tick renews as many lines as gputop-ui repainted."""

    def __init__(self, follow: Path | None) -> None:
        super().__init__()
        self.tick = 0
        self._strips: dict[int, Strip] = {}
        self._repaints = RepaintCount(follow)

    def next_tick(self) -> None:
        """New content on as many lines as gputop-ui repainted (or on all), each marked dirty
        and painted in one pass as gputop's panes are (gputop.tui.paint)."""
        self.tick += 1
        self._strips.clear()
        width, height = self.size
        lines = self._repaints.lines(height)
        if lines:
            with paint.together(self.screen):
                paint.repaint(self, [Region(0, y, width, 1) for y in range(lines)])

    def render_lines(self, crop: Region) -> list[Strip]:
        """A strip per line, built once per tick."""
        return [self._strip(y) for y in range(crop.y, crop.bottom)]

    def _strip(self, y: int) -> Strip:
        strip = self._strips.get(y)
        if strip is None:
            width = self.size.width
            cell = max(1, width // SPANS)
            segments = [Segment(f"{self.tick * 7 + y * 13 + i:>{cell}d}"[-cell:],
                                STYLES[(y + i) % len(STYLES)]) for i in range(SPANS)]
            used = cell * SPANS
            if used < width:
                segments.append(Segment(" " * (width - used)))
            strip = self._strips[y] = Strip(segments, width)
        return strip


class FloorApp(App[None]):
    """One EveryLine filling the screen, renewed every second."""

    look = PLAIN  # what gputop's driver reads from its app

    def __init__(self, follow: Path | None) -> None:
        super().__init__(driver_class=QuietLinuxDriver)
        self.follow = follow

    def compose(self) -> ComposeResult:
        yield EveryLine(self.follow)

    def on_mount(self) -> None:
        """Repaint each second."""
        self.set_interval(1.0, self.query_one(EveryLine).next_tick)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--follow", type=Path, metavar="FILE",
                        help="repaint as many lines a second as the count in FILE grew")
    FloorApp(parser.parse_args().follow).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
