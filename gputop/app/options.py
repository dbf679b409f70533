"""What the commands share: exit codes, one-line usage errors, argument types, common options.
Only the standard library at import: every command's parser loads this before the first look.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn, TypeVar

if TYPE_CHECKING:
    from gputop.recording.writer_thread import Retention

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE = 0, 1, 2
DEFAULT_SCENARIO = "data-starved"
MEMBW_SOURCES = ("auto", "estimate", "off")
READONLY_HELP = "send no signals: the k (kill) key is off"
ALL_USERS_HELP = ("take every user's trainers (root only); by default only those of the user "
                  "running gputop")


T = TypeVar("T")

class BadInput(Exception):
    """A choice the user made that cannot be honoured; the CLI prints it and exits 2."""


class NoTerminal(Exception):
    """A screen was asked for without a terminal; the CLI prints it and exits 1, as htop does."""


NO_TERMINAL = "no terminal (stdin/stdout is not a tty): use `ssh -t`, or `gputop --once`"


def need_terminal(words: str = NO_TERMINAL) -> None:
    """Raise NoTerminal unless both stdin and stdout are terminals (checked before any byte
    of a screen is written)."""
    import sys

    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise NoTerminal(words)


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        raise BadInput(f"{message} (see gputop --help)")


def read_as(kind: Callable[[str], T], text: str, what: str, hint: str = "") -> T:
    """`text` read by `kind` (int, float...), or the argparse error "not WHAT: 'TEXT' HINT"."""
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}{hint}") from None


def seconds_between(low: float, high: float, what: str) -> Callable[[str], float]:
    """An argparse type: a number of seconds from `low` to `high`."""

    def seconds(text: str) -> float:
        value = read_as(float, text, "a number of seconds")
        if not math.isfinite(value) or value < low or value > high:
            raise argparse.ArgumentTypeError(
                f"{what} between {low:g} and {high:g} s, got {text}")
        return value

    return seconds


interval = seconds_between(0.1, 3600, "interval must be")


def pid(text: str) -> int:
    """An argparse type: a process id."""
    value = read_as(int, text, "a process id")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"not a process id: {text!r}")
    return value


def gpu_count(text: str) -> int:
    """An argparse type: a number of simulated GPUs the simulation offers."""
    count = read_as(int, text, "a GPU count")
    from gputop.sources import simulated

    try:
        return simulated.check_count(count)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_TIME_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def size(text: str) -> int:
    """Bytes from '500M', '2G', '1048576' (binary units; a trailing 'B' or 'iB' is allowed)."""
    body = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = body[-1:] if body[-1:] in _SIZE_UNITS else ""
    try:
        value = float(body[: len(body) - len(unit)])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (say 500M or 2G)") from None
    if not math.isfinite(value) or value * _SIZE_UNITS[unit] < 1 << 20:
        raise argparse.ArgumentTypeError(f"size must be at least 1M, got {text}")
    return int(value * _SIZE_UNITS[unit])


def duration(text: str) -> float:
    """Seconds from '90s', '30m', '24h', '7d', '2w' or a plain number of seconds."""
    body = text.strip().lower()
    unit = body[-1:] if body[-1:] in _TIME_UNITS else "s"
    number = body[:-1] if body[-1:] in _TIME_UNITS else body
    try:
        value = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (say 90s, 30m, 24h or "
                                         "7d)") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"duration must be positive, got {text}")
    return value * _TIME_UNITS[unit]


def file_mode(text: str) -> int:
    """Permission bits from octal: '0600', '640'."""
    value = read_as(lambda octal: int(octal, 8), text, "a file mode", " (say 0600 or 0640)")
    if not 0 <= value <= 0o777:
        raise argparse.ArgumentTypeError(f"a file mode is 0000 to 0777, got {text}")
    return value


def add_retention(parser: argparse.ArgumentParser) -> None:
    """--max-size and --keep: how much of a recording to keep."""
    parser.add_argument("--max-size", type=size, metavar="SIZE",
                        help="keep the recording under SIZE (e.g. 500M, 2G): the oldest ticks "
                        "are dropped")
    parser.add_argument("--keep", type=duration, metavar="DURATION",
                        help="keep only the last DURATION of ticks (e.g. 24h, 7d)")


def retention(args: argparse.Namespace) -> Retention:
    """What --max-size and --keep asked to keep."""
    from gputop.recording.writer_thread import Retention

    return Retention(max_bytes=args.max_size, keep_s=args.keep)


def add_mode(parser: argparse.ArgumentParser, what: str) -> None:
    """--mode: the permissions of `what` the command creates."""
    parser.add_argument("--mode", type=file_mode, default="0600", metavar="OCTAL",
                        help=f"permissions of {what} gputop creates (default 0600: it holds "
                        "other users' command lines; a stricter umask still applies)")


def check_gpus_with_demo(args: argparse.Namespace) -> None:
    """Refuse --gpus without --demo: only simulated GPUs can be counted out."""
    if args.gpus is not None and args.demo is None:
        raise BadInput("--gpus sets the number of simulated GPUs and goes with --demo")
