"""A compute-bound CPU trainer: a heavy model fed by prefetching DataLoader workers."""

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(256, 256), torch.randint(0, 10, (256,)))
    loader = DataLoader(data, batch_size=16, num_workers=1, prefetch_factor=4,
                        persistent_workers=True)
    model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(256, 256), nn.ReLU())],
                          nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(2):
        for x, y in loader:
            for _ in range(8):  # heavy: several passes per batch
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
            opt.step()
    return 0


if __name__ == "__main__":
    sys.exit(main())
