"""The training loop of the small torch trainers the tests run under the probe (scripts in
tests/*/trainers): a linear model fitted with SGD on a DataLoader until a stop file appears.
It imports torch, so only those scripts import it."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

import torch
from torch import nn


def train_until(stop: str, loader: Iterable[tuple[torch.Tensor, torch.Tensor]], limit_s: float,
                pause_s: float = 0.0) -> int:
    """Fit nn.Linear(8, 1) on `loader`, epoch after epoch, until the file `stop` exists or
    `limit_s` has passed, pausing `pause_s` after each step; the optimizer steps taken."""
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = 0
    deadline = time.monotonic() + limit_s
    while not os.path.exists(stop) and time.monotonic() < deadline:
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
            if pause_s:
                time.sleep(pause_s)
    return steps
