"""`gputop replay FILE`: a recording shown in the live view's TUI instead of the machine."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gputop.app import options
from gputop.app.options import BadInput

if TYPE_CHECKING:
    from gputop.frames.playback import Playback


def parser() -> argparse.ArgumentParser:
    """`gputop replay`'s options."""
    parser = options.Parser(prog="gputop replay",
                            description="show a recording (from `gputop record` or --record) "
                            "in the live view's TUI: ←/→ step, g/G first/last tick, +/- speed, "
                            "p pause")
    parser.add_argument("file", metavar="FILE", help="a gputop.record/1 recording")
    parser.add_argument("--speed", type=_speed, default=1.0, metavar="X",
                        help="play X times as fast as recorded (default 1)")
    parser.add_argument("--ascii", action="store_true", help="draw with ASCII characters only")
    return parser


def _speed(text: str) -> float:
    from gputop.frames.playback import SPEEDS

    value = options.read_as(float, text, "a speed")
    if value not in SPEEDS:
        raise argparse.ArgumentTypeError(
            f"speed must be one of {', '.join(f'{s:g}' for s in SPEEDS)}, got {text}")
    return value


def handle(args: argparse.Namespace) -> int:
    """The TUI over a recording; it needs a terminal."""
    open_playback(args.file).recording.close()  # a bad file is one line, terminal or not
    options.need_terminal("replay needs a terminal; query the file with sqlite3 instead "
                          "(docs/recording.md), or use `ssh -t`")
    try:
        return run_replay(args.file, speed=args.speed, ascii=args.ascii)
    except KeyboardInterrupt:
        return options.EXIT_OK


def open_playback(path: str, speed: float = 1.0) -> Playback:
    """A replay of the recording at `path`; a file that is not one is bad input."""
    from gputop.frames.playback import Playback, ReplayTickError
    from gputop.recording.reader import UnreadableRecording
    from gputop.recording.replay import Replay

    try:
        recording = Replay(path)
    except UnreadableRecording as exc:
        raise BadInput(str(exc)) from None
    if not len(recording):
        recording.close()
        raise BadInput(f"{path} holds no ticks yet")
    playback = Playback(recording, speed=speed)
    try:
        playback.frame_at(0)
    except ReplayTickError as exc:
        recording.close()
        raise BadInput(f"cannot replay {path}: {exc}") from None
    return playback


def run_replay(path: str, *, speed: float = 1.0, ascii: bool = False) -> int:
    """`gputop replay`: the live view's TUI, fed by a recording instead of the machine."""
    from gputop.tui import run_tui

    return run_tui(open_playback(path, speed), ascii=ascii)
