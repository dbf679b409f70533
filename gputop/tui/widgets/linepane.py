"""A widget that paints Lines through cached Strips and repaints only the lines that changed.

Its strips skip Textual's styles cache, so the app's line filters (NO_COLOR's NoColor,
Textual's monochrome) are applied here, once per cached strip, and once per style word for
the rows a frame writes alone (gputop.tui.paint), which are made from the spans.
ANSI-to-RGB is left out: the panes' colours come from the theme, never from ANSI names, so
it would change nothing at ~16 us a line.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import zip_longest

from rich.color import ColorSystem
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from textual.filter import ANSIToTruecolor
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

from gputop.tui import paint, sgr
from gputop.tui.lines import STYLE_WORDS, Line, width_of

STRIP_SLACK = 16  # strips kept beyond twice the lines shown, for lines that come back


class PaneStrip(Strip):
    """A Strip that a full-width cut hands back whole without caching `[self]` in itself.

    Textual's Strip.divide stores that one-item list in the strip's own cache, a cycle only
    the cyclic collector frees: every strip a pane dropped (~17 a refresh in the live app)
    lingered with its segments and caches until the next full collection, and the heap's
    swing between collections (~4 MiB) kept lifting the resident size.
    """

    __slots__ = ()

    def divide(self, cuts: Iterable[int]) -> Sequence[Strip]:
        """`[self]` when the only cut is the strip's end, otherwise Textual's cached cut."""
        cuts = list(cuts)
        if [cut for cut in cuts if cut <= self.cell_length] == [self.cell_length]:
            return [self]
        return super().divide(cuts)

    def cut(self, start: int, end: int) -> PaneStrip:
        """The cells from `start` to `end`, a PaneStrip too (Strip.crop makes plain ones)."""
        cropped = self.crop(start, end)
        return PaneStrip(cropped, cropped.cell_length)


class LinePane(Widget):
    """Renders a list of Lines; each line's Strip is cached by its spans and the width, and
    kept on its line while the line is unchanged (a frame draws it again with no lookup).

    The cache keeps the strips most recently put on a line, at most twice the lines shown plus
    STRIP_SLACK: lines that change every tick (counters, bars) leave strips that are never
    drawn again, and a bound near the pane's size keeps memory flat from the first
    seconds on (a cap of hundreds, cleared at once, filled for minutes in quiet panes).
    """

    COMPONENT_CLASSES = {f"pane--{word}" for word in STYLE_WORDS}
    AUTO_HEIGHT = True

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._lines: list[Line] = []
        self._strips: dict[tuple[Line, int], PaneStrip] = {}
        self._shown: list[PaneStrip | None] = []  # each line's strip, while the line stays
        self._span_styles: dict[str, Style] = {}
        self._span_codes: dict[str, tuple[str, str]] = {}  # each word's escapes, around text
        self._steps: dict[tuple[str, str], str] = {}  # (style now, next) -> escapes between
        self._blank: PaneStrip | None = None
        if self.AUTO_HEIGHT:
            self.styles.height = 0
            self.display = False

    @property
    def lines(self) -> list[Line]:
        """The lines shown now (tests read them)."""
        return self._lines

    @property
    def inner_size(self) -> Size:
        """What `size` gives (the content area), from the size the last layout set, where
        `size` looks the widget up on its screen's compositor first (~10 times a frame)."""
        gutter = self.styles.gutter
        width, height = self.outer_size
        return Size(max(0, width - gutter.width), max(0, height - gutter.height))

    @property
    def cached_strips(self) -> int:
        """How many Strips the cache holds now (tests count them)."""
        return len(self._strips)

    @property
    def text(self) -> str:
        """The pane as plain text, one row per line."""
        return "\n".join("".join(text for text, _ in line) for line in self._lines)

    def set_lines(self, lines: Sequence[Line]) -> None:
        """Show `lines`: repaint only rows whose spans changed (with the frame's other panes
        when a `paint.together` batch is open); re-layout only on a new height."""
        old, self._lines = self._lines, list(lines)
        changed = [y for y, (before, after) in enumerate(zip_longest(old, self._lines))
                   if before != after]
        shown = self._shown
        del shown[len(self._lines):]
        shown += [None] * (len(self._lines) - len(shown))
        for y in changed:
            if y < len(shown):
                shown[y] = None
        if self.AUTO_HEIGHT and len(old) != len(self._lines):
            self.styles.height = len(self._lines)
            self.display = bool(self._lines)
            paint.relayout(self)
            return
        if changed:  # one repaint for them all: each refresh clears caches and checks idle
            width = self.inner_size.width
            paint.repaint(self, [Region(0, y, width, 1) for y in changed])

    def notify_style_update(self) -> None:
        """Theme or CSS changed: forget every cached style and strip."""
        super().notify_style_update()
        self._span_styles.clear()
        self._span_codes.clear()
        self._steps.clear()
        self._forget_strips()

    def on_resize(self) -> None:
        """Widths changed: old strips no longer fit."""
        self._forget_strips()

    def _forget_strips(self) -> None:
        self._strips.clear()
        self._shown = [None] * len(self._lines)
        self._blank = None

    def render_lines(self, crop: Region) -> list[Strip]:
        """Hand back cached Strips directly; no per-line style pass."""
        width = self.inner_size.width
        strips = [self._strip(y, width) for y in range(crop.y, crop.bottom)]
        if crop.x or crop.width != width:
            strips = [strip.cut(crop.x, crop.right) for strip in strips]
        return list(strips)

    def row_sequence(self, y: int, width: int, console: Console) -> str:
        """Row `y` at `width` as terminal sequences: what its strip shows, made from the spans
        (no Segment, no Strip), with only what changes written between two spans
        (gputop.tui.sgr) and one reset at the row's end."""
        line = self._lines[y] if y < len(self._lines) else ()
        used = width_of(line)
        if used > width:  # the rare line cut: the common one is written without measuring
            line, used = _cut(line, width), width
        steps = self._steps
        parts: list[str] = []
        word_now = ""  # the style the terminal is in: none at the row's start
        for text, word in line:
            if word != word_now:
                parts.append(steps.get((word_now, word)) or self._escapes(word_now, word, console))
                word_now = word
            parts.append(text)
        if used < width:
            if word_now != "plain":
                parts.append(self._escapes(word_now, "plain", console))
                word_now = "plain"
            parts.append(" " * (width - used))
        if word_now:
            parts.append(self._span_codes[word_now][1])
        return "".join(parts)

    def _escapes(self, word_now: str, word: str, console: Console) -> str:
        """The escapes from a span styled `word_now` ("": none yet) to one styled `word`."""
        found = self._steps.get((word_now, word))
        if found is None:
            codes = self._span_codes
            after = codes.get(word) or self._codes(word, console)
            found = after[0] if not word_now else sgr.step(
                codes.get(word_now) or self._codes(word_now, console), after)
            self._steps[word_now, word] = found
        return found

    def _codes(self, word: str, console: Console) -> tuple[str, str]:
        """The escapes a strip renders before and after a span styled `word` (filtered)."""
        style = self._filtered([Segment("x", self._style(word))])[0].style or Style()
        color_system = console._color_system or ColorSystem.TRUECOLOR
        before, after = Strip.render_style(style, "\0", color_system).split("\0")
        self._span_codes[word] = before, after
        return before, after

    def _strip(self, y: int, width: int) -> PaneStrip:
        """Line `y`'s strip: the one it had while unchanged, else from the cache."""
        shown = self._shown
        if y >= len(shown):
            if self._blank is None:
                self._blank = self._build((), width)
            return self._blank
        strip = shown[y]
        if strip is None or strip.cell_length != width:  # drawn at a new width before on_resize
            strip = shown[y] = self._cached(self._lines[y], width)
        return strip

    def _cached(self, line: Line, width: int) -> PaneStrip:
        """`line`'s strip from the cache (made and added when missing), now the newest: the
        cache drops the strips least recently put on a line."""
        key = (line, width)
        strip = self._strips.pop(key, None)  # put back below as the newest
        if strip is None:
            strip = self._build(line, width)
            while len(self._strips) >= 2 * len(self._lines) + STRIP_SLACK:
                del self._strips[next(iter(self._strips))]
        self._strips[key] = strip
        return strip

    def _build(self, line: Line, width: int) -> PaneStrip:
        segments = []
        used = 0
        for text, word in line:
            if used >= width:
                break
            text = text[: width - used]
            segments.append(Segment(text, self._style(word)))
            used += len(text)
        if used < width:
            segments.append(Segment(" " * (width - used), self._style("plain")))
        return PaneStrip(self._filtered(segments), width)

    def _filtered(self, segments: list[Segment]) -> list[Segment]:
        """`segments` through the app's line filters (each maps a segment's style alone)."""
        filters = [f for f in self.get_line_filters() if not isinstance(f, ANSIToTruecolor)]
        if filters:
            background = self.background_colors[1]
            for line_filter in filters:
                segments = line_filter.apply(segments, background)
        return segments

    def _style(self, word: str) -> Style:
        style = self._span_styles.get(word)
        if style is None:
            base = self.rich_style
            part = self.get_component_rich_style(f"pane--{word}", partial=True)
            style = base + part
            self._span_styles[word] = style
        return style


def _cut(line: Line, width: int) -> Line:
    """The spans of `line` that fit in `width` cells, the last one cut."""
    out: list[tuple[str, str]] = []
    used = 0
    for text, word in line:
        if used >= width:
            break
        text = text[: width - used]
        out.append((text, word))
        used += len(text)
    return tuple(out)
