"""Issue 38: during an evaluation longer than the attach window, the window still holds the
training steps before it (read back through the evaluation loader's records), with their
verdict, while the state says evaluating."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputop.sources.attach import WINDOW
from tests.helpers.probe import ROOT, TRAINERS, attach_once, trainer_env

pytestmark = pytest.mark.slow
pytest.importorskip("torch")
TRAIN_STEPS = 16  # the trainer's first epoch: 64 rows in batches of 4



def test_a_long_evaluation_keeps_the_training_steps_in_the_window(tmp_path: Path) -> None:
    held_at = WINDOW + 150  # evaluation batches, each a record of the evaluation loader
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputop.probe", str(TRAINERS / "evaluates_and_holds.py"),
         str(tmp_path), str(held_at), "0"], env=trainer_env(tmp_path), cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "eval.waiting").exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        attached = attach_once(proc.pid, tmp_path)
    finally:
        (tmp_path / "eval").touch()
        proc.wait(timeout=60)
    assert proc.returncode == 0
    assert attached["activity"] == "evaluating"
    assert [s["step"] for s in attached["steps"]] == list(range(TRAIN_STEPS))
    assert attached["summary"]["verdict"] in ("data-bound", "compute-bound", "host-bound")
