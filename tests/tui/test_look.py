"""The terminal's look: ASCII glyphs cell for cell, NO_COLOR, few colours, the locale."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gputop.tui.cells import ascii_cells
from gputop.tui.splash import render
from gputop.tui.terminal_caps import TerminalCaps, colour_system, terminal_caps_of
from tests.helpers.tui import frames

PACKAGE = Path(__file__).resolve().parents[2] / "gputop"
_COLOUR_SGR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-8]|4[0-8]|9[0-7]|10[0-7])(?:;[0-9;]*)?m")


def _glyphs_in_package() -> set[str]:
    """Every non-ASCII character in gputop's source: what its screens can show."""
    return {ch for path in PACKAGE.rglob("*.py") for ch in path.read_text() if not ch.isascii()}


def test_every_glyph_gputop_draws_has_a_one_cell_ascii_stand_in() -> None:
    for glyph in sorted(_glyphs_in_package()):
        out = ascii_cells(glyph)
        assert out.isascii() and len(out) == 1 and out.isprintable(), (glyph, out)
        assert out != "?", f"{glyph!r} has no readable stand-in"


def test_ascii_cells_keeps_the_width_of_lines_and_boxes() -> None:
    assert ascii_cells("├─ pt_data_worker") == "|- pt_data_worker"
    assert ascii_cells("└─ x") == "`- x"
    assert ascii_cells("╭──╮") == "+--+"
    assert ascii_cells("█████▌·· 535µs ↓1G/s") == "######.. 535us v1G/s"
    assert ascii_cells("数据") == "????"  # two cells each, as on the screen
    assert ascii_cells("é") == "e"
    assert ascii_cells("plain") == "plain"


@pytest.mark.parametrize("env,few", [
    ({"TERM": "xterm"}, True),
    ({"TERM": "screen"}, True),
    ({"TERM": "linux"}, True),
    ({"TERM": "xterm-256color"}, False),
    ({"TERM": "xterm", "COLORTERM": "truecolor"}, False),
    ({"TERM": "xterm-256color", "TEXTUAL_COLOR_SYSTEM": "standard"}, True),
    ({"TERM": "xterm", "TEXTUAL_COLOR_SYSTEM": "truecolor"}, False),
])
def test_few_colours_as_textual_will_see_them(env: dict[str, str], few: bool) -> None:
    assert terminal_caps_of(environ={"LANG": "C.UTF-8", **env}).few_colours is few
    assert (colour_system(env) == "standard") is few


def test_no_color_means_mono_when_set_and_not_empty() -> None:
    assert terminal_caps_of(environ={"NO_COLOR": "1", "TERM": "xterm-256color"}).mono
    assert not terminal_caps_of(environ={"NO_COLOR": "", "TERM": "xterm-256color"}).mono
    assert not terminal_caps_of(environ={"TERM": "xterm-256color"}).mono
    assert terminal_caps_of(ascii=True, environ={}).ascii


@pytest.mark.parametrize("env,utf8", [
    ({"LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0"}, False),
    ({"LANG": "C", "LC_ALL": "C"}, False),
    ({"LANG": "C"}, False),  # Python coerces this to C.UTF-8, yet the user chose C
    ({}, False),
    ({"LANG": "C.UTF-8"}, True),
    ({"LC_ALL": "C.UTF-8"}, True),
])
def test_the_locale_decides_utf8_in_a_fresh_interpreter(env: dict[str, str], utf8: bool) -> None:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")}
    code = "from gputop.tui.terminal_caps import locale_is_utf8; print(locale_is_utf8())"
    out = subprocess.run([sys.executable, "-c", code], env={**keep, **env}, capture_output=True,
                         text=True, timeout=60, check=True).stdout.strip()
    assert out == str(utf8), (env, out)


def test_splash_in_ascii_and_mono_looks() -> None:
    frame = frames("data-starved", count=1)[0]
    assert render(frame, 100, 30, look=TerminalCaps(ascii=True)).isascii()
    assert "\x1b[33m" in render(frame, 100, 30)  # the banner is yellow in colour
    mono = render(frame, 100, 30, look=TerminalCaps(mono=True))
    assert not _COLOUR_SGR.search(mono), mono
    assert "\x1b[1m\x1b[7m SIMULATED" in mono
