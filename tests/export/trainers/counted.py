"""Trains a tiny model on a DataLoader with workers until the file argv[1] exists (60 s at
most), then writes how many optimizer steps it took to argv[2]."""

import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.tiny_training import train_until

stop, count_file = sys.argv[1], sys.argv[2]
loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8,
                    num_workers=1, persistent_workers=True)
steps = train_until(stop, loader, limit_s=60, pause_s=0.002)
with open(count_file, "w") as out:
    out.write(str(steps))
