"""The ring file's layout and its single writer: fixed-size step records in shared memory.

Layout (native byte order, every field 8-byte aligned):
  header  HEADER_SIZE bytes: fixed fields, then the annotate() metadata area (JSON)
  slots   SLOTS records of RECORD_SIZE bytes; record n lives in slot n % SLOTS

A slot's first field is its sequence number: 2n+1 while record n is being written,
2n+2 once it is complete; its last is a CRC-32 of the payload seeded with n. `head`
counts completed records. Readers never lock, and they trust a record only when its
sequence and check both match: Python has no memory barrier, and on a weakly ordered
CPU (aarch64) a reader may see the new sequence before the payload it guards; the
check catches that (and a stale payload under a new sequence), where the seqlock alone
relies on x86's store order.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from zlib import crc32

MAGIC = b"GPUTOPRG"
VERSION = 3  # 3: the step's partition and stack samples; 2: a check ends the record (1: zero)
HEADER_SIZE = 4096
SLOTS = 1024
META_OFFSET = 128
META_CAP = HEADER_SIZE - META_OFFSET
NONE = -1
ENV_DIR = "GPUTOP_RING_DIR"
DEFAULT_DIR = "/dev/shm"
SUFFIX_MAX = 32  # hex digits of a second name's suffix
SECOND_NAME_TRIES = 8
CREATION_GRACE_NS = 5_000_000_000  # a file this young may be a ring its writer is still creating

# magic, version, header_size, record_size, slots, pid, start_ticks, start_time_ns,
# head, meta_seq, meta_len
HEADER = struct.Struct("@8sqqqqqqqqqq")
HEAD_OFFSET = struct.calcsize("@8sqqqqqqq")
META_SEQ_OFFSET = HEAD_OFFSET + 8
META_LEN_OFFSET = HEAD_OFFSET + 16
# The writer's PID namespace, (st_dev, st_ino) of /proc/self/ns/pid, in words the version 2
# header left zero (every writer before this field leaves them so): zero = unknown, and the
# header's pid means something only in that namespace. No version bump: an older reader
# still reads the ring, and a zero is what "unknown" needs anyway.
NAMESPACE = struct.Struct("@QQ")
NAMESPACE_OFFSET = HEADER.size

# The step record, word by word (int64 each): its one declaration. The structs, the index
# constants below, the reader's RawRecord, the probe's phase order and StepRecord's fields
# follow these names (tests/test_step_record.py ties them together).
FIELDS = (
    "seq", "step", "start_ns", "duration_ns", "data_ns", "h2d_ns", "forward_ns",
    "backward_ns", "optimizer_ns", "gpu_ns", "gpu_gap_ns", "batch_size", "epoch",
    "flags", "loader", "host_ns", "sync_ns", "samples", "host_site", "host_site_samples",
    "data_site", "data_site_samples", "part_samples", "check",
)
PAYLOAD_FIELDS = FIELDS[1:-1]  # what the writer packs and the check covers
STEP = FIELDS.index("step")
START_NS = FIELDS.index("start_ns")
DURATION_NS = FIELDS.index("duration_ns")
DATA_NS = FIELDS.index("data_ns")
BATCH_SIZE = FIELDS.index("batch_size")
EPOCH = FIELDS.index("epoch")
FLAGS = FIELDS.index("flags")
LOADER = FIELDS.index("loader")
HOST_NS = FIELDS.index("host_ns")
SYNC_NS = FIELDS.index("sync_ns")
SAMPLES = FIELDS.index("samples")
# The stack sampler's words: sample counts, and sites as ids of the metadata's META_SITES table
# (0: no site)
SAMPLED_FIELDS = FIELDS[SAMPLES : FIELDS.index("data_site_samples") + 1]
# The step's samples in its host part (low 32 bits) and in its data part (high 32 bits), all
# their sites; 0: unknown (a probe before this word, which it left zero as "reserved")
PART_SAMPLES = FIELDS.index("part_samples")
PART_MAX = (1 << 31) - 1  # a part's count is clamped to this: the word stays positive
PART_MASK = (1 << 32) - 1
CHECK_WORD = FIELDS.index("check")
MEASURED_FIELDS = FIELDS[DATA_NS : BATCH_SIZE + 1]  # NONE when the probe did not measure it
RECORD = struct.Struct(f"@{len(FIELDS)}q")
RECORD_SIZE = RECORD.size
RECORD_WORDS = len(FIELDS)
PAYLOAD = struct.Struct(f"@{len(PAYLOAD_FIELDS)}q")
PAYLOAD_OFFSET = 8
PAYLOAD_SIZE = PAYLOAD.size
SEQ = struct.Struct("@q")
HEAD_WORD = HEAD_OFFSET // 8
FILE_SIZE = HEADER_SIZE + SLOTS * RECORD_SIZE

F_WARMUP = 1  # among the first steps of its epoch
F_OPTIMIZER = 2  # enclosed an optimizer step or a backward pass: its loader trains
F_OTHER = 4  # belongs to a loader known not to be the training loader
F_IMPLICIT = 8  # opened by a phase or an optimizer step, not by a loader
# data_ns is the host time from the previous optimizer step's end to the first forward of the
# model the optimizers step (a loop without a DataLoader, e.g. its own get_batch): input
# outside the model (data, host-to-device copy, loop overhead), not a DataLoader's wait
F_INPUT_OUTSIDE_MODEL = 16
# closed where the next backward pass began: the program has stepped no optimizer (it updates
# its parameters by hand, as pytorch/examples' word_language_model does) and no loader opened
# the step, so a step runs from one backward's start to the next's (the update in between)
F_AT_BACKWARD = 32
# the metadata key under which the probe says what it saw while no step has closed yet
META_STATUS = "probe_status"
# the metadata key of the stack sampler's site table: {"ID": "function (file:line)"}
META_SITES = "sites"
META_SAMPLER = "sampler"  # the stack sampler's trigger: "signal" or "thread"
WAITING = " waiting in "  # in a site's text: between the site and the blocking wait it called
NO_SITE = 0

assert NAMESPACE_OFFSET + NAMESPACE.size <= META_OFFSET and RECORD_SIZE % 64 == 0
assert PAYLOAD_OFFSET + PAYLOAD.size == CHECK_WORD * 8


def part_samples(host: int, data: int) -> int:
    """The part_samples word of a step with `host` and `data` samples in those parts."""
    return min(host, PART_MAX) | min(data, PART_MAX) << 32


def record_check(index: int, payload: bytes) -> int:
    """The check of record `index`: CRC-32 of its payload, seeded with the index."""
    return crc32(payload, index & 0xFFFFFFFF)


NAME_PREFIX = "gputop-"  # every ring's file name starts so


def ring_dir() -> str:
    """Where rings live: $GPUTOP_RING_DIR or /dev/shm."""
    return os.environ.get(ENV_DIR) or DEFAULT_DIR


def ring_path(pid: int, uid: int | None = None, directory: str | None = None) -> str:
    """The ring file of `pid`, named so a reader finds it by pid and uid."""
    uid = os.getuid() if uid is None else uid
    return os.path.join(directory or ring_dir(), f"{NAME_PREFIX}{uid}-{pid}.ring")


def second_name(path: str) -> str:
    """Another name for the ring at `path` when someone else holds that one: the same
    gputop-UID-PID prefix with a random suffix (readers trust the header, not the name)."""
    stem = path[:-5] if path.endswith(".ring") else path
    return f"{stem}-{os.urandom(6).hex()}.ring"


def parse_name(name: str) -> tuple[int, int] | None:
    """(uid, pid) from a ring file name (gputop-UID-PID.ring or gputop-UID-PID-HEX.ring),
    or None when the name is not a ring's."""
    if not (name.startswith(NAME_PREFIX) and name.endswith(".ring")):
        return None
    parts = name[7:-5].split("-")
    if len(parts) == 3 and 0 < len(parts[2]) <= SUFFIX_MAX and _is_hex(parts[2]):
        parts.pop()
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() and len(p) < 11 for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks since boot, the same in every PID
    namespace); None when gone or a zombie."""
    return _stat_ticks(f"/proc/{pid}/stat")


def own_start_ticks() -> int | None:
    """This process's start ticks, through /proc/self (right even where /proc numbers
    processes in another PID namespace than ours)."""
    return _stat_ticks("/proc/self/stat")


def _stat_ticks(path: str) -> int | None:
    try:
        with open(path, "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):
            return None
        return int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def pid_namespace() -> tuple[int, int] | None:
    """This process's PID namespace as (st_dev, st_ino) of /proc/self/ns/pid (how namespaces(7)
    tells two apart); None when it cannot be read."""
    try:
        st = os.stat("/proc/self/ns/pid")
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if st.st_ino else None


def header_namespace(raw: bytes) -> tuple[int, int] | None:
    """The writer's PID namespace from a header's bytes (at least NAMESPACE_OFFSET +
    NAMESPACE.size of them); None when it is unknown (zero)."""
    dev, ino = NAMESPACE.unpack_from(raw, NAMESPACE_OFFSET)
    return (dev, ino) if ino else None


class RingWriter:
    """Creates the ring for this process and appends records; never blocks or allocates.

    When another file holds `path`, the ring gets a second name of its own: `path` is where
    it is, and `squatter` the path it could not take and that file's owner uid when that is
    another user (a file of ours there is a ring of another PID namespace: no one to warn).
    """

    def __init__(self, path: str) -> None:
        self.pid = os.getpid()
        fd, self.path, self.squatter = _create(path)
        try:
            os.fchmod(fd, 0o600)
            os.posix_fallocate(fd, 0, FILE_SIZE)  # a full tmpfs fails here, not with SIGBUS later
            self._mm = mmap.mmap(fd, FILE_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            _remove_created(self.path)
            raise
        os.close(fd)
        HEADER.pack_into(
            self._mm, 0, bytes(len(MAGIC)), VERSION, HEADER_SIZE, RECORD_SIZE, SLOTS, self.pid,
            own_start_ticks() or 0, time.time_ns(), 0, 0, 0,
        )
        NAMESPACE.pack_into(self._mm, NAMESPACE_OFFSET, *(pid_namespace() or (0, 0)))
        # The magic last: a reader that sees it sees the whole header (stores are not
        # reordered on the CPUs this runs on), before it the header reads as unwritten.
        self._mm[: len(MAGIC)] = MAGIC
        self._words = memoryview(self._mm).cast("q")
        first = HEADER_SIZE // 8
        self._slots = [
            self._words[first + k * RECORD_WORDS : first + (k + 1) * RECORD_WORDS]
            for k in range(SLOTS)
        ]
        self._head = 0
        self._meta_seq = 0
        self.closed = False

    def append(self, records: list[tuple[int, ...]]) -> None:
        """Write and publish records, each a tuple of PAYLOAD_FIELDS' values in that order
        (NONE = -1 for an unmeasured field)."""
        pack, check, mm, slots = PAYLOAD.pack, record_check, self._mm, self._slots
        n = self._head
        for record in records:
            k = n % SLOTS
            payload = pack(*record)
            r = slots[k]
            r[0] = 2 * n + 1
            start = HEADER_SIZE + k * RECORD_SIZE + PAYLOAD_OFFSET
            mm[start : start + PAYLOAD_SIZE] = payload
            r[CHECK_WORD] = check(n, payload)
            r[0] = 2 * n + 2
            n += 1
        self._head = n
        self._words[HEAD_WORD] = n

    def set_meta(self, blob: bytes) -> None:
        """Replace the metadata area (bounded JSON); readers retry around its sequence."""
        blob = blob[:META_CAP]
        mm = self._mm
        self._meta_seq += 1
        SEQ.pack_into(mm, META_SEQ_OFFSET, 2 * self._meta_seq - 1)
        mm[META_OFFSET : META_OFFSET + len(blob)] = blob
        SEQ.pack_into(mm, META_LEN_OFFSET, len(blob))
        SEQ.pack_into(mm, META_SEQ_OFFSET, 2 * self._meta_seq)

    def unlink(self) -> None:
        """Remove the file when this process created it (no lock: a signal handler may call
        this; forked children inherit the writer but never the file)."""
        if os.getpid() == self.pid:
            _remove_created(self.path)

    def close(self, unlink: bool = True) -> None:
        """Unmap, and unlink the file when this process created it."""
        if self.closed:
            return
        self.closed = True
        if unlink:
            self.unlink()
        for view in self._slots:
            view.release()
        self._words.release()
        try:
            self._mm.close()
        except (BufferError, ValueError):  # a buffer still exported: the mapping goes at exit
            return


def _create(path: str) -> tuple[int, str, tuple[str, int] | None]:
    """Open a new ring file exclusively: at `path` (replacing a stale one of ours), else at a
    second name of our own. Returns the fd, its path, and (path, owner uid) of another
    user's file that kept us from `path`, if one did."""
    try:
        return _create_at(path), path, None
    except FileExistsError:
        holder = _owner(path)
    if holder == os.getuid() and _is_stale(path):
        _unlink_quietly(path)
        try:
            return _create_at(path), path, None
        except FileExistsError:
            holder = _owner(path)
    squatter = (path, holder) if holder != os.getuid() else None
    for _ in range(SECOND_NAME_TRIES - 1):
        other = second_name(path)
        try:
            return _create_at(other), other, squatter
        except FileExistsError:
            continue
    other = second_name(path)
    return _create_at(other), other, squatter


