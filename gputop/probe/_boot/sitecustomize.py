"""Put on PYTHONPATH by `gputop run` and `python -m gputop.probe` for the program and its
Python children: installs the probe when GPUTOP_PROBE=1, then chains.

Any sitecustomize that this one shadows (a distribution's or a virtualenv's) still runs.
"""

import os
import sys


def _install_probe() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import gputop.probe
    except ImportError:  # another interpreter: load the stdlib-only probe from our tree
        import types

        pkg = types.ModuleType("gputop")
        pkg.__path__ = [os.path.dirname(os.path.dirname(here))]
        sys.modules["gputop"] = pkg
        import gputop.probe
    gputop.probe.install_inherited()


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    saved = list(sys.path)
    me = sys.modules.pop("sitecustomize", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import sitecustomize  # noqa: F401  (the next one on the path, if any)
    except ImportError as exc:
        if exc.name != "sitecustomize":
            raise
        if me is not None:
            sys.modules["sitecustomize"] = me
    finally:
        sys.path[:] = saved


if os.environ.get("GPUTOP_PROBE") == "1":
    try:
        _install_probe()
    except Exception as exc:
        sys.stderr.write(f"gputop.probe: not installed ({type(exc).__name__}: {exc})\n")
_chain()
