"""A bare writer's floor for gputop's drawing: the lines gputop-ui repaints, with no framework.

Run by bench_tui.py beside gputop-ui and textual-floor, in a tmux pane of the same size:
each second, as many lines as gputop-ui marked for repaint in its last second (`--follow
FILE`; without it, every line), ten styled spans a line, each line's escape sequences
joined by f-strings and written in one os.write; keys read through select(), as a terminal
program waits for them. What is left is what Python itself costs to put those lines on the
terminal: gputop-ui's CPU over this one says how far drawing is from that.
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import sys
import termios
import time
import tty
from pathlib import Path

from repaint_count import RepaintCount

SPANS = 10  # a process row's spans, as textual-floor draws them
STYLES = tuple(f"\x1b[{weight};{colour}m" for colour in (32, 36, 33, 37, 35)
               for weight in (22, 1))


def frame(tick: int, lines: int, width: int) -> str:
    """`lines` lines numbered for `tick`, each `width` cells of SPANS styled spans."""
    cell = max(1, width // SPANS)
    pad = " " * max(0, width - cell * SPANS)
    parts = []
    for y in range(lines):
        parts.append(f"\x1b[{y + 1};1H")
        for i in range(SPANS):
            parts += (STYLES[(y + i) % len(STYLES)], f"{tick * 7 + y * 13 + i:>{cell}d}"[-cell:])
        parts.append(f"\x1b[0m{pad}")
    return "".join(parts)


def run(follow: RepaintCount) -> None:
    """Repaint each second until q."""
    keys, out = sys.stdin.fileno(), sys.stdout.fileno()
    tick, due = 0, time.monotonic()
    while True:
        due += 1.0
        ready, _, _ = select.select([keys], [], [], max(0.0, due - time.monotonic()))
        if ready:
            if b"q" in os.read(keys, 64):
                return
            due -= 1.0  # a key does not move the next repaint
            continue
        tick += 1
        width, height = shutil.get_terminal_size()
        lines = follow.lines(height)
        if lines:
            os.write(out, frame(tick, lines, width).encode())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--follow", type=Path, metavar="FILE",
                        help="repaint as many lines a second as the count in FILE grew")
    follow = RepaintCount(parser.parse_args().follow)
    keys, out = sys.stdin.fileno(), sys.stdout.fileno()
    saved = termios.tcgetattr(keys)
    tty.setcbreak(keys)
    os.write(out, b"\x1b[?1049h\x1b[?25l")
    try:
        run(follow)
    finally:
        os.write(out, b"\x1b[?25h\x1b[?1049l")
        termios.tcsetattr(keys, termios.TCSADRAIN, saved)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
