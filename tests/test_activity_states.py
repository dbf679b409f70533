"""Evaluation and checkpointing are states, not stalls; a long LBFGS step is running (issue 38).

Real trainers under the probe, read as a user would: `gputop --once --json --attach PID`,
polled until the long part has outlasted the stall limit several times over.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gputop.analysis.steps import STALL_MIN_S, STALL_STEPS
from tests.helpers.probe import ROOT, trainer_env

# Not `alone`: every verdict here is a state the probe names, a limit scaled by the trainer's
# own median step, or CPU use far past BUSY_CPU_PERCENT (a hung one sleeps): load on the box
# slows the trainer's steps and its limit alike, and changes no verdict.
pytestmark = pytest.mark.slow

EVAL_LIMITS = 6  # the evaluation outlasts the stall limit this many times (30 s at its floor)
HANG_LIMITS = 2

# Trains 3 epochs, then (argv[1]) evaluates under no_grad in eval mode ("eval"), evaluates
# two batches and hangs ("hang"), or saves its state dict to a file whose writes block
# ("save"), each until the file argv[3] exists; touches argv[2] when that part begins and
# argv[4] when training resumes, and trains until argv[3] + ".end" exists.
TRAINER = """
import sys, time
from pathlib import Path
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

mode, began, stop, resumed = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
end = Path(sys.argv[3] + ".end")
torch.set_num_threads(1)
torch.manual_seed(0)
train = DataLoader(TensorDataset(torch.randn(256, 64), torch.randn(256, 1)), batch_size=16)
held_out = DataLoader(TensorDataset(torch.randn(512, 64)), batch_size=64)
model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                      nn.Linear(512, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
deadline = time.monotonic() + 240


def wait_for_stop():
    while not stop.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


class BlockedFile:
    def write(self, data):
        wait_for_stop()
        return len(data)

    def flush(self):
        pass


def epoch():
    model.train()
    for x, y in train:
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def evaluate():
    model.eval()
    began.touch()
    with torch.no_grad():
        while not stop.exists() and time.monotonic() < deadline:
            for batch, (x,) in enumerate(held_out):
                model(x)
                if mode == "hang" and batch == 1:
                    wait_for_stop()


for _ in range(3):
    epoch()
if mode == "save":
    began.touch()
    torch.save(model.state_dict(), BlockedFile())
else:
    evaluate()
resumed.touch()
while not end.exists() and time.monotonic() < deadline:
    epoch()
"""

# LBFGS steps of many closure evaluations each (no early stop: zero tolerances), until the
# file argv[2] exists; touches argv[1] after its first backward (its ring exists then).
LBFGS = """
import sys, time
from pathlib import Path
import torch
from torch import nn

began, stop = Path(sys.argv[1]), Path(sys.argv[2])
torch.set_num_threads(1)
torch.manual_seed(0)
x, y = torch.randn(4096, 1024), torch.randn(4096, 1)
model = nn.Sequential(nn.Linear(1024, 1024), nn.Tanh(), nn.Linear(1024, 1))
opt = torch.optim.LBFGS(model.parameters(), max_iter=20, tolerance_grad=0, tolerance_change=0)
deadline = time.monotonic() + 240


def closure():
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    began.touch()
    return loss


steps = 0
while not stop.exists() and time.monotonic() < deadline:
    # a few short steps make the window's median; then steps far past 10x it (LBFGS's inner
    # iterations), on any machine's speed
    group = opt.param_groups[0]
    group["max_iter"] = 1 if steps < 3 else 60  # a closure: a forward and backward
    group["max_eval"] = group["max_iter"] * 5 // 4
    opt.step(closure)
    steps += 1
"""


@contextmanager
def _probed(tmp_path: Path, source: str, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """`python -m gputop.probe SCRIPT ARGS` (SCRIPT holding `source`), killed if left running."""
    script = tmp_path / "trainer.py"
    script.write_text(source)
    proc = subprocess.Popen([sys.executable, "-m", "gputop.probe", str(script), *args],
                            env=trainer_env(tmp_path), cwd=ROOT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def _once(tmp_path: Path, pid: int) -> dict[str, Any]:
    """The `attach` object of `gputop --once --json --attach PID`."""
    out = subprocess.run(
        [sys.executable, "-m", "gputop", "--once", "--json", "--membw", "off", "--attach",
         str(pid)], capture_output=True, text=True, timeout=120, cwd=ROOT,
        env=trainer_env(tmp_path, GPUTOP_DEBUG=""))
    assert out.returncode == 0, out.stderr
    attach = json.loads(out.stdout)["attach"]
    return attach[0] if isinstance(attach, list) else attach


def _limit_s(attach: dict[str, Any]) -> float:
    """The stall limit for this trainer: max(STALL_MIN_S, STALL_STEPS x its median step)."""
    median = attach["summary"]["median_step_ns"] or 0
    return max(STALL_MIN_S, STALL_STEPS * median / 1e9)


def _wait_for(path: Path, proc: subprocess.Popen[bytes]) -> None:
    while not path.exists():
        assert proc.poll() is None, "the trainer ended early"
        time.sleep(0.05)


def _poll(tmp_path: Path, pid: int, enough: Callable[[dict[str, Any]], bool],
          most: int = 60) -> list[dict[str, Any]]:
    """--once --json snapshots, until one is `enough` (at most `most` of them)."""
    seen: list[dict[str, Any]] = []
    while len(seen) < most:
        seen.append(_once(tmp_path, pid))
        if enough(seen[-1]):
            return seen
    raise AssertionError(f"never enough: {seen[-1]}")


def _past(limits: int) -> Callable[[dict[str, Any]], bool]:
    """Whether a snapshot's activity has lasted `limits` stall limits."""
    return lambda a: (a["activity_s"] or 0) > limits * _limit_s(a)


def _marks(tmp_path: Path) -> tuple[Path, Path, Path]:
    return tmp_path / "began", tmp_path / "stop", tmp_path / "resumed"


def test_an_evaluation_between_epochs_reads_evaluating_never_stalled(tmp_path: Path) -> None:
    began, stop, resumed = _marks(tmp_path)
    with _probed(tmp_path, TRAINER, "eval", str(began), str(stop), str(resumed)) as proc:
        _wait_for(began, proc)
        during = _poll(tmp_path, proc.pid, _past(EVAL_LIMITS))
        stop.touch()
        _wait_for(resumed, proc)
        after = _poll(tmp_path, proc.pid, lambda a: a["activity"] is None, most=5)[-1]
        Path(f"{stop}.end").touch()
        assert proc.wait(timeout=60) == 0
    assert [a["state"] for a in during] == ["evaluating"] * len(during)
    assert [a["activity"] for a in during] == ["evaluating"] * len(during)
    assert during[-1]["activity_s"] > during[0]["activity_s"]
    assert after["state"] == "running" and after["activity_s"] is None
    assert "activity" not in during[-1]["config"]["extra"]  # the probe's word, not a setting


def test_an_evaluation_that_hangs_is_stalled(tmp_path: Path) -> None:
    began, stop, resumed = _marks(tmp_path)
    with _probed(tmp_path, TRAINER, "hang", str(began), str(stop), str(resumed)) as proc:
        _wait_for(began, proc)
        seen = _poll(tmp_path, proc.pid, _past(HANG_LIMITS))
        stop.touch()
        Path(f"{stop}.end").touch()
        assert proc.wait(timeout=60) == 0
    assert seen[-1]["state"] == "stalled" and seen[-1]["activity"] == "evaluating"


def test_a_long_torch_save_reads_saving(tmp_path: Path) -> None:
    began, stop, resumed = _marks(tmp_path)
    with _probed(tmp_path, TRAINER, "save", str(began), str(stop), str(resumed)) as proc:
        _wait_for(began, proc)
        during = _poll(tmp_path, proc.pid, _past(HANG_LIMITS))
        stop.touch()
        _wait_for(resumed, proc)
        after = _poll(tmp_path, proc.pid, lambda a: a["activity"] is None, most=5)[-1]
        Path(f"{stop}.end").touch()
        assert proc.wait(timeout=60) == 0
    assert [a["state"] for a in during] == ["saving"] * len(during)
    assert during[-1]["idle_s"] > _limit_s(during[-1])  # no step closed: not one stands in
    assert after["state"] == "running"


def test_an_lbfgs_step_past_the_limit_is_running_never_stalled(tmp_path: Path) -> None:
    began, stop, _ = _marks(tmp_path)

    def in_long_step(a: dict[str, Any]) -> bool:
        return bool(a["steps"]) and (a["idle_s"] or 0) > _limit_s(a)

    with _probed(tmp_path, LBFGS, str(began), str(stop)) as proc:
        _wait_for(began, proc)
        seen = _poll(tmp_path, proc.pid, in_long_step)
        stop.touch()
        assert proc.wait(timeout=120) == 0
    assert [a["state"] for a in seen] == ["running"] * len(seen)
    last = seen[-1]
    assert last["step_in_progress_s"] == last["idle_s"]
