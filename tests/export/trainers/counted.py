"""Trains a tiny model on a DataLoader with workers until the file argv[1] exists or argv[3]
seconds have passed (60 by default), pausing argv[4] seconds a step (0.002), then writes how
many optimizer steps it took to argv[2]."""

import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.tiny_training import train_until

stop, count_file = sys.argv[1], sys.argv[2]
run_s = float(sys.argv[3]) if len(sys.argv) > 3 else 60.0
pause_s = float(sys.argv[4]) if len(sys.argv) > 4 else 0.002
loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8,
                    num_workers=1, persistent_workers=True)
steps = train_until(stop, loader, limit_s=run_s, pause_s=pause_s)
with open(count_file, "w") as out:
    out.write(str(steps))
