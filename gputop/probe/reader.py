"""Lock-free reader of a trainer's ring: pread only, never maps or writes the trainer's memory.

The file is input, possibly planted by another user: it is opened without following a
symlink or waiting on a FIFO, and checked with fstat (a regular file, its owner, its size)
before a byte is read; every field is bounds-checked, and anything wrong with it becomes a
RingError with one line of text, never another exception.
"""

from __future__ import annotations

import errno
import json
import operator
import os
import stat
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from gputop.probe import ring as ring_format

MAX_VALUE = 1 << 62
GRACE_NS = ring_format.CREATION_GRACE_NS


class RingError(Exception):
    """The ring cannot be read now: missing, being created, truncated (one-line reason)."""


class RingRefused(RingError):
    """The file will never be read as this ring: someone else's, not a regular file, not a
    ring, or not the process's; a listing need not open it again."""


class RingUnfinished(RingError):
    """A file too young to judge: its writer may still be creating the ring. It can be
    judged from `settled_ns` on (wall-clock ns, when the creation grace ends)."""

    def __init__(self, message: str, settled_ns: int) -> None:
        super().__init__(message)
        self.settled_ns = settled_ns


class StaleRing(RingRefused):
    """A ring left by an earlier process that had the same PID."""


@dataclass(frozen=True, slots=True)
class RingHeader:
    """The validated fixed part of a ring's header."""

    pid: int
    start_ticks: int
    start_time_ns: int
    head: int
    slots: int
    uid: int
    namespace: tuple[int, int] | None  # the writer's PID namespace; None: unknown


class RawRecord(NamedTuple):
    """One complete record as the writer published it (-1 = not measured): the slot's
    fields by their ring_format.FIELDS names, with the record's index where the slot has its
    sequence and without the check, so every field sits at its layout index."""

    index: int  # type: ignore[assignment]  # shadows tuple.index(), never called on one
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
    host_ns: int
    sync_ns: int
    samples: int
    host_site: int
    host_site_samples: int
    data_site: int
    data_site_samples: int
    part_samples: int  # host part's samples | data part's << 32 (0: unknown)


assert RawRecord._fields == ("index", *ring_format.PAYLOAD_FIELDS)  # spelled out above for mypy
_always_set = operator.itemgetter(
    ring_format.STEP, ring_format.START_NS, ring_format.DURATION_NS, ring_format.EPOCH,
    ring_format.LOADER)
_MEASURED = slice(ring_format.DATA_NS, ring_format.BATCH_SIZE + 1)
_PARTITION = operator.itemgetter(ring_format.HOST_NS, ring_format.SYNC_NS)
_SAMPLED = slice(ring_format.SAMPLES, ring_format.SAMPLES + len(ring_format.SAMPLED_FIELDS))


