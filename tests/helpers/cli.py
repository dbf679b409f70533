"""The real command line, run in a fresh interpreter as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def gputop(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`python -m gputop ARGS` from the repository root, debug logging off; its output."""
    env = {**os.environ, "GPUTOP_DEBUG": ""}
    return subprocess.run([sys.executable, "-m", "gputop", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)
