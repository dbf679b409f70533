"""How the screen is drawn on this terminal, decided once at start-up (standard library only).

ASCII or Unicode glyphs (`--ascii`, or a locale whose encoding is not UTF-8, as htop does),
colour or attributes only (NO_COLOR, https://no-color.org), and whether the terminal has
only 8/16 colours (then the theme uses the terminal's own palette, whose hues stay apart).
"""

from __future__ import annotations

import locale
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

_FEW_COLOUR_SYSTEMS = ("standard", "windows")  # TEXTUAL_COLOR_SYSTEM values with 8/16 colours
_TERM_COLOURS = {"256color": "256", "kitty": "256", "16color": "standard"}  # as rich reads TERM


@dataclass(frozen=True, slots=True)
class TerminalCaps:
    """The terminal's drawing choices; the default draws Unicode in full colour."""

    ascii: bool = False        # only ASCII characters reach the terminal
    mono: bool = False         # no colour at all: bold, underline and reverse carry meaning
    few_colours: bool = False  # 8/16 colours: the ANSI palette instead of the RGB theme

    @property
    def ansi(self) -> bool:
        """Whether the theme uses the terminal's ANSI palette (mono or few colours)."""
        return self.mono or self.few_colours


PLAIN = TerminalCaps()  # what tests and screenshots draw: Unicode in full colour


def terminal_caps_of(*, ascii: bool = False, environ: Mapping[str, str] | None = None
                     ) -> TerminalCaps:
    """The look for the terminal we run on: `ascii` forces ASCII glyphs."""
    env = os.environ if environ is None else environ
    return TerminalCaps(
        ascii=ascii or not locale_is_utf8(env),
        mono=bool(env.get("NO_COLOR")),
        few_colours=colour_system(env) in _FEW_COLOUR_SYSTEMS,
    )


def locale_is_utf8(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the user's locale says the terminal takes UTF-8.

    Python switches its UTF-8 mode on by itself exactly when the locale is C or POSIX
    (PEP 540), and coerces LANG=C to C.UTF-8 (PEP 538): that says "C", not "UTF-8".
    """
    env = os.environ if environ is None else environ
    chosen = "PYTHONUTF8" in env or "utf8" in getattr(sys, "_xoptions", {})
    if sys.flags.utf8_mode and not chosen:
        return False
    try:
        codeset = locale.nl_langinfo(locale.CODESET)
    except (AttributeError, ValueError):  # no nl_langinfo on this platform
        codeset = locale.getpreferredencoding(False)
    return codeset.replace("-", "").replace("_", "").lower() == "utf8"


def colour_system(environ: Mapping[str, str]) -> str:
    """The colour system Textual will use: TEXTUAL_COLOR_SYSTEM, else what rich reads from
    COLORTERM and TERM ("standard" is 8/16 colours)."""
    chosen = environ.get("TEXTUAL_COLOR_SYSTEM", "auto").strip().lower()
    if chosen != "auto":
        return chosen
    if environ.get("COLORTERM", "").strip().lower() in ("truecolor", "24bit"):
        return "truecolor"
    colours = environ.get("TERM", "").strip().lower().rpartition("-")[2]
    return _TERM_COLOURS.get(colours, "standard")
