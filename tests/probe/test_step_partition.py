"""Issue 38, real torch trainers under `python -m gputop.probe`: a step is a partition of its
wall time (data + h2d + forward + backward + optimizer + sync + host = duration, to the ns,
on every loop shape), and the stack sampler names the function its host or data time is
spent in, exactly: "function (file:line)" of the function's def."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from gputop.core.model import AttachState, StepRecord
from tests.helpers.probe import ROOT, trainer_env, watch_process
from tests.helpers.scheduling import favoured

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

STEPS = 30
NO_PIN = 3  # a trainer's exit code when pin_memory() needs an accelerator this host lacks

HEAD = f"""
import sys, time
import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)
STEPS = {STEPS}
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(4096, 33)


def get_batch():
    time.sleep(0.025)  # a slow read: the host time the probe must name
    rows = data[torch.randint(len(data), (16,))]
    return rows[:, :32], rows[:, 32:]


def loss_of(x, y):
    return nn.functional.mse_loss(model(x), y)
"""

LOOPS = {
    # nanoGPT: the next batch is fetched between forward and backward
    "nanogpt": """
X, Y = get_batch()
for it in range(STEPS):
    loss = loss_of(X, Y)
    X, Y = get_batch()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
""",
    "fetch_at_top": """
for it in range(STEPS):
    X, Y = get_batch()
    loss = loss_of(X, Y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
""",
    "pinned": """
try:
    torch.zeros(1).pin_memory()
except RuntimeError as exc:
    print(str(exc).splitlines()[0], file=sys.stderr)
    sys.exit(3)
for it in range(STEPS):
    X, Y = get_batch()
    X, Y = X.pin_memory().to("cpu", non_blocking=True), Y.pin_memory().to("cpu", non_blocking=True)
    loss = loss_of(X, Y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
""",
    "slow_collate": """
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data._utils.collate import default_collate


def slow_collate(batch):
    time.sleep(0.025)  # a main-thread collate doing real work
    return default_collate(batch)


loader = DataLoader(TensorDataset(data[:, :32], data[:, 32:]), batch_size=16,
                    collate_fn=slow_collate, num_workers=0)
for it, (X, Y) in enumerate(loader):
    if it == STEPS:
        break
    loss = loss_of(X, Y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
""",
    "logging": """
from torch.utils.data import DataLoader, TensorDataset

history = []


def log_metrics(loss, step):
    value = loss.item()
    history.append(f"step {step} loss {value:.4f} " + " ".join(
        f"{p.grad.norm().item():.3f}" for p in model.parameters() if p.grad is not None))
    time.sleep(0.025)  # the write of a heavy logger
    print(history[-1][:40], file=sys.stderr if step % 10 else sys.stdout)


loader = DataLoader(TensorDataset(data[:, :32], data[:, 32:]), batch_size=16)
for it, (X, Y) in enumerate(loader):
    if it == STEPS:
        break
    loss = loss_of(X, Y)
    loss.backward()
    log_metrics(loss, it)
    opt.step()
    opt.zero_grad(set_to_none=True)
""",
    "lbfgs": """
opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=4)
for it in range(STEPS):
    X, Y = get_batch()

    def closure():
        opt.zero_grad()
        loss = loss_of(X, Y)
        loss.backward()
        return loss

    opt.step(closure)
""",
}


def _run(tmp_path: Path, shape: str) -> tuple[Path, AttachState]:
    script = tmp_path / f"loop_{shape}.py"  # never a module name the trainer imports
    script.write_text(textwrap.dedent(HEAD) + LOOPS[shape] + "time.sleep(0.3)\n")
    proc = subprocess.Popen([sys.executable, "-m", "gputop.probe", str(script)],
                            env=trainer_env(tmp_path), cwd=ROOT, start_new_session=True,
                            preexec_fn=favoured(), stderr=subprocess.PIPE)
    state = watch_process(proc, tmp_path)
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode == NO_PIN:
        pytest.skip(f"pin_memory() needs an accelerator this host lacks: {err.strip()}")
    assert proc.returncode == 0, err
    return script, state


def _def_site(script: Path, function: str) -> str:
    """"function (file:line)" of the function's def in `script`."""
    lines = script.read_text().splitlines()
    line = next(n for n, text in enumerate(lines, 1) if text.startswith(f"def {function}("))
    return f"{function} ({script.name}:{line})"


def _counted(state: AttachState) -> list[StepRecord]:
    steps = [s for s in state.steps if not s.warmup]
    assert len(steps) >= STEPS // 2, len(steps)
    return steps


def _assert_partition(steps: list[StepRecord]) -> None:
    for s in steps:
        assert s.host_ns is not None, s
        parts = (s.data_ns, s.h2d_ns, s.forward_ns, s.backward_ns, s.optimizer_ns, s.sync_ns,
                 s.host_ns)
        assert sum(p or 0 for p in parts) == s.duration_ns, s
        assert s.sync_ns == 0, s  # a CPU model: nothing waits on a device


def _top_site(steps: list[StepRecord], kind: str) -> str | None:
    tally: Counter[str] = Counter()
    for s in steps:
        site = getattr(s, f"{kind}_site")
        if site is not None:
            tally[site] += getattr(s, f"{kind}_site_samples")
    return tally.most_common(1)[0][0] if tally else None


# (shape, the phase its slow function's time is in, the slow function)
NAMED = [
    ("nanogpt", "host", "get_batch"),
    ("fetch_at_top", "data", "get_batch"),
    ("pinned", "data", "get_batch"),
    ("slow_collate", "data", "slow_collate"),
    ("logging", "host", "log_metrics"),
]


@pytest.mark.parametrize(("shape", "kind", "function"), NAMED)
def test_phases_sum_to_the_step_and_the_slow_function_is_named(
    tmp_path: Path, shape: str, kind: str, function: str
) -> None:
    script, state = _run(tmp_path, shape)
    steps = _counted(state)
    _assert_partition(steps)
    assert _top_site(steps, kind) == _def_site(script, function)
    assert all(s.samples >= s.host_site_samples + s.data_site_samples for s in steps)
    slow = [getattr(s, f"{kind}_ns") for s in steps]
    others = "data" if kind == "host" else "host"
    assert sum(slow) > sum(getattr(s, f"{others}_ns") or 0 for s in steps)


def test_an_lbfgs_closures_steps_are_partitioned_too(tmp_path: Path) -> None:
    _, state = _run(tmp_path, "lbfgs")
    steps = _counted(state)
    _assert_partition(steps)
    assert all(s.forward_ns and s.backward_ns and s.optimizer_ns for s in steps)
    assert all(s.input_outside_model for s in steps)
