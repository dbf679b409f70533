"""Issue 38: samples/s whenever the batch size is known. A loop without a DataLoader gets it
from the first dimension of the first tensor argument of the stepped model's forward."""

from __future__ import annotations

import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputop.probe import torch as probe_torch
from gputop.probe.steps import Recorder
from tests.helpers.probe import ROOT, attach_once, published_records, trainer_env

torch = pytest.importorskip("torch")
BATCH = 12
NANOGPT = '''
import os, sys, time
import torch
from torch import nn
from torch.nn import functional as F

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.head = nn.Embedding(64, 16), nn.Linear(16, 64)

    def forward(self, idx, targets):
        logits = self.head(self.tok(idx))
        return logits, F.cross_entropy(logits.view(-1, 64), targets.view(-1))

def get_batch():
    time.sleep(0.002)
    x = torch.randint(0, 64, (int(sys.argv[2]), 8))
    return x, torch.roll(x, 1, 1)

model = Net()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
X, Y = get_batch()
while not os.path.exists(sys.argv[1]):
    _, loss = model(X, Y)
    X, Y = get_batch()  # nanoGPT fetches between forward and backward
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
'''



@pytest.mark.slow
def test_a_nanogpt_shaped_loop_shows_samples_per_second(tmp_path: Path) -> None:
    script, stop = tmp_path / "train.py", tmp_path / "stop"
    script.write_text(NANOGPT)
    proc = subprocess.Popen([sys.executable, "-m", "gputop.probe", str(script), str(stop),
                             str(BATCH)], env=trainer_env(tmp_path), cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        attached: dict[str, Any] = {}
        while proc.poll() is None and time.monotonic() < deadline:
            attached = attach_once(proc.pid, tmp_path)
            if sum(not s["warmup"] for s in attached["steps"]) >= 10:
                break
    finally:
        stop.touch()
        proc.wait(timeout=60)
    steady = [s for s in attached["steps"] if not s["warmup"]]
    assert len(steady) >= 10, attached
    assert {s["batch_size"] for s in steady} == {BATCH}
    assert attached["summary"]["samples_per_s"] is not None
    assert attached["summary"]["samples_per_s"] > 0


@pytest.fixture
def hooked(rec: Recorder) -> Iterator[Any]:
    """A model whose outermost forwards the torch patch times, as the stepped model's."""
    forward = probe_torch._ModelForward(rec, torch.Tensor)
    net = Keyworded()
    handles = [forward._pre_hook(net), forward._post_hook(net)]
    try:
        yield net
    finally:
        for handle in handles:
            handle.remove()


class Keyworded(torch.nn.Module):  # type: ignore[name-defined]
    """A model called by keyword, as Hugging Face models are: model(input_ids=..., ...)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(4, 2)

    def forward(self, flag: Any = False, input_ids: Any = None, mask: Any = None) -> Any:
        return None if input_ids is None else self.inner(input_ids)



def test_the_batch_comes_from_the_first_tensor_keyword_and_a_loader_wins(
        rec: Recorder, hooked: Any) -> None:
    rec.step_end()  # a loader-less step opens
    hooked(flag=True, input_ids=torch.randn(5, 4), mask=torch.ones(3, 4))
    hooked(input_ids=torch.randn(7, 4))  # the step's first forward gave it already
    rec.step_end()
    hooked(flag=True)  # no tensor: unknown
    rec.step_end()
    rec.fetch_begin(1)
    rec.fetch_end(1, 9)  # a loader gave it
    hooked(input_ids=torch.randn(5, 4))
    rec.fetch_begin(1)
    rec.fetch_end(1, -1)  # a loader that does not know it (a batch sampler's)
    hooked(torch.zeros(()), input_ids=torch.randn(5, 4))  # a 0-d first argument: no size
    rec.fetch_begin(1)
    rec.fetch_end(1, -1)
    hooked(False, torch.randn(6, 4))  # the first argument is no tensor: no size either
    rec.fetch_begin(1)
    rec.fetch_end(1, -1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested tensors are a prototype
        hooked(torch.nested.nested_tensor([torch.zeros(2, 4), torch.zeros(3, 4)]))  # no sizes
    rec.fetch_begin(1)
    assert [r.batch_size for r in published_records(rec)] == [5, -1, -1, 9, -1, -1, -1]
