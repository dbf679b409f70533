"""A real trainer whose host time is two pure-Python functions in every step (2/3 and 1/3 of
a 30 ms host part, between forward and backward): the probe names the first, exactly, with
its share of step time within 10 points of the hand timers in its loop, not the whole host
part's share."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

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
STEPS = 200
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
X, Y = torch.randn(16, 32), torch.randn(16, 1)
clock = time.perf_counter_ns


def tokenize(ms):
    end = clock() + ms * 1_000_000
    tokens = 0
    while clock() < end:  # pure Python: holds the GIL throughout
        tokens += 1
    return tokens


def log_metrics(ms):
    end = clock() + ms * 1_000_000
    lines = 0
    while clock() < end:
        lines += 1
    return lines


timers = {"tokenize": [], "log_metrics": [], "step": []}
last = clock()
for it in range(STEPS):
    loss = nn.functional.mse_loss(model(X), Y)
    t0 = clock()
    tokenize(20)
    t1 = clock()
    log_metrics(10)
    t2 = clock()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    now = clock()
    timers["tokenize"].append(t1 - t0)
    timers["log_metrics"].append(t2 - t1)
    timers["step"].append(now - last)  # the probe's step: from one optimizer step to the next
    last = now
with open(os.environ["TIMERS_OUT"], "w") as out:
    json.dump(timers, out)
"""


def _def_site(script: Path, function: str) -> str:
    lines = script.read_text().splitlines()
    line = next(n for n, text in enumerate(lines, 1) if text.startswith(f"def {function}("))
    return f"{function} ({script.name}:{line})"


def _timed_share(timers: dict[str, list[int]], function: str, steps: int) -> float:
    return 100.0 * sum(timers[function][-steps:]) / sum(timers["step"][-steps:])


def test_the_top_of_two_host_functions_gets_its_own_share(tmp_path: Path) -> None:
    script = tmp_path / "two_function_trainer.py"
    script.write_text(textwrap.dedent(TRAINER))
    timers_out = tmp_path / "timers.json"
    proc = subprocess.Popen([sys.executable, "-m", "gputop.probe", str(script)],
                            env=trainer_env(tmp_path, TIMERS_OUT=str(timers_out)),
                            cwd=ROOT, start_new_session=True, preexec_fn=favoured())
    state = watch_process(proc, tmp_path)
    assert proc.returncode == 0
    timers = json.loads(timers_out.read_text())
    s = state.summary
    assert s.steps > 0 and s.stack_samples > 0 and s.verdict == "host-bound"
    assert s.host_site == _def_site(script, "tokenize")
    truth = _timed_share(timers, "tokenize", s.steps)
    whole = truth + _timed_share(timers, "log_metrics", s.steps)
    assert whole - truth > 2 * TOLERANCE_POINTS  # the host part's share is not the answer
    assert s.host_site_percent is not None
    assert abs(s.host_site_percent - truth) <= TOLERANCE_POINTS, (s.host_site_percent, truth)
