"""The ring's part_samples word: the step's stack samples in its host part (low 32 bits) and
its data part (high 32 bits), every function's, written by the probe and read back into the
StepRecord and the JSON; 0 (a probe before the word, which left it zero) reads as unknown."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from gputop.export.snapshot import step_json
from gputop.probe import ring as ring_format
from gputop.probe.reader import RawRecord, RingReader
from gputop.probe.stack_sampler import StackSampler
from gputop.probe.steps import DATA, HOST, Recorder
from gputop.sources.attach import to_step
from tests.helpers.probe import payload


def _read(rec: Recorder) -> tuple[list[RawRecord], dict[str, object]]:
    assert rec.ring is not None
    reader = RingReader(rec.ring.path)
    try:
        return reader.read_new(), reader.read_meta().get(ring_format.META_SITES) or {}
    finally:
        reader.close()


def host_top(sampler: StackSampler) -> None:
    sampler.sample()


def host_second(sampler: StackSampler) -> None:
    sampler.sample()


def data_only(sampler: StackSampler) -> None:
    sampler.sample()


def test_the_probe_writes_each_parts_samples_of_all_its_functions(rec: Recorder) -> None:
    """Host: 2 samples in one function, 1 in another; data: 3 in a third."""
    rec.annotate({})
    sampler = StackSampler(rec, threading.get_ident())
    rec.optimizer_done(1)  # a step opens
    rec.phase_now = HOST
    host_top(sampler)
    host_top(sampler)
    host_second(sampler)
    rec.phase_now = DATA
    for _ in range(3):
        data_only(sampler)
    rec.optimizer_done(1)  # ... and closes
    rec.publish()
    records, sites = _read(rec)
    raw = records[-1]
    assert raw.part_samples == ring_format.part_samples(3, 3) == 3 | 3 << 32
    step = to_step(raw, sites=sites)
    assert (step.host_site_samples, step.host_samples) == (2, 3)
    assert (step.data_site_samples, step.data_samples) == (3, 3)
    assert step.host_site is not None and step.host_site.startswith("host_top (")
    out = step_json(step)
    assert (out["host_samples"], out["data_samples"]) == (3, 3)


def test_the_word_round_trips_through_the_ring(tmp_path: Path) -> None:
    path = ring_format.ring_path(os.getpid(), directory=str(tmp_path))
    writer = ring_format.RingWriter(path)
    words = [ring_format.part_samples(4, 6), ring_format.part_samples(0, 7),
             ring_format.part_samples(1 << 40, 1 << 40), 0]
    try:
        writer.append([payload(step=n, start_ns=n, duration_ns=1, epoch=0, flags=0, loader=0,
                               samples=9, part_samples=word) for n, word in enumerate(words)])
        reader = RingReader(path)
        got = reader.read_new()
        reader.close()
    finally:
        writer.close()
    assert [r.part_samples for r in got] == words and reader.dropped == 0
    parts = [(s.host_samples, s.data_samples) for s in map(to_step, got)]
    most = ring_format.PART_MAX  # a count beyond 31 bits is clamped: the word stays positive
    assert parts == [(4, 6), (0, 7), (most, most), (0, 0)]


def test_a_negative_word_is_a_corrupt_record(tmp_path: Path) -> None:
    path = ring_format.ring_path(os.getpid(), directory=str(tmp_path))
    writer = ring_format.RingWriter(path)
    try:
        writer.append([payload(step=0, start_ns=0, duration_ns=1, epoch=0, flags=0, loader=0,
                               part_samples=-5)])
        reader = RingReader(path)
        got = reader.read_new()
        reader.close()
    finally:
        writer.close()
    assert got == [] and reader.dropped == 1
