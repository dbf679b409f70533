"""Issue 38: an evaluation ends where training resumes, at the training loader's next fetch
(not one batch later, at the first training forward or backward)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.probe import ROOT, TRAINERS, attach_once, trainer_env

pytestmark = pytest.mark.slow
pytest.importorskip("torch")



def wait_for(path: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while not path.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the trainer never got there"
        time.sleep(0.02)


def test_the_training_loaders_fetch_ends_the_evaluation(tmp_path: Path) -> None:
    """Held inside the evaluation, then at the fetch after it: there the trainer fetches its
    training batch, no training forward has run yet, and it is no longer evaluating."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputop.probe", str(TRAINERS / "evaluates_and_holds.py"),
         str(tmp_path), "5", "1"], env=trainer_env(tmp_path), cwd=ROOT)
    try:
        wait_for(tmp_path / "eval.waiting", proc)
        evaluating = attach_once(proc.pid, tmp_path)
        (tmp_path / "eval").touch()
        wait_for(tmp_path / "train.waiting", proc)
        fetching = attach_once(proc.pid, tmp_path)
    finally:
        (tmp_path / "eval").touch()
        (tmp_path / "train").touch()
        proc.wait(timeout=60)
    assert proc.returncode == 0
    assert evaluating["activity"] == "evaluating"
    assert fetching["steps"] and fetching["error"] is None
    assert fetching["activity"] is None and fetching["state"] != "evaluating"
