"""A data-bound CPU trainer: one DataLoader worker sleeps per sample, the model is tiny.
Trains until the file argv[1] exists (180 s at most)."""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

from tests.helpers.tiny_training import train_until

SAMPLE_S = 0.003


class SlowSamples(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        time.sleep(SAMPLE_S)
        return torch.full((8,), float(i)), torch.tensor([float(i % 2)])


def main(stop):
    torch.set_num_threads(1)
    loader = DataLoader(SlowSamples(), batch_size=8, num_workers=1, persistent_workers=True)
    train_until(stop, loader, limit_s=180)


if __name__ == "__main__":
    main(sys.argv[1])
