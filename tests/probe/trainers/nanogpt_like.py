"""A nanoGPT-style loop: its own get_batch over a token tensor (no DataLoader), a small GPT,
AdamW. Timers placed by hand measure get_batch's share of the loop; written to argv[1].

usage: nanogpt_like.py OUT.json FETCH_MS WIDTH STEPS
  FETCH_MS  host time get_batch spends per batch (a sleep, like a read)
  WIDTH     the model's width (its compute grows with it)
"""

import json
import math
import sys
import time

import torch
from torch import nn
from torch.nn import functional as F

BLOCK, BATCH, VOCAB, LAYERS, HEADS = 32, 8, 64, 2, 4
WARMUP = 3  # steps left out of the hand share, as the probe leaves its warm-up steps out


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, width), nn.Embedding(BLOCK, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(LAYERS))
        self.ln, self.head = nn.LayerNorm(width), nn.Linear(width, VOCAB, bias=False)

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return logits, F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def main(out_path, fetch_ms, width, steps):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = torch.randint(0, VOCAB, (20_000,))

    def get_batch():
        time.sleep(fetch_ms / 1000)
        ix = torch.randint(len(data) - BLOCK - 1, (BATCH,))
        x = torch.stack([data[i : i + BLOCK] for i in ix])
        y = torch.stack([data[i + 1 : i + 1 + BLOCK] for i in ix])
        return x, y

    model = GPT(width)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    fetched = total = 0
    t_loop = time.perf_counter_ns()
    for it in range(steps):
        if it == WARMUP:
            fetched, t_loop = 0, time.perf_counter_ns()
        for group in optimizer.param_groups:  # nanoGPT sets the learning rate every step
            group["lr"] = 1e-3 * 0.5 * (1 + math.cos(math.pi * it / steps))
        t0 = time.perf_counter_ns()
        x, y = get_batch()
        fetched += time.perf_counter_ns() - t0
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    total = time.perf_counter_ns() - t_loop
    with open(out_path, "w") as f:
        json.dump({"input_percent": 100.0 * fetched / total}, f)
    time.sleep(0.3)  # the poller reads the last steps while the ring is still there


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
