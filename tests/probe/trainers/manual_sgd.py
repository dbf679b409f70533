"""Trains by hand, as pytorch/examples' word_language_model does: backward(), then
p.data.add_(p.grad, alpha=-lr), no torch.optim. argv: OUT ITERATIONS MODE, MODE "loop" (its
own get_batch) or "loader" (a DataLoader). Writes to OUT, as JSON, its own timers (the clock
before each backward(), and before each next() of the loader) and the records its ring holds
at the end, read by the probe's reader."""

import json
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import gputop.probe as probe
from gputop.probe.reader import RingReader


def update(model, lr=0.01):
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)
    time.sleep(0.002)  # a slower update: the step must hold it


def main(out, iterations, mode):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 1))
    data = torch.randn(iterations * 16, 32), torch.randn(iterations * 16, 1)
    backward_at, fetch_at = [], []
    if mode == "loop":
        for i in range(iterations):
            x, y = data[0][i * 16:(i + 1) * 16], data[1][i * 16:(i + 1) * 16]  # get_batch
            time.sleep(0.001)
            model.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            backward_at.append(time.perf_counter_ns())
            loss.backward()
            update(model)
    else:
        batches = iter(DataLoader(TensorDataset(*data), batch_size=16))
        while True:
            fetch_at.append(time.perf_counter_ns())
            try:
                x, y = next(batches)
            except StopIteration:
                break
            model.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            backward_at.append(time.perf_counter_ns())
            loss.backward()
            update(model)
    rec = probe.recorder()
    rec.publish(wait=True)
    assert rec.ring is not None, "the probe made no ring"
    reader = RingReader(rec.ring.path)
    records = [r._asdict() for r in reader.read_new()]
    reader.close()
    with open(out, "w") as f:
        json.dump({"backward_at": backward_at, "fetch_at": fetch_at, "records": records}, f)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
