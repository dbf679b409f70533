"""Between two spans only what differs is written, and the terminal shows the same styles."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gputop.tui import sgr
from tests.helpers.terminal import cells

_COLOURS = st.sampled_from(["38;5;71", "38;5;253", "38;2;10;20;30", "31", "39", None])
_BACKS = st.sampled_from(["48;5;233", "48;5;234", "48;2;1;2;3", "41", "49", None])
_ATTRIBUTES = st.sets(st.sampled_from(["1", "2", "3", "4", "7", "9"]), max_size=3)


@st.composite
def _styles(draw: st.DrawFn) -> tuple[str, str]:
    """A span's (opening, closing) escapes as Textual renders them ("" for no style)."""
    fg, bg, attributes = draw(_COLOURS), draw(_BACKS), draw(_ATTRIBUTES)
    params = [*sorted(attributes), *(c for c in (fg, bg) if c is not None)]
    return (f"\x1b[{';'.join(params)}m", "\x1b[0m") if params else ("", "")


@given(_styles(), _styles())
def test_a_step_leaves_the_terminal_in_the_next_styles_state(
    before: tuple[str, str], after: tuple[str, str]
) -> None:
    whole = cells(f"{before[0]}a{before[1]}{after[0]}b{after[1]}")
    stepped = cells(f"{before[0]}a{sgr.step(before, after)}b{after[1]}")
    assert stepped == whole


def test_only_the_colour_that_changes_is_written() -> None:
    plain = ("\x1b[38;5;253;48;5;233m", "\x1b[0m")
    ok = ("\x1b[38;5;71;48;5;233m", "\x1b[0m")
    bold = ("\x1b[1;38;5;214;48;5;233m", "\x1b[0m")
    assert sgr.step(plain, ok) == "\x1b[38;5;71m"
    assert sgr.step(plain, plain) == ""
    assert sgr.step(plain, bold) == "\x1b[1;38;5;214m"
    assert sgr.step(bold, plain) == "\x1b[0m\x1b[38;5;253;48;5;233m"  # bold must go: a reset


def test_what_it_cannot_read_is_written_whole() -> None:
    link = ("\x1b]8;;http://x\x1b\\", "\x1b]8;;\x1b\\")
    plain = ("\x1b[38;5;253;48;5;233m", "\x1b[0m")
    assert sgr.parse(link[0]) is None
    assert sgr.step(plain, link) == plain[1] + link[0]
    assert sgr.parse("\x1b[38;5m") is None
