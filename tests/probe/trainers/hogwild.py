"""pytorch/examples mnist_hogwild's shape: a parent that trains nothing starts two trainers
with torch.multiprocessing (start method argv[1]: spawn or forkserver) on a shared model;
each trains on a DataLoader (one worker) until the file argv[2] exists (120 s at most),
having written its PID to argv[2].RANK.pid."""

import os
import sys
import time

import torch
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

TRAINERS = 2
LIMIT_S = 120


def train(rank, model, stop):
    with open(f"{stop}.{rank}.pid", "w") as out:
        out.write(str(os.getpid()))
    torch.manual_seed(rank)
    torch.set_num_threads(1)
    loader = DataLoader(TensorDataset(torch.randn(256, 32), torch.randint(0, 4, (256,))),
                        batch_size=16, shuffle=True, num_workers=1, persistent_workers=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    deadline = time.monotonic() + LIMIT_S
    while not os.path.exists(stop) and time.monotonic() < deadline:
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            time.sleep(0.005)  # leave the test's cores some room


def main():
    method, stop = sys.argv[1], sys.argv[2]
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    model.share_memory()
    ctx = mp.get_context(method)
    trainers = [ctx.Process(target=train, args=(rank, model, stop))  # type: ignore[attr-defined]
                for rank in range(TRAINERS)]
    for trainer in trainers:
        trainer.start()
    for trainer in trainers:
        trainer.join()
    return max(trainer.exitcode for trainer in trainers)


if __name__ == "__main__":
    sys.exit(main())
