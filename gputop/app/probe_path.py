"""`gputop probe-path`: a directory that, on PYTHONPATH, makes the probe importable from any
Python, printed for the user's own interpreter."""

from __future__ import annotations

import argparse
import os

from gputop.app import options
from gputop.app.options import BadInput

HELP = ("usage: gputop probe-path\n\nPrints a directory to put on PYTHONPATH so that any Python "
        "can run\n`python -m gputop.probe train.py` or `from gputop import probe`, without\n"
        "installing gputop in that environment.")


def parser() -> argparse.ArgumentParser:
    """No options: `handle` answers -h and refuses any other word."""
    # No prefix an argument can start with (argv holds no NUL): every word is a positional.
    parser = options.Parser(prog="gputop probe-path", add_help=False, prefix_chars="\0")
    parser.add_argument("words", nargs=argparse.REMAINDER)
    return parser


def handle(args: argparse.Namespace) -> int:
    """Print probe_path(), or the help."""
    if args.words in (["-h"], ["--help"]):
        print(HELP)
        return options.EXIT_OK
    if args.words:
        raise BadInput(f"probe-path takes no arguments, got {args.words[0]!r}")
    print(probe_path())
    return options.EXIT_OK


def probe_path() -> str:
    """A directory that, on PYTHONPATH, makes `gputop.probe` (and only gputop) importable."""
    import gputop.probe

    return os.path.join(os.path.dirname(os.path.abspath(gputop.probe.__file__)), "_path")
