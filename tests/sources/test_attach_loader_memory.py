"""An attached trainer that makes a new DataLoader every epoch: the ring window remembers the
training loaders of the steps it holds, not every loader since it attached."""

from __future__ import annotations

import os
from pathlib import Path

from gputop.probe import ring as ring_format
from gputop.sources.attach import RingAttachSource
from tests.helpers.probe import payload

MS = 1_000_000
EPOCHS = 500
STEPS_PER_EPOCH = 4
WINDOW = 16


def _step(n: int, loader: int, trains: bool) -> tuple[int, ...]:
    return payload(step=n, start_ns=n * 10 * MS, duration_ns=10 * MS, data_ns=2 * MS,
                   batch_size=8, epoch=loader, loader=loader,
                   flags=ring_format.F_OPTIMIZER if trains else 0)


def test_loaders_of_past_epochs_are_forgotten(tmp_path: Path) -> None:
    writer = ring_format.RingWriter(ring_format.ring_path(os.getpid(), directory=str(tmp_path)))
    source = RingAttachSource(directory=str(tmp_path), window=WINDOW)
    try:
        source.attach(os.getpid())
        n = 0
        for epoch in range(1, EPOCHS + 1):
            writer.append([_step(n + i, epoch, True) for i in range(STEPS_PER_EPOCH)])
            n += STEPS_PER_EPOCH
            (state,) = source.sample()
        remembered = source._windows[os.getpid()].train_loaders
        assert len(remembered) <= WINDOW // STEPS_PER_EPOCH + 1
        assert len(state.steps) == WINDOW  # every step in the window still trains
    finally:
        source.close()
        writer.close()


def test_an_evaluation_pass_longer_than_the_window_stays_hidden(tmp_path: Path) -> None:
    writer = ring_format.RingWriter(ring_format.ring_path(os.getpid(), directory=str(tmp_path)))
    source = RingAttachSource(directory=str(tmp_path), window=WINDOW)
    try:
        source.attach(os.getpid())
        writer.append([_step(i, 1, True) for i in range(WINDOW)])
        source.sample()
        writer.append([_step(WINDOW + i, 2, False) for i in range(2 * WINDOW)])  # eval loader
        (state,) = source.sample()
        assert state.steps == ()
        writer.append([_step(3 * WINDOW + i, 3, True) for i in range(3)])  # next epoch trains
        (state,) = source.sample()
        assert [s.step for s in state.steps] == [3 * WINDOW, 3 * WINDOW + 1, 3 * WINDOW + 2]
    finally:
        source.close()
        writer.close()
