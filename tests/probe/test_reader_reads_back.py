"""read_new(newest, kept): a window of the records a reader keeps, read back past those it
does not (a long evaluation's), as far as the ring and the reader's last call allow."""

from __future__ import annotations

from pathlib import Path

from gputop.probe import ring as ring_format
from gputop.probe.reader import RawRecord, RingReader
from tests.helpers.probe import payload


def _record(n: int, other: bool) -> tuple[int, ...]:
    flags = ring_format.F_OTHER if other else ring_format.F_OPTIMIZER
    return payload(step=n, start_ns=n, duration_ns=1, epoch=0, flags=flags,
                   loader=2 if other else 1)


def _trains(raw: RawRecord) -> bool:
    return not raw.flags & ring_format.F_OTHER


def test_the_window_reaches_back_past_records_it_does_not_keep(tmp_path: Path) -> None:
    writer = ring_format.RingWriter(str(tmp_path / "ring"))
    try:
        writer.append([_record(n, other=False) for n in range(30)])
        writer.append([_record(n, other=True) for n in range(30, 130)])
        reader = RingReader(writer.path)
        got = reader.read_new(newest=20, kept=_trains)
        assert [r.step for r in got if _trains(r)] == list(range(10, 30))
        assert [r.step for r in got] == list(range(10, 130))
        assert (reader.skipped, reader.dropped) == (10, 0)
        writer.append([_record(n, other=True) for n in range(130, 160)])
        writer.append([_record(160, other=False)])
        again = reader.read_new(newest=20, kept=_trains)  # never before the last call's end
        assert [r.step for r in again] == list(range(130, 161))
        assert (reader.skipped, reader.dropped) == (10, 0)
        plain = RingReader(writer.path)
        assert [r.step for r in plain.read_new(newest=20)] == list(range(141, 161))
        assert plain.skipped == 141
        reader.close()
        plain.close()
    finally:
        writer.close()


def test_the_window_reaches_back_no_further_than_the_ring(tmp_path: Path) -> None:
    writer = ring_format.RingWriter(str(tmp_path / "ring"))
    try:
        writer.append([_record(n, other=n >= 5) for n in range(ring_format.SLOTS + 50)])
        reader = RingReader(writer.path)
        got = reader.read_new(newest=20, kept=_trains)
        assert [r.step for r in got] == list(range(50, ring_format.SLOTS + 50))
        assert (reader.skipped, reader.dropped) == (0, 0)  # it opened after they went
        reader.close()
    finally:
        writer.close()
