"""A two-rank DDP trainer (gloo, CPU) whose rank SLOW_RANK loads its samples slowly.

Unmodified training code: the probe comes from `gputop run` / sitecustomize. DDP's
all-reduce makes the fast rank wait in backward for the slow one, so only the slow rank's
steps wait for input. Usage: torchrun --nproc-per-node 2 ddp.py STEPS SLOW_RANK
"""

import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

STEPS, SLOW_RANK = int(sys.argv[1]), int(sys.argv[2])
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
torch.set_num_threads(1)


class Samples(Dataset):
    """Random samples; on the slow rank each takes 1 ms to 'decode'."""

    def __len__(self) -> int:
        return 16 * STEPS

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if rank == SLOW_RANK:
            time.sleep(0.001)
        return torch.randn(64), torch.tensor(i % 4)


model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in DataLoader(Samples(), batch_size=16, num_workers=0):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
