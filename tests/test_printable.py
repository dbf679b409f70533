"""printable(): every character class that can steer a terminal becomes a visible escape."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from gputop.core.printable import printable

STEERING = [
    ("\x1b]2;X\x07", "\\x1b]2;X\\x07"),  # OSC 2: sets the terminal's window title
    ("\x1b[2J", "\\x1b[2J"),  # CSI: clears the screen
    ("a\x00b", "a\\x00b"),
    ("tab\there\nnext\r", "tab\\x09here\\x0anext\\x0d"),
    ("del\x7f", "del\\x7f"),
    ("c1\x9b31m", "c1\\x9b31m"),  # an 8-bit CSI
    ("\x85nel", "\\x85nel"),
    ("x\ud800y", "x\\ud800y"),
    ("\udcff", "\\udcff"),
    ("abc\u202egpj.exe", "abc\\u202egpj.exe"),
    ("\u2066isolate\u2069", "\\u2066isolate\\u2069"),
    ("\u202a\u202b\u202c\u202d", "\\u202a\\u202b\\u202c\\u202d"),
    ("mark\u200e\u200f\u061c", "mark\\u200e\\u200f\\u061c"),
    ("line\u2028para\u2029", "line\\u2028para\\u2029"),
]


@pytest.mark.parametrize(("raw", "shown"), STEERING)
def test_steering_characters_become_visible_escapes(raw: str, shown: str) -> None:
    assert printable(raw) == shown


@pytest.mark.parametrize("text", [
    "", "python", "python train.py --lr 3e-4", "[bold red]x[/]", "müller", "训练",
    "naïve café", "emoji 🚀", "back\\slash \\x1b", "a\u00a0b", "Simulated H100 80GB HBM3",
])
def test_printable_text_is_returned_as_it_is(text: str) -> None:
    assert printable(text) == text


def test_no_character_left_after_printable_is_a_control_bidi_or_surrogate() -> None:
    everything = "".join(map(chr, range(sys.maxunicode + 1)))
    shown = printable(everything)
    leftovers = {
        ch for ch in shown
        if unicodedata.category(ch) in ("Cc", "Cs") or ch in "\u061c\u200e\u200f\u2028\u2029"
        or "\u202a" <= ch <= "\u202e" or "\u2066" <= ch <= "\u2069"
    }
    assert not leftovers
    shown.encode("utf-8")  # no lone surrogate survives
