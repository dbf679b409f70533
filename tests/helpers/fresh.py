"""Python code run in a fresh interpreter from the repo: what it prints, a line each."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers.tmux import REPO


def printed(code: str) -> list[str]:
    """The lines `code` printed; it must exit 0 (its stderr says why not)."""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()
