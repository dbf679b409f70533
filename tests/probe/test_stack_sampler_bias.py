"""The stack sampler is not biased towards C calls that let go of the GIL: a real nanoGPT-shaped
trainer whose host time (between forward and backward) is a pure-Python tokenizer and then a
GIL-releasing torch function gets the tokenizer named, exactly, with its share of step time
within 10 points of the hand timers written into its loop."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gputop.core.model import AttachState
from tests.helpers.probe import ROOT, trainer_env, watch_process
from tests.helpers.scheduling import favoured

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

TOLERANCE_POINTS = 10.0

TRAINER = """
import json, os, time
import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)
STEPS = 250
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
X, Y = torch.randn(16, 32), torch.randn(16, 1)
square = torch.randn(200, 200)
clock = time.perf_counter_ns


def tokenize(text, ms):
    end = clock() + ms * 1_000_000
    tokens = 0
    while clock() < end:  # pure Python: holds the GIL throughout
        for word in text.split():
            tokens += len(word) % 7
    return tokens


def augment(ms):
    end = clock() + ms * 1_000_000
    while clock() < end:
        square @ square  # torch lets go of the GIL in each product


timers = {"tokenize": [], "augment": [], "step": []}
text = "the quick brown fox jumps over the lazy dog " * 4
last = clock()
for it in range(STEPS):
    loss = nn.functional.mse_loss(model(X), Y)
    t0 = clock()
    tokenize(text, 6)
    t1 = clock()
    augment(4)
    t2 = clock()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    now = clock()
    timers["tokenize"].append(t1 - t0)
    timers["augment"].append(t2 - t1)
    timers["step"].append(now - last)  # the probe's step: from one optimizer step to the next
    last = now
with open(os.environ["TIMERS_OUT"], "w") as out:
    json.dump(timers, out)
"""


def run_bias_trainer(tmp_path: Path, **env: str) -> tuple[Path, AttachState, dict[str, list[int]]]:
    """The trainer under `python -m gputop.probe`: its script, final state and hand timers."""
    script = tmp_path / "tokenizing_trainer.py"
    script.write_text(textwrap.dedent(TRAINER))
    timers_out = tmp_path / "timers.json"
    proc = subprocess.Popen([sys.executable, "-m", "gputop.probe", str(script)],
                            env=trainer_env(tmp_path, TIMERS_OUT=str(timers_out), **env),
                            cwd=ROOT, start_new_session=True, preexec_fn=favoured())
    state = watch_process(proc, tmp_path)
    assert proc.returncode == 0
    return script, state, json.loads(timers_out.read_text())


def def_site(script: Path, function: str) -> str:
    """"function (file:line)" of the function's def in `script`."""
    lines = script.read_text().splitlines()
    line = next(n for n, text in enumerate(lines, 1) if text.startswith(f"def {function}("))
    return f"{function} ({script.name}:{line})"


def timed_share(timers: dict[str, list[int]], function: str, steps: int) -> float:
    """The function's share of step time by the hand timers, over the last `steps` steps."""
    return 100.0 * sum(timers[function][-steps:]) / sum(timers["step"][-steps:])


def test_the_pure_python_host_function_is_named_with_its_timed_share(tmp_path: Path) -> None:
    script, state, timers = run_bias_trainer(tmp_path)
    summary = state.summary
    assert summary.steps > 0 and summary.stack_samples > 0
    assert summary.verdict == "host-bound"
    assert summary.host_site == def_site(script, "tokenize")
    truth = timed_share(timers, "tokenize", summary.steps)
    assert summary.host_site_percent is not None
    assert abs(summary.host_site_percent - truth) <= TOLERANCE_POINTS, (
        summary.host_site_percent, truth)
