"""Trains a tiny model on a DataLoader with workers until the file argv[1] exists or argv[3]
seconds have passed (60 by default), pausing argv[4] seconds a step (0.002), then writes how
many optimizer steps it took to argv[2]."""

import os
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

stop, count_file = sys.argv[1], sys.argv[2]
run_s = float(sys.argv[3]) if len(sys.argv) > 3 else 60.0
pause_s = float(sys.argv[4]) if len(sys.argv) > 4 else 0.002
model = nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8,
                    num_workers=1, persistent_workers=True)
steps = 0
deadline = time.monotonic() + run_s
while not os.path.exists(stop) and time.monotonic() < deadline:
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
        time.sleep(pause_s)
with open(count_file, "w") as out:
    out.write(str(steps))
