"""Trains two epochs on one loader, evaluating on another after each; it can hold (wait for
a file) inside the evaluation or at the training loader's first fetch after it.

usage: evaluates_and_holds.py DIR EVAL_HOLD TRAIN_HOLD
  EVAL_HOLD   the first evaluation waits at this batch for DIR/eval (-1: never)
  TRAIN_HOLD  1: the first fetch after the first evaluation waits for DIR/train
Each hold writes DIR/NAME.waiting first.
"""

import os
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Rows(Dataset):
    def __init__(self, count, directory, name):
        self.count, self.directory, self.name = count, directory, name
        self.hold_at = -1

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        if i == self.hold_at:
            self.hold_at = -1
            open(os.path.join(self.directory, self.name + ".waiting"), "w").close()
            while not os.path.exists(os.path.join(self.directory, self.name)):
                time.sleep(0.01)
        return torch.randn(8), torch.randn(1)


def main(directory, eval_hold, train_hold):
    torch.manual_seed(0)
    train_rows, eval_rows = Rows(64, directory, "train"), Rows(4000, directory, "eval")
    train = DataLoader(train_rows, batch_size=4)
    evaluate = DataLoader(eval_rows, batch_size=1)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    eval_rows.hold_at = eval_hold
    for epoch in range(2):
        for x, y in train:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            for i, (x, _) in enumerate(evaluate):
                model(x)
                if i == eval_hold + 10:
                    break
        model.train()
        if epoch == 0 and train_hold:
            train_rows.hold_at = 0


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
