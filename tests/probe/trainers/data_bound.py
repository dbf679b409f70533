"""A data-bound CPU trainer: slow samples, num_workers=0. Writes its own input share to argv[1]."""

import json
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

SAMPLE_S = 0.004


class SlowSamples(Dataset):
    def __len__(self):
        return 96

    def __getitem__(self, i):
        time.sleep(SAMPLE_S)
        return torch.full((16,), float(i)), torch.tensor(i % 2)


def main(out_path):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowSamples(), batch_size=4, num_workers=0)
    waited = total = 0
    for _ in range(2):
        it = iter(loader)
        t_step = time.perf_counter_ns()
        while True:
            t0 = time.perf_counter_ns()
            try:
                x, y = next(it)
            except StopIteration:
                break
            waited += time.perf_counter_ns() - t0
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        total += time.perf_counter_ns() - t_step
    with open(out_path, "w") as f:
        json.dump({"input_percent": 100.0 * waited / total}, f)


if __name__ == "__main__":
    main(sys.argv[1])
