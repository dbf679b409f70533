"""The loop `gputop --demo host-bound` runs: nanoGPT's shape, with no DataLoader.

    logits, loss = model(X, Y)
    X, Y = get_batch()        # the next batch, fetched between forward and backward
    loss.backward()
    optimizer.step()

get_batch tokenizes each sampled document whole on the main thread, then crops one block
of it for the model: Python work that takes most of each step, while the model is small.
The torch loop is demo_trainer.run_host_bound_torch (only it imports torch); without torch
the same loop runs here with arithmetic for the model, timed by the same probe.
"""

from __future__ import annotations

import argparse
import itertools
import random
from collections.abc import Callable
from typing import TypeVar

from gputop.app.demo_trainer import STDLIB_NOTE, orphaned, phase_of, probe_module

ALPHABET = "abcdefghijklmnopqrstuvwxyz .,;\n"
CORPUS_CHARS = 1 << 20
DOC_CHARS = 8192  # what get_batch tokenizes per sample
BLOCK = 64  # what the model sees of it
ORPHAN_CHECK_STEPS = 20

Batch = TypeVar("Batch")


class Corpus:
    """A seeded character corpus and its vocabulary."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.text = "".join(self.rng.choices(ALPHABET, k=CORPUS_CHARS))
        self.stoi = {c: i for i, c in enumerate(ALPHABET)}


def get_batch(corpus: Corpus, batch: int,
              as_batch: Callable[[list[list[int]]], Batch]) -> tuple[Batch, Batch]:
    """`batch` documents, each tokenized whole on this thread and cropped to a block: inputs
    and next-token targets."""
    text, stoi, rng = corpus.text, corpus.stoi, corpus.rng
    xs, ys = [], []
    for _ in range(batch):
        start = rng.randrange(len(text) - DOC_CHARS)
        ids = []
        for char in text[start:start + DOC_CHARS]:
            ids.append(stoi[char])
        at = rng.randrange(len(ids) - BLOCK - 1)
        xs.append(ids[at:at + BLOCK])
        ys.append(ids[at + 1:at + BLOCK + 1])
    return as_batch(xs), as_batch(ys)


def _same(rows: list[list[int]]) -> list[list[int]]:
    return rows


def run_stand_in(args: argparse.Namespace, parent: int) -> None:
    """No torch: the same loop, its model arithmetic timed as forward, backward and
    optimizer phases, each step closed after the optimizer."""
    corpus = Corpus()
    probe = probe_module()
    if probe is not None:
        probe.annotate(note=STDLIB_NOTE, batch_size=args.batch, device="cpu", num_threads=1,
                       demo=True, scenario=args.scenario)
    weights = [0.0] * len(ALPHABET)
    X, Y = get_batch(corpus, args.batch, _same)
    step = 0
    while True:
        with phase_of(probe, "forward"):
            inputs = X
            errors = [weights[x] - weights[y] for xs, ys in zip(X, Y, strict=True)
                      for x, y in zip(xs, ys, strict=True)]
        X, Y = get_batch(corpus, args.batch, _same)
        with phase_of(probe, "backward"):
            grads = [0.0] * len(weights)
            for token, error in zip(itertools.chain.from_iterable(inputs), errors, strict=True):
                grads[token] += error
        with phase_of(probe, "optimizer"):
            weights = [w - 1e-3 * g for w, g in zip(weights, grads, strict=True)]
        if probe is not None:
            probe.step_end(args.batch)
        step += 1
        if step % ORPHAN_CHECK_STEPS == 0 and orphaned(parent):
            return

