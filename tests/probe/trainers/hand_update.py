"""Updates its parameters by hand, as pytorch/examples' word_language_model does: backward,
then p.data.add_(p.grad, alpha=-lr), no torch.optim. Trains until the file argv[1] exists
(at most 120 s)."""

import os
import sys
import time

import torch
from torch import nn


def main(stop_path):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 1))
    x, y = torch.randn(64, 32), torch.randn(64, 1)
    deadline = time.monotonic() + 120
    while not os.path.exists(stop_path) and time.monotonic() < deadline:
        model.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        for p in model.parameters():
            assert p.grad is not None  # backward() gave every parameter one
            p.data.add_(p.grad, alpha=-0.01)
        time.sleep(0.01)


if __name__ == "__main__":
    main(sys.argv[1])
