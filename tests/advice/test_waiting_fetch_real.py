"""A loop that followed the prefetch advice and now waits on its prefetch thread (the fetch
slower than the model), a real torch trainer under `python -m gputop.probe`: the probe names
its host (or, fetched at the loop's top, input) site as waiting in queue.Queue.get, and the
advice gives that work more hands; it is never told to prefetch again."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gputop.probe.ring import WAITING
from tests.helpers.advice_run import (
    Trainer,
    advice,
    probed_script,
    sample_until,
    shows,
    state,
    watching,
)
from tests.helpers.probe import def_site

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

FETCH_MS = "30"  # the read's wait in the prefetch thread: several times the model's step

TRAINER = '''
"""A loop fed by a prefetch thread (the prefetch advice followed) whose fetch is slower than
the model: it waits in queue.Queue.get. --threads: how many threads fill the queue."""
import argparse
import json
import os
import queue
import threading
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--loop", choices=("nanogpt", "top"), required=True)
parser.add_argument("--fetch-ms", type=float, required=True)
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--ready", required=True)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(4096, 65)
batches = queue.Queue(maxsize=4)


def get_batch():
    time.sleep(args.fetch_ms / 1000)  # the read's wait (storage, a network file system)
    rows = data[torch.randint(len(data), (32,))]
    return rows[:, :64], rows[:, 64:]


def fill():
    while True:
        batches.put(get_batch())


def next_batch():
    return batches.get()


for _ in range(args.threads):
    threading.Thread(target=fill, daemon=True).start()
it = 0
X, Y = next_batch()
while True:
    if args.loop == "top":
        X, Y = next_batch()
        loss = nn.functional.mse_loss(model(X), Y)
    else:
        loss = nn.functional.mse_loss(model(X), Y)
        X, Y = next_batch()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    it += 1
    if it == 1:
        with open(args.ready + ".tmp", "w") as f:
            json.dump({"pid": os.getpid()}, f)
        os.replace(args.ready + ".tmp", args.ready)
'''


@contextmanager
def probed(tmp_path: Path, *args: str) -> Iterator[Trainer]:
    """The trainer with `args` under `python -m gputop.probe`, favoured, until killed."""
    script = tmp_path / "train.py"
    script.write_text(TRAINER)
    with probed_script(script, tmp_path, *args) as trainer:
        yield trainer


# (the loop's shape, the advice it gets, the verdict, the summary's field naming the site)
SHAPES = [
    ("nanogpt", "host-bound", "host-bound", "host_site"),
    ("top", "own-fetch", "data-bound", "data_site"),
]


@pytest.mark.parametrize(("loop", "advice_id", "verdict", "site_field"), SHAPES,
                         ids=[loop for loop, *_ in SHAPES])
def test_a_loop_waiting_on_its_prefetch_thread_is_not_told_to_prefetch_again(
    tmp_path: Path, loop: str, advice_id: str, verdict: str, site_field: str
) -> None:
    with probed(tmp_path, "--loop", loop, "--fetch-ms", FETCH_MS) as trainer, \
            watching(trainer) as sampler:
        frame = sample_until(sampler, shows(advice_id))
    summary = state(frame).summary
    waiting = f"{def_site(tmp_path / 'train.py', 'next_batch')}{WAITING}queue.Queue.get"
    assert summary.verdict == verdict, summary
    assert getattr(summary, site_field) == waiting, summary
    found = advice(frame, advice_id)
    assert found.action.startswith(f"{waiting}: Give that work more hands: two prefetch threads")
    assert "background thread" not in found.action and "Prefetch" not in found.action
    assert "(the loop waits for its own thread, which sets the pace)" in found.title
