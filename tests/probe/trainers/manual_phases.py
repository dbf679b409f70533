"""Times its own phases with gputop.probe; evaluation runs before training each epoch.

Usage: manual_phases.py PHASES, e.g. "forward" or "forward,backward,optimizer": the phases
the program times itself (the probe's torch patch covers what it leaves out).
"""

import importlib
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import gputop.probe as probe


def main(timed):
    torch.manual_seed(0)
    train = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    evaluate = DataLoader(TensorDataset(torch.randn(40, 8), torch.randn(40, 1)), batch_size=5)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def run(name, work):
        if name in timed:
            with probe.phase(name):
                return work()
        return work()

    for _ in range(2):
        with torch.no_grad():
            for x, _ in probe.watch(evaluate):
                run("forward", lambda x=x: model(x))
        for x, y in probe.watch(train):
            loss = run("forward", lambda x=x, y=y: nn.functional.mse_loss(model(x), y))
            opt.zero_grad()
            run("backward", loss.backward)
            run("optimizer", opt.step)
    pre_hooks = importlib.import_module("torch.optim.optimizer")._global_optimizer_pre_hooks
    wrapped = hasattr(torch.autograd.backward, "__wrapped__")
    print(f"backward wrapped: {wrapped}, optimizer pre-hooks: {len(pre_hooks)}")
    time.sleep(0.5)  # its 32 steps take ~30 ms: stay long enough for a 20 ms poller to see


if __name__ == "__main__":
    main(sys.argv[1].split(","))
