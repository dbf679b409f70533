"""Issue 38, one window, one figure: in a real terminal (tmux, 80x24 and 200x50), every step
time the screen shows (the step pane's window figure, its modes and p95, each step's line,
the advice's step) is the one `--once --json` gives for the same window, and a bimodal
window shows its two modes. The trainer is a real nanoGPT-shaped loop under the probe (the
batch fetched between forward and backward, a slow fetch every other step) that stops
stepping once it has stepped enough: its ring, and so the window, stays the same while the
screen and the JSON are read."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputop.advice.context import figure
from gputop.core import fmt
from tests.helpers import tmux
from tests.helpers.probe import trainer_env

REPO = Path(__file__).resolve().parents[2]
STEPS = 120
START_TIMEOUT_S = 120.0
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

TRAINER = f"""
import pathlib, sys, time
import torch

torch.set_num_threads(1)
model = torch.nn.Linear(32, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(4096, 32)

def get_batch(step):
    time.sleep(0.12 if step % 2 else 0.001)  # a slow fetch every other step: two modes
    at = torch.randint(0, 4000, (16,))
    return data[at], data[at][:, :8]

X, Y = get_batch(0)
for step in range({STEPS}):
    loss = ((model(X) - Y) ** 2).mean()
    X, Y = get_batch(step + 1)  # nanoGPT: the next batch is fetched before backward
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
pathlib.Path(sys.argv[1]).write_text("done")
time.sleep(600)
"""

_MODES = re.compile(r"bimodal: (\d+)% of steps ~(\S+), (\d+)% ~(\S+?)\)?(?:\s|$)")
_STEP_LINE = re.compile(r"#(\d+)\s*▕.*▏\s+(\S+) (?:host|data|compute)-bound")


@contextlib.contextmanager
def stepped_trainer(tmp_path: Path) -> Iterator[int]:
    """The trainer under the probe, once it has taken its steps and stopped stepping."""
    script, done = tmp_path / "train.py", tmp_path / "done"
    script.write_text(TRAINER)
    (tmp_path / "rings").mkdir()
    log = tmp_path / "trainer.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "gputop.probe", str(script), str(done)],
                                env=trainer_env(tmp_path / "rings"), cwd=tmp_path, stdout=out,
                                stderr=out, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not done.exists():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield proc.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _json(tmp_path: Path, pid: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "gputop", "--once", "--json", "--membw", "off", "--attach",
         str(pid)], env=trainer_env(tmp_path / "rings"), capture_output=True, timeout=120,
        check=True)
    attach = json.loads(out.stdout)["attach"]
    assert isinstance(attach, dict)
    return attach


def _screen_of_the_window(name: str, steps: int) -> str:
    """The screen once the pane shows the window's figure and both modes."""
    return tmux.wait_for(name, lambda s: f"over the last {steps} steps" in s and "bimodal" in s)


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
def test_every_step_time_on_the_screen_is_the_jsons(tmp_path: Path,
                                                     size: tuple[int, int]) -> None:
    with stepped_trainer(tmp_path) as pid, tmux.session(tmp_path, *size) as name:
        before = _json(tmp_path, pid)
        summary = before["summary"]
        assert isinstance(summary, dict)
        tmux.spawn(name, f"env PYTHONPATH={REPO} GPUTOP_RING_DIR={tmp_path / 'rings'} "
                         f"TERM=xterm-256color {sys.executable} -m gputop --membw off "
                         f"--interval 0.5 --attach {pid}")
        screen = _screen_of_the_window(name, summary["steps"])
        after = _json(tmp_path, pid)
        tmux.tmux("send-keys", "-t", name, "q")
    # The window did not move between the two JSONs: the screen between them is of it.
    assert after["summary"] == summary, "the trainer kept stepping"
    steps = {s["step"]: s for s in after["steps"]}

    step_ns, modes = summary["step_ns"], summary["step_time_modes"]
    assert summary["step_statistic"] == "mean" and step_ns
    assert f"mean {fmt.short_duration_ns(step_ns)} over the last {summary['steps']} steps" \
        in screen
    # Both modes, with their shares, as the JSON has them.
    assert len(modes) == 2, summary
    found = _MODES.search(screen)
    assert found is not None, screen
    assert [int(found[1]), int(found[3])] == [round(m["percent_of_steps"]) for m in modes]
    assert [found[2], found[4]] == [fmt.short_duration_ns(m["median_ns"]) for m in modes]
    if size[0] >= 200:
        assert f"p95 {fmt.short_duration_ns(summary['p95_step_ns'])}" in screen
    # Each step line's time is its step's.
    lines = _STEP_LINE.findall(screen)
    assert lines, screen
    for number, shown in lines:
        assert shown == fmt.short_duration_ns(steps[int(number)]["duration_ns"])
    # Any step time the advice quotes is the window's figure.
    for quoted in re.findall(r"mean (?:step )?([\d.]+) ms", screen):
        assert quoted == figure(step_ns / 1e6), screen
    # One verdict: the header's word is the JSON's, with the share of its own part.
    verdict = summary["verdict"]
    assert verdict in screen
    share = summary["verdict_percent"]
    assert share is not None and f"{verdict}  " in screen
    assert f"{share:.0f}% of step time" in screen
