"""`python -m gputop.probe script.py [args]` (or `-m module`): run a program under the probe,
its Python children (multiprocessing spawn or forkserver, subprocesses) too."""

from __future__ import annotations

import os
import runpy
import sys

USAGE = "usage: python -m gputop.probe (script.py | -m module) [args...]"


def main(argv: list[str]) -> int:
    """Install the probe, then run the program as `python` would; its exit code is ours."""
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    if argv[0] == "-m":
        if len(argv) < 2:
            print(USAGE, file=sys.stderr)
            return 2
        target, args = argv[1], argv[1:]
    else:
        target, args = argv[0], argv
        if not os.path.exists(target):
            print(f"gputop.probe: cannot find {target}", file=sys.stderr)
            return 2
    import gputop.probe
    from gputop.probe.inherit import pass_on

    gputop.probe.install()
    pass_on(os.environ)  # its Python children (spawned trainers, ranks) are probed too
    sys.argv = list(args)
    if argv[0] == "-m":
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(target))
        runpy.run_path(target, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
