"""A loop that steps its optimizer with a closure, as Lightning and LBFGS do: forward and
backward run inside optimizer.step(closure). Timers placed by hand give each phase's median
(the optimizer's: the step's time without the closure's forward and backward); argv[1].

usage: closure_loop.py OUT.json [STEPS]
"""

import json
import statistics
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

WARMUP = 3
WIDTH = 512


def main(out_path, steps):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(steps * 32, WIDTH), torch.randint(0, 10, (steps * 32,)))
    loader = DataLoader(data, batch_size=32, num_workers=0)
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(),
                          nn.Linear(WIDTH, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    clock = time.perf_counter_ns
    hand: dict[str, list[int]] = {"forward": [], "backward": [], "optimizer": []}
    for x, y in loader:
        timed = {"forward": 0, "backward": 0}

        def closure(x=x, y=y, timed=timed):
            opt.zero_grad()
            t0 = clock()
            out = model(x)
            timed["forward"] += clock() - t0
            loss = nn.functional.cross_entropy(out, y)
            t0 = clock()
            loss.backward()
            timed["backward"] += clock() - t0
            return loss

        t0 = clock()
        opt.step(closure)
        step_ns = clock() - t0
        hand["forward"].append(timed["forward"])
        hand["backward"].append(timed["backward"])
        hand["optimizer"].append(step_ns - timed["forward"] - timed["backward"])
    medians = {name: statistics.median(ns[WARMUP:]) for name, ns in hand.items()}
    with open(out_path, "w") as f:
        json.dump(medians, f)
    time.sleep(0.3)  # the poller reads the last steps while the ring is still there


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40)
