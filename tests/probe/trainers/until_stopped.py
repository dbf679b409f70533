"""Trains a tiny model on a DataLoader until the file argv[1] exists (60 s at most)."""

import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.tiny_training import train_until

loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
train_until(sys.argv[1], loader, limit_s=60, pause_s=0.005)
