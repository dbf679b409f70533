"""Trains from in-memory tensors without a DataLoader: steps come from optimizer steps."""

import time

import torch
from torch import nn

torch.manual_seed(0)
x, y = torch.randn(32, 8), torch.randn(32, 1)
model = nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(12):
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
time.sleep(0.5)  # its 12 steps take a few ms: stay long enough for a 20 ms poller to see
