"""Process rows that count the attribute reads made of them: how often a pass looks at a
machine's ordinary rows, counted rather than timed."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from gputop.core.model import ProcessSample

reads = [0]  # attribute reads of watched rows since a test last set it to 0


class WatchedRow(ProcessSample):
    """A row that counts every attribute read of it."""

    __slots__ = ()

    def __getattribute__(self, name: str) -> Any:
        reads[0] += 1
        return object.__getattribute__(self, name)


def watched(row: ProcessSample) -> WatchedRow:
    """`row`, counting the reads made of it."""
    return WatchedRow(**{f.name: getattr(row, f.name) for f in fields(ProcessSample)})