def _create_at(path: str) -> int:
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    _created[path] = os.getpid()  # before anything else: a SIGTERM may come from here on
    return fd


# Ring files this process created and has not removed, for a signal handler to unlink while
# the writer that owns one is still being made.
_created: dict[str, int] = {}


def unlink_created() -> None:
    """Remove every ring file this process created (none in a forked child); no lock, so a
    signal handler may call it."""
    me = os.getpid()
    for path, pid in list(_created.items()):
        if pid == me:
            _remove_created(path)


def _remove_created(path: str) -> None:
    """Unlink a ring file this process created, and forget it: the name may be another's
    next."""
    _unlink_quietly(path)
    _created.pop(path, None)


def _owner(path: str) -> int:
    """The uid owning the file at `path` (not following a symlink), -1 when it is gone."""
    try:
        return os.lstat(path).st_uid
    except OSError:
        return -1


def _is_stale(path: str) -> bool:
    """True when our file at `path` is provably no one's live ring: one an earlier process
    of our PID namespace with our PID wrote, or no ring at all and older than a writer takes
    to write its header. A ring of another namespace (whose trainer has our PID there) or of
    an unknown one is kept. Never blocks on a FIFO."""
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(path, flags)
        try:
            st = os.fstat(fd)
            raw = os.pread(fd, NAMESPACE_OFFSET + NAMESPACE.size, 0)
        finally:
            os.close(fd)
    except OSError:
        return False
    if raw[: len(MAGIC)] != MAGIC:
        return time.time_ns() - st.st_mtime_ns > CREATION_GRACE_NS
    if len(raw) < NAMESPACE_OFFSET + NAMESPACE.size:
        return False
    fields = HEADER.unpack_from(raw)
    ours = pid_namespace()
    return bool(
        fields[1] == VERSION and ours is not None and header_namespace(raw) == ours
        and fields[5] == os.getpid() and fields[6] != own_start_ticks()
    )


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:  # already gone
        return
