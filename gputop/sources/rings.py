"""Which ring files to believe, and for which live process (DESIGN.md "Trust boundaries").

Anyone may create files in /dev/shm, so a ring's name proves nothing. A ring is read only
when the uid in its name owns the live process (and is ours, unless we are root), the file
is a regular file of the ring's size owned by that uid, and its header carries the
process's PID and start ticks. A listing drops other users' names before any syscall of
their own (unless we are root) and remembers each refused file by (inode, pid), so planted
files cost one look each, not one per tick.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from gputop.probe import ring as layout
from gputop.probe.reader import RingError, RingReader, RingRefused, StaleRing
from gputop.sources.procfs import read_bytes

# A directory changed this recently may change again within the same timestamp (the kernel
# stamps with a coarse clock): it is listed again until its last change is older than this.
SETTLED_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class RingName:
    """A directory entry named like a ring, and what its name claims."""

    path: str
    uid: int
    pid: int
    inode: int


def ring_names(directory: str) -> list[RingName]:
    """The entries of `directory` named like rings (one scandir); unless we are root, names
    that claim another uid are dropped here, without a syscall each."""
    me = os.getuid()
    found = []
    prefix = layout.NAME_PREFIX
    try:
        with os.scandir(directory) as entries:  # /dev/shm holds hundreds of other files
            for entry in [e for e in entries if e.name.startswith(prefix)]:
                parsed = layout.parse_name(entry.name)
                if parsed is not None and (me == 0 or parsed[0] == me):
                    found.append(RingName(entry.path, parsed[0], parsed[1], entry.inode()))
    except OSError:
        return []
    return sorted(found, key=lambda name: (len(name.path), name.path))  # plain names first


def process_owner(pid: int) -> int | None:
    """The real uid of process `pid` (from /proc/PID/status), None when it is gone."""
    for line in (read_bytes(f"/proc/{pid}/status") or b"").splitlines():
        if line.startswith(b"Uid:"):
            fields = line.split()
            return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
    return None


def open_ring(name: RingName, ticks: int) -> RingReader:
    """The ring `name`, opened once it passes every check against its live process (which
    started at `ticks`); RingError says in one line why not."""
    pid = name.pid
    owner = process_owner(pid)
    if owner is None:
        raise RingError(f"no process with PID {pid}")
    me = os.getuid()
    if me not in (0, owner):
        raise RingRefused(f"PID {pid} belongs to uid {owner}: only that user or root reads "
                          "its ring")
    if name.uid != owner:
        raise RingRefused(f"ring of PID {pid} is named for uid {name.uid}, but the process's "
                          f"owner is uid {owner}: ignored")
    return RingReader(name.path, owner=owner, pid=pid, start_ticks=ticks)


class RingDirectory:
    """The rings of one directory that pass the checks, as of the last `scan()`."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory
        self.rings: dict[int, RingName] = {}  # live PID -> its ring
        self.refusals: dict[int, str] = {}  # PID -> why a ring named for it was refused
        self._trusted: dict[tuple[int, int], int] = {}  # (inode, pid) -> the ticks it matched
        self._refused: dict[tuple[int, int], str] = {}  # (inode, pid) -> why, for good
        self.leftovers: list[RingName] = []  # our rings whose process is gone, as last listed
        self._listed: tuple[tuple[str, int, int, int], list[RingName]] | None = None

    def path(self) -> str:
        """The directory: as given, else $GPUTOP_RING_DIR or /dev/shm."""
        return self.directory or layout.ring_dir()

    def scan(self) -> None:
        """List the directory once and check each ring not judged before; files refused for
        good are not opened again. Rings of our own dead trainers are noted in `leftovers`,
        not removed (that is `remove_leftovers()`)."""
        rings: dict[int, RingName] = {}
        refusals: dict[int, str] = {}
        trusted: dict[tuple[int, int], int] = {}
        refused: dict[tuple[int, int], str] = {}
        leftovers: list[RingName] = []
        for name in self._names():
            key = (name.inode, name.pid)
            reason = self._refused.get(key)
            if reason is not None:
                refused[key] = reason
                refusals.setdefault(name.pid, reason)
                continue
            ticks = layout.start_ticks(name.pid)
            if ticks is None:  # a dead trainer's ring, or a name planted for no process
                if _is_ours(name):
                    leftovers.append(name)
                else:
                    refused[key] = f"no process with PID {name.pid}"
                continue
            if self._trusted.get(key) != ticks:
                try:
                    open_ring(name, ticks).close()
                except RingRefused as exc:  # for good (a stale ring of ours is a leftover)
                    if isinstance(exc, StaleRing) and _is_ours(name):
                        leftovers.append(name)
                    else:
                        refused[key] = str(exc)
                        refusals.setdefault(name.pid, str(exc))
                    continue
                except RingError as exc:  # may pass later: a ring still being created
                    refusals.setdefault(name.pid, str(exc))
                    continue
            trusted[key] = ticks
            rings.setdefault(name.pid, name)
        self.rings, self.refusals, self.leftovers = rings, refusals, leftovers
        self._trusted, self._refused = trusted, refused

    def _names(self) -> list[RingName]:
        """The directory's ring names, listed again only when its mtime moved (or moved so
        lately that a later change could carry the same stamp): /dev/shm holds hundreds of
        other files (semaphores, NCCL and torch segments), and listing them every tick
        cost more than the rest of attaching."""
        path = self.path()
        try:
            st = os.stat(path)
        except OSError:
            self._listed = None
            return []
        stamp = (path, st.st_dev, st.st_ino, st.st_mtime_ns)
        if self._listed is not None and self._listed[0] == stamp:
            return self._listed[1]
        names = ring_names(path)
        settled = time.time_ns() - st.st_mtime_ns > SETTLED_NS
        self._listed = (stamp, names) if settled else None
        return names

    def remove_leftovers(self) -> None:
        """Unlink the leftovers of the last scan that are still the files it judged (the
        same inode, still ours): a name taken again since then is left alone."""
        for name in self.leftovers:
            try:
                st = os.lstat(name.path)
                if st.st_ino == name.inode and st.st_uid == os.getuid():
                    os.unlink(name.path)
            except OSError:  # someone else removed it first
                continue
        self.leftovers = []

    def open(self, pid: int) -> RingReader:
        """`pid`'s ring as the last scan found it, checked again as it is opened."""
        name = self.rings.get(pid)
        if name is None:
            raise RingError(self.refusals.get(pid) or f"PID {pid} has no probe ring yet")
        ticks = layout.start_ticks(pid)
        if ticks is None:
            raise RingError(f"no process with PID {pid}")
        return open_ring(name, ticks)


def _is_ours(name: RingName) -> bool:
    """Whether the ring `name` is ours: its name claims our uid, and lstat proves it."""
    me = os.getuid()
    if name.uid != me:
        return False
    try:
        return os.lstat(name.path).st_uid == me
    except OSError:  # gone already
        return False
