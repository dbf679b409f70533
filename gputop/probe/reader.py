"""Lock-free reader of a trainer's ring: pread only, never maps or writes the trainer's memory.

The file is input: every field is bounds-checked, and anything wrong with it becomes a
RingError with one line of text, never another exception.
"""

from __future__ import annotations

import json
import os
import stat
import struct
from dataclasses import dataclass
from typing import Any

from gputop.probe import ring as layout

MAX_VALUE = 1 << 62


class RingError(Exception):
    """The ring cannot be read: missing, foreign, truncated or corrupt (one-line reason)."""


@dataclass(frozen=True, slots=True)
class RingHeader:
    """The validated fixed part of a ring's header."""

    pid: int
    start_ticks: int
    start_time_ns: int
    head: int
    slots: int
    uid: int


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One complete record as the writer published it (-1 = not measured)."""

    index: int
    step: int
    start_ns: int
    duration_ns: int
    data_ns: int
    h2d_ns: int
    forward_ns: int
    backward_ns: int
    optimizer_ns: int
    gpu_ns: int
    gpu_gap_ns: int
    batch_size: int
    epoch: int
    flags: int
    loader: int


class RingReader:
    """Reads new records of one ring across calls and counts the ones it lost."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise RingError(f"no ring at {path}") from None
        except OSError as exc:
            raise RingError(f"cannot open ring {path}: {exc.strerror or exc}") from None
        try:
            st = os.fstat(self._fd)
            if not stat.S_ISREG(st.st_mode):
                raise RingError(f"{path} is not a regular file")
            self.uid = st.st_uid
            self.header = self.read_header()
        except BaseException:
            os.close(self._fd)
            raise
        self.next_index = max(0, self.header.head - self.header.slots)
        self.dropped = 0
        self._meta_seq = -1
        self._meta: dict[str, Any] = {}

    def read_header(self) -> RingHeader:
        """The header, validated field by field."""
        raw = self._pread(layout.HEADER.size, 0)
        (magic, version, header_size, record_size, slots, pid, ticks, start_time,
         head, _meta_seq, _meta_len) = layout.HEADER.unpack(raw)
        if magic != layout.MAGIC:
            raise RingError(f"{self.path} is not a gputop ring")
        if version != layout.VERSION:
            raise RingError(f"{self.path} has ring version {version}, expected {layout.VERSION}")
        if (header_size, record_size, slots) != (
            layout.HEADER_SIZE, layout.RECORD_SIZE, layout.SLOTS
        ):
            raise RingError(f"{self.path} has an unexpected layout")
        if not (0 < pid < 1 << 31) or not (0 <= head < MAX_VALUE) or ticks < 0:
            raise RingError(f"{self.path} has a corrupt header")
        size = os.fstat(self._fd).st_size
        if size < layout.FILE_SIZE:
            raise RingError(f"{self.path} is truncated ({size} bytes)")
        return RingHeader(pid, ticks, start_time, head, slots, getattr(self, "uid", -1))

    def read_new(self) -> list[RawRecord]:
        """Records published since the last call, oldest first; lost ones add to `dropped`.

        `head` is only a hint (a read racing its update may see it torn): a slot whose
        sequence says "not written yet" ends the read, and the next call resumes there.
        """
        self.header = header = self.read_header()
        head, slots = header.head, header.slots
        if head <= self.next_index:
            return []
        first = max(self.next_index, head - slots)
        self.dropped += first - self.next_index
        self.next_index = first
        out: list[RawRecord] = []
        for lo, hi in _contiguous_slot_runs(first, head, slots):
            if not self._read_run(lo, hi, out):
                break
        return out

    def _read_run(self, lo: int, hi: int, out: list[RawRecord]) -> bool:
        """Records lo..hi-1 from adjacent slots: seqs, payload, seqs again (a seqlock).

        Returns False when it met a record not yet written (reading stops there).
        """
        size = layout.RECORD_SIZE
        offset = layout.HEADER_SIZE + (lo % layout.SLOTS) * size
        before = self._pread((hi - lo) * size, offset)
        payload = self._pread((hi - lo) * size, offset)
        after = self._pread((hi - lo) * size, offset)
        for i in range(hi - lo):
            n = lo + i
            want = 2 * n + 2
            seq_b = layout.SEQ.unpack_from(after, i * size)[0]
            if seq_b < want:  # not yet complete: the head we read ran ahead of the slot
                return False
            seq_a = layout.SEQ.unpack_from(before, i * size)[0]
            record = None
            if seq_a == seq_b == want:
                record = _verified(n, payload, i * size)
                if record is None:  # its stores may not all be visible yet: look once more
                    record = _verified(n, self._pread(size, offset + i * size), 0)
            if record is None:
                self.dropped += 1
            else:
                out.append(record)
            self.next_index = n + 1
        return True

    def read_meta(self) -> dict[str, Any]:
        """The annotate() facts; the last good copy when the writer is mid-update."""
        for _ in range(3):
            raw = self._pread(24, layout.META_SEQ_OFFSET)
            seq, length, _ = struct.unpack("@qqq", raw)
            if seq == self._meta_seq:
                return self._meta
            if seq % 2 or not 0 <= length <= layout.META_CAP:
                continue
            blob = self._pread(length, layout.META_OFFSET)
            if layout.SEQ.unpack(self._pread(8, layout.META_SEQ_OFFSET))[0] != seq:
                continue
            self._meta_seq = seq
            self._meta = _parse_meta(blob)
            return self._meta
        return self._meta

    def _pread(self, size: int, offset: int) -> bytes:
        try:
            raw = os.pread(self._fd, size, offset)
        except OSError as exc:
            raise RingError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        if len(raw) != size:
            raise RingError(f"{self.path} is truncated")
        return raw

    def close(self) -> None:
        """Release the file descriptor."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _contiguous_slot_runs(first: int, end: int, slots: int) -> list[tuple[int, int]]:
    """Split record indices first..end-1 where the ring wraps."""
    runs = []
    while first < end:
        stop = min(end, first + slots - first % slots)
        runs.append((first, stop))
        first = stop
    return runs


def _verified(index: int, raw: bytes, at: int) -> RawRecord | None:
    """Record `index` from the slot bytes at `at`, if its sequence and check say it is
    complete and its own, and every field is in range."""
    fields = layout.RECORD.unpack_from(raw, at)
    start = at + layout.PAYLOAD_OFFSET
    check = layout.record_check(index, raw[start : start + layout.PAYLOAD_SIZE])
    if fields[0] != 2 * index + 2 or fields[layout.CHECK_WORD] != check:
        return None
    return _checked(index, fields)


def _checked(index: int, f: tuple[int, ...]) -> RawRecord | None:
    """A record whose fields are all in range, else None (counted as dropped)."""
    step, start, duration, epoch, flags, loader = f[1], f[2], f[3], f[12], f[13], f[14]
    if not all(0 <= v < MAX_VALUE for v in (step, start, duration, epoch, loader)):
        return None
    if not 0 <= flags < 256 or any(not -1 <= v < MAX_VALUE for v in f[4:12]):
        return None
    return RawRecord(index, step, start, duration, f[4], f[5], f[6], f[7], f[8], f[9], f[10],
                     f[11], epoch, flags, loader)


def _parse_meta(blob: bytes) -> dict[str, Any]:
    """The metadata JSON object, or {} when it is not one."""
    try:
        value = json.loads(blob.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}
