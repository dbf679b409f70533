"""The environment that makes a program's Python children load the probe too (through the
sitecustomize in _boot), as `gputop run` and `python -m gputop.probe` start programs."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at import; the probe must start fast
    from collections.abc import Mapping, MutableMapping

BOOT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_boot")
FORKSERVER_MAIN = b"from multiprocessing.forkserver import main"


def probe_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: ours) with GPUTOP_PROBE=1 and the sitecustomize directory first."""
    env = dict(os.environ if base is None else base)
    pass_on(env)
    return env


def pass_on(env: MutableMapping[str, str]) -> None:
    """Make the Python processes started with `env` (os.environ: our children) load the probe."""
    env["GPUTOP_PROBE"] = "1"
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != BOOT_DIR]
    env["PYTHONPATH"] = os.pathsep.join([BOOT_DIR, *rest])


def is_forkserver() -> bool:
    """Whether this process is a multiprocessing forkserver (it trains nothing; the
    processes it forks are the program's)."""
    try:
        with open("/proc/self/cmdline", "rb") as cmdline:
            argv = cmdline.read().split(b"\0")
    except OSError:
        return False
    return any(arg.startswith(FORKSERVER_MAIN) for arg in argv)
