"""scripts/venv_python picks the interpreter `make` builds .venv from: the first candidate
that is CPython 3.11 or newer and makes venvs with pip, the distribution's asked first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "venv_python"


def picked(*candidates: str) -> str:
    return subprocess.run([str(SCRIPT), *candidates], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_first_candidate_that_serves_is_picked(tmp_path: Path) -> None:
    old = tmp_path / "python3.9"
    old.write_text("#!/bin/sh\nexec " + sys.executable + " -c 'import sys; sys.exit(1)'\n")
    old.chmod(0o755)
    assert picked(str(old), "/nonexistent/python3", sys.executable) == sys.executable


def test_none_serving_falls_back_to_python3_on_path() -> None:
    assert picked("/nonexistent/python3", "false") == "python3"


def test_the_default_serves_and_prefers_the_distribution_python() -> None:
    chosen = picked()
    check = "import sys, ensurepip, venv; print(sys.version_info >= (3, 11))"
    assert subprocess.run([chosen, "-c", check], capture_output=True, text=True,
                          check=True).stdout.strip() == "True"
    distribution = Path("/usr/bin/python3")
    if distribution.exists() and subprocess.run(
            [str(distribution), "-c", check], capture_output=True, text=True,
            check=False).stdout.strip() == "True":
        assert chosen == str(distribution)