class RingReader:
    """Reads new records of one ring across calls and counts the ones it lost."""

    def __init__(
        self, path: str, owner: int | None = None, pid: int | None = None,
        start_ticks: int | None = None,
    ) -> None:
        """Open the ring at `path` only if, before a byte of it is read, it is a regular file
        (no symlink followed, no FIFO waited on) of exactly the ring's size owned by `owner`
        (default: us); then, given `pid` and `start_ticks`, its header must be that process's."""
        self.path = path
        self._fd = _open_nonblocking(path)
        try:
            st = os.fstat(self._fd)
            owner = os.getuid() if owner is None else owner
            self.uid = st.st_uid
            _check_file(st, path, owner, pid, self._fd)
            if _header_unwritten(self._pread(len(ring_format.MAGIC), 0), st):
                raise _unfinished(path, pid, st)
            self.header = self.read_header()
            _check_process(self.header, path, pid, start_ticks)
        except BaseException:
            os.close(self._fd)
            raise
        self.next_index = max(0, self.header.head - self.header.slots)
        self.dropped = 0
        self.skipped = 0
        self._meta_seq = -1
        self._meta: dict[str, Any] = {}

    def read_header(self) -> RingHeader:
        """The header, validated field by field."""
        raw = self._pread(ring_format.NAMESPACE_OFFSET + ring_format.NAMESPACE.size, 0)
        (magic, version, header_size, record_size, slots, pid, ticks, start_time,
         head, _meta_seq, _meta_len) = ring_format.HEADER.unpack_from(raw)
        if magic != ring_format.MAGIC:
            raise RingRefused(f"{self.path} is not a gputop ring")
        if version != ring_format.VERSION:
            raise RingRefused(version_refusal(self.path, version))
        if (header_size, record_size, slots) != (
            ring_format.HEADER_SIZE, ring_format.RECORD_SIZE, ring_format.SLOTS
        ):
            raise RingRefused(f"{self.path} has an unexpected layout")
        if not (0 < pid < 1 << 31) or not (0 <= head < MAX_VALUE) or ticks < 0:
            raise RingRefused(f"{self.path} has a corrupt header")
        size = os.fstat(self._fd).st_size
        if size != ring_format.FILE_SIZE:
            raise RingError(f"{self.path} is truncated ({size} bytes)")
        return RingHeader(pid, ticks, start_time, head, slots, getattr(self, "uid", -1),
                          ring_format.header_namespace(raw))

    def read_new(self, newest: int | None = None,
                 kept: Callable[[RawRecord], bool] | None = None) -> list[RawRecord]:
        """Records published since the last call, oldest first; lost ones add to `dropped`.
        With `newest`, only that many of the latest are read: those before them, still in
        the ring but left unread on purpose, add to `skipped` (a reader that keeps a window
        of that many would drop them at once). With `kept` too, the window is of the records
        it keeps: older ones are read back (newest first, as far as the ring and the last
        call allow) until `newest` of those read are kept.

        `head` is only a hint (a read racing its update may see it torn): a slot whose
        sequence says "not written yet" ends the read, and the next call resumes there.
        """
        self.header = header = self.read_header()
        head, slots = header.head, header.slots
        if head <= self.next_index:
            return []
        first = max(self.next_index, head - slots)
        self.dropped += first - self.next_index
        oldest = first
        if newest is not None and head - first > newest:
            first = head - newest
        self.next_index = first
        out: list[RawRecord] = []
        for lo, hi in _contiguous_slot_runs(first, head, slots):
            if not self._read_run(lo, hi, out):
                break
        if kept is not None and newest is not None and first > oldest:
            have = sum(map(kept, out))
            while have < newest and first > oldest:
                lo, first = first, max(oldest, first - newest)
                older = self._read_back(first, lo)
                have += sum(map(kept, older))
                out[:0] = older
        self.skipped += first - oldest
        return out

    def _read_back(self, lo: int, hi: int) -> list[RawRecord]:
        """Records lo..hi-1, before those the last read_new() began with: one the writer has
        overwritten meanwhile is left out (not counted as lost: it was skipped on purpose)."""
        out: list[RawRecord] = []
        for run_lo, run_hi in _contiguous_slot_runs(lo, hi, ring_format.SLOTS):
            self._read_run(run_lo, run_hi, out, resume=False)
        return out

    def _read_run(self, lo: int, hi: int, out: list[RawRecord], resume: bool = True) -> bool:
        """Records lo..hi-1 from adjacent slots: seqs, payload, seqs again (a seqlock),
        the payload decoded in one call; `resume`: the next call goes on after them, and
        a record lost in them adds to `dropped`.

        Returns False when it met a record not yet written (reading stops there).
        """
        size = ring_format.RECORD_SIZE
        offset = ring_format.HEADER_SIZE + (lo % ring_format.SLOTS) * size
        before = _seqs(self._pread((hi - lo) * size, offset))
        payload = self._pread((hi - lo) * size, offset)
        after = _seqs(self._pread((hi - lo) * size, offset))
        for i, fields in enumerate(ring_format.RECORD.iter_unpack(payload)):
            n = lo + i
            want = 2 * n + 2
            seq_b = after[i]
            if seq_b < want:  # not yet complete: the head we read ran ahead of the slot
                return False
            record = None
            if before[i] == seq_b == want:
                record = _verified(n, fields, payload, i * size)
                if record is None:  # its stores may not all be visible yet: look once more
                    again = self._pread(size, offset + i * size)
                    record = _verified(n, ring_format.RECORD.unpack(again), again, 0)
            if record is not None:
                out.append(record)
            elif resume:
                self.dropped += 1
            if resume:
                self.next_index = n + 1
        return True

    @property
    def meta_written(self) -> bool:
        """Whether the trainer has written its metadata at least once (as of the last read)."""
        return self._meta_seq > 0

    def read_meta(self) -> dict[str, Any]:
        """The annotate() facts; the last good copy when the writer is mid-update."""
        for _ in range(3):
            raw = self._pread(24, ring_format.META_SEQ_OFFSET)
            seq, length, _ = struct.unpack("@qqq", raw)
            if seq == self._meta_seq:
                return self._meta
            if seq % 2 or not 0 <= length <= ring_format.META_CAP:
                continue
            blob = self._pread(length, ring_format.META_OFFSET)
            if ring_format.SEQ.unpack(self._pread(8, ring_format.META_SEQ_OFFSET))[0] != seq:
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


def _open_nonblocking(path: str) -> int:
    """A read-only fd for `path`: never through a symlink, never waiting for a FIFO's writer."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, flags)
    except FileNotFoundError:
        raise RingError(f"no ring at {path}") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RingRefused(f"{path} is a symbolic link: ignored") from None
        raise RingError(f"cannot open ring {path}: {exc.strerror or exc}") from None


def _who(path: str, pid: int | None) -> str:
    return f"ring of PID {pid}" if pid is not None else path


def _young(st: os.stat_result) -> bool:
    return time.time_ns() - st.st_ctime_ns < GRACE_NS


def _check_file(st: os.stat_result, path: str, owner: int, pid: int | None, fd: int) -> None:
    """Refuse what is not a regular file of the ring's size and version owned by `owner`."""
    who = _who(path, pid)
    if not stat.S_ISREG(st.st_mode):
        raise RingRefused(f"{who} ({path}) is not a regular file: ignored")
    if st.st_uid != owner:
        whose = "the process's owner" if pid is not None else "the expected owner"
        raise RingRefused(f"{who} is owned by uid {st.st_uid}, not by {whose} (uid {owner}): "
                          "ignored")
    if st.st_size != ring_format.FILE_SIZE:
        _check_version(fd, path, pid)
        reason = f"{who} has {st.st_size} bytes, not a ring's {ring_format.FILE_SIZE}"
        if st.st_size == 0 and _young(st):  # created, not yet sized
            raise _unfinished(path, pid, st)
        raise RingRefused(reason)


