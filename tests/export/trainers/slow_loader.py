"""A data-bound CPU trainer: one DataLoader worker sleeps per sample, the model is tiny.
Trains until the file argv[1] exists (180 s at most)."""

import os
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

SAMPLE_S = 0.003


class SlowSamples(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        time.sleep(SAMPLE_S)
        return torch.full((8,), float(i)), torch.tensor([float(i % 2)])


def main(stop):
    torch.set_num_threads(1)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowSamples(), batch_size=8, num_workers=1, persistent_workers=True)
    deadline = time.monotonic() + 180
    while not os.path.exists(stop) and time.monotonic() < deadline:
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main(sys.argv[1])
