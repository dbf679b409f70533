"""`gputop report FILE -o report.html`: a recording as one self-contained HTML page."""

from __future__ import annotations

import argparse
import sys

from gputop.app import options
from gputop.app.options import BadInput


def parser() -> argparse.ArgumentParser:
    """`gputop report`'s options."""
    parser = options.Parser(prog="gputop report",
                            description="turn a recording into one self-contained HTML page of "
                            "charts over the whole run (opens offline, fetches nothing)")
    parser.add_argument("file", metavar="FILE", help="a gputop.record/1 recording")
    parser.add_argument("-o", "--output", required=True, metavar="HTML",
                        help="where to write the report (replaced if it exists)")
    options.add_mode(parser, "the report")
    return parser


def handle(args: argparse.Namespace) -> int:
    """Headless, no Textual: one line on success or failure."""
    from gputop.export.report.data import ReportError
    from gputop.export.report.page import write_report

    try:
        written = write_report(args.file, args.output, args.mode)
    except ReportError as exc:
        raise BadInput(str(exc)) from None
    print(f"gputop: wrote {written.path} ({written.bytes / 1e6:.1f} MB: {written.ticks} ticks, "
          f"{written.steps} steps)", file=sys.stderr)
    return options.EXIT_OK
