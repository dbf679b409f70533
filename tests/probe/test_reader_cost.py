"""The reader's work per read is counted, not timed: a run of adjacent records is decoded
in one call, not one call per record."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.probe import reader as reader_module
from gputop.probe import ring as ring_format
from gputop.probe.reader import RingReader


class CountingStruct:
    """ring_format.RECORD, counting the calls that decode records."""

    def __init__(self, real: struct.Struct) -> None:
        self.real = real
        self.size = real.size
        self.calls = 0

    def unpack_from(self, buffer: bytes, offset: int = 0) -> tuple[int, ...]:
        self.calls += 1
        return self.real.unpack_from(buffer, offset)

    def unpack(self, buffer: bytes) -> tuple[int, ...]:
        self.calls += 1
        return self.real.unpack(buffer)

    def iter_unpack(self, buffer: bytes) -> Iterator[tuple[int, ...]]:
        self.calls += 1
        return self.real.iter_unpack(buffer)


def test_a_tick_of_records_is_decoded_in_one_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = ring_format.RingWriter(ring_format.ring_path(os.getpid(), directory=str(tmp_path)))
    try:
        reader = RingReader(writer.path)
        counting = CountingStruct(ring_format.RECORD)
        monkeypatch.setattr(reader_module.ring_format, "RECORD", counting)
        records: list[tuple[int, ...]] = [
            (s, 1000 * s, 500, 10, -1, 100, 200, 150, -1, -1, 64, 0, 0, 1, 40, -1, 0, 0, 0, 0, 0, 0)
            for s in range(18)]
        writer.append(records)
        read = reader.read_new()
        assert [r.step for r in read] == list(range(18)) and reader.dropped == 0
        assert read[3].h2d_ns == -1 and read[3].forward_ns == 100 and read[3].batch_size == 64
        assert counting.calls <= 1  # one decode of the run, not 18
    finally:
        writer.close()
