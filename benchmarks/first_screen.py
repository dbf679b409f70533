"""`make demo` from a fresh clone, as a new user runs it: seconds to the first screen and to
the full view, and the size of the .venv it made.

    python benchmarks/first_screen.py [--source REPO] [--ref REF]

Clones REF (default HEAD) of REPO (default this checkout) into a temporary directory, runs
`make demo` there in a tmux terminal, watches the screen, quits with q and measures .venv.
pip's cache is whatever this machine has: a second run measures a warm cache.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIRST = "SIMULATED GPUs"  # on the splash and on the full view
FULL = "GPU MEM"          # the full view's process table header only


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True,
                          timeout=30).stdout


def _size_mb(path: Path) -> float:
    """Bytes under `path` (files once each), in MB."""
    total, seen = 0, set()
    for root, _dirs, files in os.walk(path):
        for name in files:
            info = os.lstat(os.path.join(root, name))
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_size
    return total / 1e6


def measure(clone: Path, timeout_s: float = 600.0) -> dict[str, float]:
    """Run `make demo` in `clone` inside tmux; seconds to each screen and the .venv's MB."""
    name = f"gputop-first-{uuid.uuid4().hex[:8]}"
    script = ("env -u PYTHONPATH -u VIRTUAL_ENV TERM=xterm-256color make demo; "
              "echo EXIT=$?; sleep 60")
    started = time.monotonic()
    _tmux("new-session", "-d", "-s", name, "-x", "120", "-y", "40", "-c", str(clone),
          f"bash -c '{script}'")
    seen: dict[str, float] = {}
    try:
        while "full_view_s" not in seen:
            screen = _tmux("capture-pane", "-p", "-t", name)
            now = time.monotonic() - started
            if FIRST in screen:
                seen.setdefault("first_screen_s", now)
            if FIRST in screen and FULL in screen:
                seen["full_view_s"] = now
            if "EXIT=" in screen or now > timeout_s:
                raise RuntimeError(f"make demo never showed the full view:\n{screen}")
            time.sleep(0.1)
        _tmux("send-keys", "-t", name, "q")
        deadline = time.monotonic() + 30
        while "EXIT=" not in _tmux("capture-pane", "-p", "-t", name):
            if time.monotonic() > deadline:
                raise RuntimeError("gputop did not quit on q")
            time.sleep(0.2)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True, timeout=30)
    seen["venv_mb"] = _size_mb(clone / ".venv")
    return seen


def main() -> int:
    """Clone, measure, report, clean up."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=str(HERE.parent), help="repository to clone")
    parser.add_argument("--ref", default="HEAD", help="commit or branch to clone")
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        print("first_screen: tmux is not installed")
        return 1
    with tempfile.TemporaryDirectory(prefix="gputop-clone-") as tmp:
        clone = Path(tmp) / "gputop"
        subprocess.run(["git", "clone", "--quiet", "--no-checkout", args.source, str(clone)],
                       check=True, timeout=120)
        subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", args.ref], check=True,
                       timeout=120)
        figures = measure(clone)
    print(f"make demo from a fresh clone of {args.ref}: first screen "
          f"{figures['first_screen_s']:.1f} s, full view {figures['full_view_s']:.1f} s, "
          f".venv {figures['venv_mb']:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
