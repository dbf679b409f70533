"""Trains from in-memory tensors without a DataLoader: steps come from optimizer steps."""

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
