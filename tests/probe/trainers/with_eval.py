"""Trains on one loader and evaluates on another between epochs; exits with argv[1]."""

import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main(code):
    torch.manual_seed(0)
    train = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8,
                       pin_memory=False)
    evaluate = DataLoader(TensorDataset(torch.randn(40, 8), torch.randn(40, 1)), batch_size=5)
    model = nn.Linear(8, 1)
    opt = torch.optim.Adam(model.parameters())
    for _ in range(2):
        for x, y in train:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            for x, _ in evaluate:
                model(x)
    time.sleep(0.5)  # its 16 steps take ~50 ms: stay long enough for a 20 ms poller to see
    return code


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 0))
