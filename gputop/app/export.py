"""`gputop export FILE --chrome-trace OUT`: a recording in another format, headless."""

from __future__ import annotations

import argparse
import sys

from gputop.app import options
from gputop.app.options import BadInput


def parser() -> argparse.ArgumentParser:
    """`gputop export`'s options."""
    parser = options.Parser(prog="gputop export",
                            description="turn a recording (from `gputop record` or --record) "
                            "into another format; no screen needed")
    parser.add_argument("file", metavar="FILE", help="a gputop.record/1 recording")
    parser.add_argument("--chrome-trace", required=True, metavar="OUT",
                        help="write the steps and phases as Chrome trace-event JSON (one "
                        "track per rank; open it in ui.perfetto.dev or chrome://tracing)")
    options.add_mode(parser, "the trace")
    return parser


def handle(args: argparse.Namespace) -> int:
    """Write the trace; one line on success or failure."""
    from gputop.export.chrome_trace import ExportError, write_chrome_trace

    try:
        steps, tracks = write_chrome_trace(args.file, args.chrome_trace, args.mode)
    except ExportError as exc:  # an unreadable recording is one too
        raise BadInput(str(exc)) from None
    print(f"gputop: wrote {steps} steps on {tracks} track{'s' * (tracks != 1)} to "
          f"{args.chrome_trace}", file=sys.stderr)
    return options.EXIT_OK
