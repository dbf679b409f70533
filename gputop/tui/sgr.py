"""The shortest escape from one span's style to the next: what changed, not the whole style.

Textual writes every span as its whole style, then a reset (`ESC[0m`); on a 200x50 screen
with bars and sparklines that was ~46 % of the bytes a frame writes (8.9 of 19.4 KB), each
byte taken by the kernel's terminal layer and, over SSH, sent. Between two spans the
terminal needs only the colours that differ and the attributes that are new; a reset is
needed only where an attribute goes away (bold to plain, say).
"""

from __future__ import annotations

from typing import NamedTuple

_COLOUR_LEADS = {"38": "fg", "48": "bg"}
_PLAIN_FG = {str(n) for n in (*range(30, 38), *range(90, 98), 39)}
_PLAIN_BG = {str(n) for n in (*range(40, 48), *range(100, 108), 49)}


class Sgr(NamedTuple):
    """One span's style as a terminal takes it: its attribute codes and its colours."""

    attributes: frozenset[str]
    fg: str | None  # the colour's parameters as written ("38;5;71"), None: not set
    bg: str | None


def parse(escape: str) -> Sgr | None:
    """`ESC[<params>m` as attributes and colours; None for anything else (a link, no style),
    which the caller writes whole."""
    if not (escape.startswith("\x1b[") and escape.endswith("m")) or len(escape) < 4:
        return None
    params = escape[2:-1].split(";")
    attributes: set[str] = set()
    colours: dict[str, str] = {}
    i = 0
    while i < len(params):
        code = params[i]
        if code in _COLOUR_LEADS:
            size = {"5": 3, "2": 5}.get(params[i + 1] if i + 1 < len(params) else "", 0)
            if not size or i + size > len(params):
                return None
            colours[_COLOUR_LEADS[code]] = ";".join(params[i:i + size])
            i += size
            continue
        if code in ("", "0"):
            return None  # a reset inside a style: not one Textual writes
        if code in _PLAIN_FG:
            colours["fg"] = code
        elif code in _PLAIN_BG:
            colours["bg"] = code
        elif code.isdigit():
            attributes.add(code)
        else:
            return None
        i += 1
    return Sgr(frozenset(attributes), colours.get("fg"), colours.get("bg"))


def step(before: tuple[str, str], after: tuple[str, str]) -> str:
    """What to write between a span styled `before` and one styled `after`, each given as
    the (opening, closing) escapes written around its text, so that the terminal ends in
    exactly `after`'s style."""
    if before[0] == after[0]:
        return ""
    old, new = parse(before[0]), parse(after[0])
    # Colours carry over unless reset; an attribute the new style lacks needs a reset.
    if old is None or new is None or not old.attributes <= new.attributes or (
            old.fg is not None and new.fg is None) or (old.bg is not None and new.bg is None):
        return before[1] + after[0]
    changed = sorted(new.attributes - old.attributes)
    changed += [colour for colour, was in ((new.fg, old.fg), (new.bg, old.bg))
                if colour is not None and colour != was]
    return f"\x1b[{';'.join(changed)}m" if changed else ""
