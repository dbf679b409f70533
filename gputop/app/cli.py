"""Command line: the table of commands, and the one place errors become exit codes.

Each command lives in one module of gputop.app: `parser()` builds its options and
`handle(args)` runs it. Exit codes: 0 ok, 2 bad input (one line on stderr), 1 internal error
or no terminal.
A command module loads the rest of gputop in its handler, not at import: the live view looks
at the processes before the rest of gputop loads.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import NamedTuple

from gputop.app import export, live, probe_path, record, replay, report, run, serve
from gputop.app.options import EXIT_INTERNAL, EXIT_USAGE, BadInput, NoTerminal


class Command(NamedTuple):
    """A command: what builds its parser, and what runs it with the options parsed."""

    parser: Callable[[], argparse.ArgumentParser]
    handle: Callable[[argparse.Namespace], int]


COMMANDS: dict[str, Command] = {
    "run": Command(run.parser, run.handle),
    "probe-path": Command(probe_path.parser, probe_path.handle),
    "record": Command(record.parser, record.handle),
    "replay": Command(replay.parser, replay.handle),
    "serve": Command(serve.parser, serve.handle),
    "report": Command(report.parser, report.handle),
    "export": Command(export.parser, export.handle),
}
LIVE = Command(live.parser, live.handle)  # no name: the live view, --once, --fleet URL


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `gputop` console script."""
    words = list(sys.argv[1:] if argv is None else argv)
    command = COMMANDS[words.pop(0)] if words and words[0] in COMMANDS else LIVE
    try:
        return command.handle(command.parser().parse_args(words))
    except BadInput as exc:
        print(f"gputop: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except NoTerminal as exc:
        print(f"gputop: {exc}", file=sys.stderr)
        return EXIT_INTERNAL
    except KeyboardInterrupt:
        if os.environ.get("GPUTOP_DEBUG"):
            raise
        return 130
    except Exception as exc:  # the one place internal errors become one line
        if os.environ.get("GPUTOP_DEBUG"):
            raise
        print(f"gputop: internal error: {type(exc).__name__}: {exc} "
              "(set GPUTOP_DEBUG=1 for a traceback)", file=sys.stderr)
        return EXIT_INTERNAL