def _check_version(fd: int, path: str, pid: int | None) -> None:
    """Refuse, in one line that says so, a ring another gputop's probe wrote (another layout,
    so another size: checked before the size is, which would only say "bytes")."""
    try:
        raw = os.pread(fd, ring_format.HEADER.size, 0)
    except OSError:
        return
    if len(raw) < ring_format.HEADER.size or raw[: len(ring_format.MAGIC)] != ring_format.MAGIC:
        return
    version = ring_format.HEADER.unpack_from(raw)[1]
    if version != ring_format.VERSION:
        raise RingRefused(version_refusal(_who(path, pid), version))


def version_refusal(who: str, version: int) -> str:
    """One line on a ring of another layout: an older gputop's probe, or a newer one's."""
    if 0 < version < ring_format.VERSION:
        return (f"{who} was written by the probe of an older gputop (ring version {version}, "
                f"this gputop reads {ring_format.VERSION}): restart the trainer under this "
                "gputop's probe, or watch it with the gputop it runs under")
    return (f"{who} has ring version {version}, which this gputop does not read (it reads "
            f"{ring_format.VERSION}): a newer gputop's probe wrote it")


def _unfinished(path: str, pid: int | None, st: os.stat_result) -> RingUnfinished:
    return RingUnfinished(f"{_who(path, pid)} is still being created", st.st_ctime_ns + GRACE_NS)


def _header_unwritten(magic: bytes, st: os.stat_result) -> bool:
    """A young ring whose writer has not written the header yet (all zeros so far)."""
    return magic == bytes(len(magic)) and _young(st)


def _check_process(header: RingHeader, path: str, pid: int | None, ticks: int | None) -> None:
    """Refuse a ring whose header is not the live process's (its PID and start ticks)."""
    if pid is not None and header.pid != pid:
        raise RingRefused(f"{_who(path, pid)} was written by PID {header.pid}: ignored")
    if ticks is not None and header.start_ticks != ticks:
        if not header.start_ticks:  # its writer could not read its own start: never stale
            raise RingRefused(f"{_who(path, pid)} carries no start time: ignored")
        raise StaleRing(f"{_who(path, pid)} was left by an earlier process with that PID")


def _contiguous_slot_runs(first: int, end: int, slots: int) -> list[tuple[int, int]]:
    """Split record indices first..end-1 where the ring wraps."""
    runs = []
    while first < end:
        stop = min(end, first + slots - first % slots)
        runs.append((first, stop))
        first = stop
    return runs


def _seqs(raw: bytes) -> memoryview:
    """The sequence word of each record in `raw`, adjacent slots' bytes."""
    return memoryview(raw).cast("q")[:: ring_format.RECORD_WORDS]


def _verified(index: int, fields: tuple[int, ...], raw: bytes, at: int) -> RawRecord | None:
    """Record `index` (`fields`, decoded from the slot bytes at `at`), if its sequence and
    check say it is complete and its own, and every field is in range."""
    start = at + ring_format.PAYLOAD_OFFSET
    check = ring_format.record_check(index, raw[start : start + ring_format.PAYLOAD_SIZE])
    if fields[0] != 2 * index + 2 or fields[ring_format.CHECK_WORD] != check:
        return None
    return _checked(index, fields)


def _checked(index: int, f: tuple[int, ...]) -> RawRecord | None:
    """A record whose fields are all in range, else None (counted as dropped)."""
    always = _always_set(f)
    if min(always) < 0 or max(always) >= MAX_VALUE or not 0 <= f[ring_format.FLAGS] < 256:
        return None
    measured = f[_MEASURED]
    if min(measured) < -1 or max(measured) >= MAX_VALUE:
        return None
    if min(_PARTITION(f)) < -1 or max(_PARTITION(f)) >= MAX_VALUE:
        return None
    sampled = f[_SAMPLED]
    if min(sampled) < 0 or max(sampled) >= MAX_VALUE or f[ring_format.PART_SAMPLES] < 0:
        return None
    return RawRecord(index, *f[ring_format.STEP : ring_format.CHECK_WORD])


def _parse_meta(blob: bytes) -> dict[str, Any]:
    """The metadata JSON object, or {} when it is not one."""
    try:
        value = json.loads(blob.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}
