"""The tiny text model every pane renders: a line is a tuple of (text, style word) spans."""

from __future__ import annotations

from operator import itemgetter

Span = tuple[str, str]
Line = tuple[Span, ...]
_TEXT = itemgetter(0)

STYLE_WORDS = (
    "plain", "dim", "bold", "title", "ok", "warn", "crit", "accent", "cursor", "banner",
    "banner-crit", "header", "probe", "phase-data", "phase-h2d", "phase-forward",
    "phase-backward", "phase-optimizer", "phase-other", "footer", "footer-key", "badge",
)


def width_of(line: Line) -> int:
    """Cells a line occupies (every glyph gputop draws is one cell wide)."""
    return len("".join(map(_TEXT, line)))  # in C: ~2/3 of a generator's sum


def clip(line: Line, width: int) -> Line:
    """Cut a line to `width` cells, ending with '…' when something was cut."""
    if width_of(line) <= width:
        return line
    out: list[Span] = []
    room = width - 1
    for text, style in line:
        if room <= 0:
            break
        out.append((text[:room], style))
        room -= len(text[:room])
    out.append(("…", "dim"))
    return tuple(out)


def plain(text: str, style: str = "plain") -> Line:
    """A line of one span."""
    return ((text, style),)


def bar_spans(filled: tuple[str, str], style: str) -> tuple[Span, Span]:
    """A bar's filled part in `style` and its empty track dimmed."""
    return (filled[0], style), (filled[1], "dim")
