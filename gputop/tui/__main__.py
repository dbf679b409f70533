"""`python -m gputop.tui [--demo [SCENARIO]] [--attach PID]`: the live TUI before/beside cli.py."""

from __future__ import annotations

import argparse
import sys

from gputop.tui.launch import run_live


def main(argv: list[str] | None = None) -> int:
    """Parse the few live-TUI options and run it."""
    parser = argparse.ArgumentParser(prog="python -m gputop.tui")
    parser.add_argument("--demo", nargs="?", const="data-starved", default=None)
    parser.add_argument("--attach", type=int, default=None)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--gpus", type=int, default=None)
    args = parser.parse_args(argv)
    return run_live(interval_s=args.interval, demo=args.demo, gpus=args.gpus,
                    attach_pid=args.attach)


if __name__ == "__main__":
    sys.exit(main())
