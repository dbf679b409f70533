"""The attach source's work per tick is counted, not timed: a tick of a trainer's ring reads
the records that closed since the last one, not the 256-step window, and builds its config
only when the trainer wrote new metadata."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.analysis.steps import classify, verdict_of
from gputop.frames.derive import Derivation
from gputop.probe import ring as ring_format
from gputop.sources import attach
from gputop.sources.attach import RingAttachSource

LOADER = 1


def _records(first: int, n: int) -> list[tuple[int, ...]]:
    """`n` training steps of one loader from step `first` (values in PAYLOAD_FIELDS order)."""
    return [(s, 1000 * s, 500, 10, -1, 100, 200, 150, -1, -1, 64, 0, ring_format.F_OPTIMIZER,
             LOADER, 40, -1, 0, 0, 0, 0, 0, 0) for s in range(first, first + n)]


@pytest.fixture
def ring(tmp_path: Path) -> Iterator[tuple[ring_format.RingWriter, RingAttachSource]]:
    """Our own ring, a full window written, and a source attached to it."""
    writer = ring_format.RingWriter(ring_format.ring_path(os.getpid(), directory=str(tmp_path)))
    writer.set_meta(b'{"num_workers": 2, "batch_size": 64}')
    writer.append(_records(0, 300))
    source = RingAttachSource(directory=str(tmp_path))
    source.attach(os.getpid())
    try:
        yield writer, source
    finally:
        source.close()
        writer.close()


class CountingSet(set[int]):
    """A trainer's training loaders, counting the lookups made in them."""

    lookups = 0

    def __contains__(self, item: object) -> bool:
        type(self).lookups += 1
        return super().__contains__(item)


def test_a_tick_looks_at_the_new_records_not_the_window(
        ring: tuple[ring_format.RingWriter, RingAttachSource], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window of steps that train is kept as records arrive: a tick with 22 new records
    makes no lookup per step of the window, and no Python call per field of a record."""
    writer, source = ring
    (state,) = source.sample()
    assert [s.step for s in state.steps] == list(range(44, 300))
    window = source._windows[os.getpid()]
    window.train_loaders = CountingSet(window.train_loaders)
    per_field = 0

    def counting_opt(value: int) -> int | None:
        nonlocal per_field
        per_field += 1
        return None if value < 0 else value

    monkeypatch.setattr(attach, "_opt", counting_opt, raising=False)
    CountingSet.lookups = 0
    writer.append(_records(300, 22))
    (state,) = source.sample()
    assert [s.step for s in state.steps] == list(range(66, 322))
    assert state.steps[-1].h2d_ns is None and state.steps[-1].forward_ns == 100
    assert CountingSet.lookups <= 2 * 22  # the new records', not the window's 256
    assert per_field == 0


def test_the_config_is_built_again_only_when_the_metadata_changed(
        ring: tuple[ring_format.RingWriter, RingAttachSource], monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, source = ring
    built = 0
    real = attach.config_from_meta

    def counting(meta: dict[str, object]) -> object:
        nonlocal built
        built += 1
        return real(meta)

    monkeypatch.setattr(attach, "config_from_meta", counting)
    for tick in range(5):
        writer.append(_records(300 + tick, 1))
        (state,) = source.sample()
    assert built == 1 and state.config.num_workers == 2
    writer.set_meta(b'{"num_workers": 4, "batch_size": 64}')
    (state,) = source.sample()
    assert built == 2 and state.config.num_workers == 4


def test_a_tick_reads_no_more_records_than_the_window_holds(
        ring: tuple[ring_format.RingWriter, RingAttachSource], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fast trainer closes more steps a tick than the 256-step window holds: the older
    ones would leave the window as they came, so they are not decoded at all (decoding them
    cost a fast trainer's ticks milliseconds for nothing). The window is the same,
    and records skipped so are not counted as lost to the ring."""
    writer, source = ring
    made = 0
    real = attach.to_step

    def counting(raw: object, *verdict_of: object) -> object:
        nonlocal made
        made += 1
        return real(raw, *verdict_of)  # type: ignore[arg-type]

    monkeypatch.setattr(attach, "to_step", counting)
    (state,) = source.sample()  # the first tick: 300 records in the ring
    assert [s.step for s in state.steps] == list(range(44, 300))
    assert made == 256
    writer.append(_records(300, 1000))  # within the ring's 1024 slots: none lost
    made = 0
    (state,) = source.sample()
    assert [s.step for s in state.steps] == list(range(1044, 1300))
    assert made == 256
    assert state.dropped_records == 0
    reader = source._windows[os.getpid()].reader
    assert reader is not None and reader.skipped == 44 + 744


def test_a_step_is_one_record_from_the_ring_to_the_frame(tmp_path: Path) -> None:
    """Wired with the verdict, the source classifies each step as it makes it: the window the
    Derivation keeps holds the source's own records, not a classified copy of each (a second
    record per step doubles what a fast trainer's steps cost a tick)."""
    writer = ring_format.RingWriter(ring_format.ring_path(os.getpid(), directory=str(tmp_path)))
    writer.append(_records(0, 40))
    writer.append([(s, 1000 * s, 1000, 900, 10, 40, 30, 20, -1, -1, 64, 0, ring_format.F_OPTIMIZER,
                    LOADER, 0, -1, 0, 0, 0, 0, 0, 0)
                   for s in range(40, 50)])  # input 910 of 1000 ns: data-bound
    source = RingAttachSource(directory=str(tmp_path), verdict_of=verdict_of)
    source.attach(os.getpid())
    derive = Derivation()
    try:
        for more in (0, 5):
            writer.append(_records(50 + more, more))
            raw = source.sample()
            (state,), _ = derive.attached(raw, 0)
            assert all(d is r for d, r in zip(state.steps, raw[0].steps, strict=True))
            assert [s.verdict for s in state.steps] == [classify(s) for s in state.steps]
        assert {s.verdict for s in state.steps} == {"data-bound", "compute-bound"}
    finally:
        source.close()
        writer.close()
