"""What a terminal shows for written text: each cell's character and the style it is in."""

from __future__ import annotations

import re

_SGR = re.compile(r"\x1b\[([\d;]*)m")
_OFF = {"22": ("1", "2"), "23": ("3",), "24": ("4",), "25": ("5",), "27": ("7",),
        "28": ("8",), "29": ("9",)}

Cell = tuple[str, str | None, str | None, frozenset[str]]  # char, fg, bg, attributes


def cells(text: str) -> list[Cell]:
    """Each printed character of `text` with the colours and attributes it was printed in,
    as an xterm interprets the SGR escapes (other escapes are not expected here)."""
    fg: str | None = None
    bg: str | None = None
    attributes: set[str] = set()
    out: list[Cell] = []
    at = 0
    for match in _SGR.finditer(text):
        out += [(char, fg, bg, frozenset(attributes)) for char in text[at:match.start()]]
        at = match.end()
        params = match.group(1).split(";")
        i = 0
        while i < len(params):
            code = params[i]
            if code in ("", "0"):
                fg = bg = None
                attributes.clear()
            elif code in ("38", "48"):
                size = 3 if params[i + 1] == "5" else 5
                colour = ";".join(params[i + 1:i + size])
                if code == "38":
                    fg = colour
                else:
                    bg = colour
                i += size - 1
            elif code == "39":
                fg = None
            elif code == "49":
                bg = None
            elif 30 <= int(code) <= 37 or 90 <= int(code) <= 97:
                fg = code
            elif 40 <= int(code) <= 47 or 100 <= int(code) <= 107:
                bg = code
            elif code in _OFF:
                attributes.difference_update(_OFF[code])
            else:
                attributes.add(code)
            i += 1
    out += [(char, fg, bg, frozenset(attributes)) for char in text[at:]]
    assert "\x1b" not in "".join(c[0] for c in out), "an escape the helper does not know"
    return out


def ends_plain(text: str) -> bool:
    """Whether the terminal is back in its default style after `text`."""
    probe = cells(text + "x")[-1]
    return probe[1:] == (None, None, frozenset())
