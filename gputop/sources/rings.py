"""Which ring files to believe, and for which live process (DESIGN.md "Trust boundaries").

Anyone may create files in /dev/shm, so a ring's name proves nothing. A ring is read only
when the uid in its name owns the live process (and is ours, unless we are root), the file
is a regular file of the ring's size owned by that uid, and its header carries the
process's PID and start ticks. A listing drops other users' names before any syscall of
their own (unless we are root) and remembers each refused file by (inode, pid), so planted
files cost one look each, not one per tick.

/dev/shm is shared across PID namespaces (containers run with --ipc=host), and a PID means
something only in its namespace, which the header records. A ring of another namespace is
found under the PID /proc gives its process (through /proc/PID/status's NSpid), never by
its number; one whose process we cannot see is left alone. A ring is removed only when its
header proves it of our namespace and its process gone (or another by start ticks): a
ring whose header names no namespace (a probe before the field) is never removed.

A container with a private /dev/shm (Docker's default) keeps its trainer's ring there: for a
PID attached to by name, the /dev/shm its process sees is listed too, reached through
/proc/PID/root with no symlink followed on the way (the container chose them, and one would
resolve against our root), its rings under the same checks.
"""

from __future__ import annotations

import os
import select
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from gputop.probe import ring as ring_format
from gputop.probe.reader import RingError, RingReader, RingRefused, RingUnfinished
from gputop.sources.dirwatch import PrefixWatch
from gputop.sources.procfs import read_bytes

# A directory changed this recently may change again within the same timestamp (the kernel
# stamps with a coarse clock): it is listed again until its last change is older than this.
SETTLED_NS = 1_000_000_000
# A watch reads every event in the directory (DataLoader workers make and unlink a shared-memory
# file per batch: two events each) where a listing reads every entry. With caches gone cold
# between scans, a listing and a read of the events cost about the same fixed amount, and the
# events add a little per event: a directory whose events since the last scan outnumber its
# entries by more than LISTING_EVENTS is cheaper to list (when its mtime moves) than to watch,
# and is watched again REWATCH_SCANS scans later, in case it quietened.
EVENT_BYTES = 48  # an event on a name of 17 to 32 bytes, as a worker's torch_PID_N_I
LISTING_EVENTS = 500
REWATCH_SCANS = 60


@dataclass(frozen=True, slots=True)
class RingName:
    """A directory entry named like a ring, and what its name claims."""

    path: str
    uid: int
    pid: int
    inode: int


def ring_names(directory: str) -> tuple[list[RingName], int]:
    """The entries of `directory` named like rings (one scandir), and how many entries it
    holds; unless we are root, names that claim another uid are dropped here, without a
    syscall each."""
    me = os.getuid()
    found = []
    prefix = ring_format.NAME_PREFIX
    try:
        with os.scandir(directory) as scan:  # /dev/shm may hold hundreds of other files
            entries = list(scan)
        for entry in [e for e in entries if e.name.startswith(prefix)]:
            parsed = ring_format.parse_name(entry.name)
            if parsed is not None and (me == 0 or parsed[0] == me):
                found.append(RingName(entry.path, parsed[0], parsed[1], entry.inode()))
    except OSError:
        return [], 0
    found.sort(key=lambda name: (len(name.path), name.path))  # plain names first
    return found, len(entries)


def process_owner(pid: int) -> int | None:
    """The real uid of process `pid` (from /proc/PID/status), None when it is gone."""
    for line in (read_bytes(f"/proc/{pid}/status") or b"").splitlines():
        if line.startswith(b"Uid:"):
            fields = line.split()
            return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
    return None


Namespace = tuple[int, int]  # a PID namespace: (st_dev, st_ino) of /proc/PID/ns/pid


@dataclass(frozen=True, slots=True)
class TrustedRing:
    """A ring that passed the checks, and the PID namespace its header names (None:
    unknown); its name's PID is the process's PID in that namespace."""

    name: RingName
    namespace: Namespace | None


_BENEATH = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def private_shm(pid: int) -> int | None:
    """A directory fd on the /dev/shm process `pid` sees, when that is not the one we see
    (a container's own); None where it is ours, or cannot be reached without a symlink."""
    fds: list[int] = []
    try:
        fds.append(os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
        for part in ring_format.DEFAULT_DIR.strip("/").split("/"):
            fds.append(os.open(part, _BENEATH, dir_fd=fds[-1]))
        theirs, ours = os.fstat(fds[-1]), os.stat(ring_format.DEFAULT_DIR)
    except OSError:
        for fd in fds:
            os.close(fd)
        return None
    shm = fds.pop()
    for fd in fds:
        os.close(fd)
    if (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino):
        os.close(shm)
        return None
    return shm


def proc_namespace() -> Namespace | None:
    """Our PID namespace, when /proc numbers processes in it (its NSpid for us has one PID;
    not so under `unshare --pid` without a /proc of its own); else None."""
    for line in (read_bytes("/proc/self/status") or b"").splitlines():
        if line.startswith(b"NSpid:"):
            return ring_format.pid_namespace() if len(line.split()) == 2 else None
    return ring_format.pid_namespace()  # a kernel before NSpid (4.1) has no nested /proc to fear


def namespace_pids(skip: Namespace | None) -> dict[Namespace, dict[int, int]]:
    """For each PID namespace but `skip` with processes we may look at (root: all; others:
    their own): {PID in that namespace: PID as /proc numbers it}. One pass over /proc."""
    found: dict[Namespace, dict[int, int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry}/ns/pid")
        except OSError:  # gone, or not ours to look at
            continue
        namespace = (st.st_dev, st.st_ino)
        inner = None if namespace == skip else _innermost_pid(entry)
        if inner is not None:
            found.setdefault(namespace, {})[inner] = int(entry)
    return found


def _innermost_pid(pid: str) -> int | None:
    """The process's PID in its own namespace: the last of /proc/PID/status's NSpid."""
    for line in (read_bytes(f"/proc/{pid}/status") or b"").splitlines():
        if line.startswith(b"NSpid:"):
            last = line.split()[-1]
            return int(last) if last.isdigit() else None
    return None


def open_ring(ring: TrustedRing, pid: int, ticks: int) -> RingReader:
    """The ring, opened once it passes every check against its live process `pid` (as /proc
    numbers it; started at `ticks`); RingError says in one line why not."""
    name = ring.name
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
    reader = RingReader(name.path, owner=owner, pid=name.pid, start_ticks=ticks)
    if reader.header.namespace != ring.namespace:
        reader.close()
        raise RingRefused(f"ring of PID {pid} is now of another PID namespace: ignored")
    return reader


class _Refusal(NamedTuple):
    """Why a file is not read: `pid` the process it claimed, where we know it; it is not
    looked at again (until `until_ns`, wall clock, when given)."""

    reason: str
    pid: int | None
    until_ns: int | None = None

    def holds(self, now_ns: int) -> bool:
        """Whether the file is still not to be looked at, at wall-clock `now_ns`."""
        return self.until_ns is None or now_ns < self.until_ns


class _Placed(NamedTuple):
    """A trusted ring and its live process: its PID as /proc numbers it, its start ticks."""

    pid: int
    ticks: int
    ring: TrustedRing


@dataclass
class _Listing:
    """What one scan found, built up ring by ring."""

    rings: dict[int, TrustedRing] = field(default_factory=dict)
    refusals: dict[int, str] = field(default_factory=dict)
    trusted: dict[tuple[int, int], _Placed] = field(default_factory=dict)
    refused: dict[tuple[int, int], _Refusal] = field(default_factory=dict)
    leftovers: list[RingName] = field(default_factory=list)

    def trust(self, placed: _Placed) -> None:
        self.trusted[(placed.ring.name.inode, placed.ring.name.pid)] = placed
        self.rings.setdefault(placed.pid, placed.ring)

    def refuse(self, name: RingName, refusal: _Refusal, for_good: bool = True) -> None:
        """Note why `name` is not read; remembered for the next scan when `for_good`."""
        if for_good:
            self.refused[(name.inode, name.pid)] = refusal
        if refusal.pid is not None:
            self.refusals.setdefault(refusal.pid, refusal.reason)


class _Running:
    """The trusted rings' processes, each held by a pidfd: one poll tells which of them
    exited (a pidfd refers to one process, never to a later one given its PID), so a live
    one costs no /proc/PID/stat read a tick. Where pidfds are not available, nothing is held
    and every check reads the start ticks, as a held process does once it exited."""

    def __init__(self, hold: bool) -> None:
        self._holds = hold  # False: nothing is held (a one-off listing closes nothing)
        self._fds: dict[tuple[int, int], int] = {}  # (pid, start ticks) -> its pidfd
        self._poll = select.poll()

    def check(self, pid: int, ticks: int) -> bool:
        """Whether the process `pid` that started at `ticks` still runs."""
        return self.runs(pid, ticks, self.exited())

    def runs(self, pid: int, ticks: int, exited: set[int]) -> bool:
        """Whether the process `pid` that started at `ticks` still runs, given the pidfds
        that `exited()` reported: held and not among them, else its start ticks say so."""
        fd = self._fds.get((pid, ticks))
        if fd is not None and fd not in exited:
            return True
        return ring_format.start_ticks(pid) == ticks

    def exited(self) -> set[int]:
        """The pidfds of the held processes that exited (any event), from one poll."""
        return {fd for fd, _ in self._poll.poll(0)} if self._fds else set()

    def hold(self, placed: list[tuple[int, int]]) -> None:
        """Hold the processes (pid, start ticks) of `placed`, and only those."""
        wanted = set(placed) if self._holds else set()
        for key in [key for key in self._fds if key not in wanted]:
            self._release(key)
        for pid, ticks in wanted - self._fds.keys():
            fd = _pidfd(pid)
            if fd is None:
                continue
            if ring_format.start_ticks(pid) != ticks:  # the PID is another process's by now
                os.close(fd)
                continue
            self._fds[(pid, ticks)] = fd
            self._poll.register(fd, select.POLLIN)

    def _release(self, key: tuple[int, int]) -> None:
        fd = self._fds.pop(key)
        self._poll.unregister(fd)
        os.close(fd)

    def close(self) -> None:
        """Release every pidfd."""
        for key in list(self._fds):
            self._release(key)


def _pidfd(pid: int) -> int | None:
    """A pidfd for `pid`, or None (no pidfd_open here, no such process, no fd left)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


class RingDirectory:
    """The rings of one directory that pass the checks, as of the last `scan()`."""

    def __init__(self, directory: str | None = None, *, watch: bool = False) -> None:
        self.directory = directory
        self._watch_wanted = watch  # a live view: inotify says when to list again
        self._watch: tuple[tuple[str, int, int], PrefixWatch] | None = None
        self.namespace = proc_namespace()  # ours, where /proc numbers processes in it
        self.rings: dict[int, TrustedRing] = {}  # live PID (as /proc numbers it) -> its ring
        self.refusals: dict[int, str] = {}  # PID -> why a ring named for it was refused
        self.leftovers: list[RingName] = []  # our rings whose process is gone, as last listed
        self._last = _Listing()
        self._others: dict[Namespace, dict[int, int]] | None = None  # this scan's, once needed
        self._listed: tuple[tuple[str, int, int, int], list[RingName]] | None = None
        self._entries = 0  # what the directory held at the last listing
        self._unwatched_scans = 0  # scans left before a busy directory is watched again
        self._running = _Running(hold=watch)  # a live view holds its rings' processes
        # attached PIDs -> (their start ticks, an fd on the private /dev/shm they see)
        self._inside: dict[int, tuple[int, int]] = {}

    def path(self) -> str:
        """The directory: as given, else $GPUTOP_RING_DIR or /dev/shm."""
        return self.directory or ring_format.ring_dir()

    def look_inside(self, pid: int) -> None:
        """List, from the next scan on, the /dev/shm `pid` sees when it is a private one
        (a container's) and we list /dev/shm, until `pid` exits."""
        if pid in self._inside or self.path() != ring_format.DEFAULT_DIR:
            return
        ticks = ring_format.start_ticks(pid)
        fd = None if ticks is None else private_shm(pid)
        if ticks is not None and fd is not None:
            self._inside[pid] = (ticks, fd)

    def _names_inside(self) -> list[RingName]:
        """The ring names of the private /dev/shm directories looked inside; those of
        processes that exited are let go."""
        names: list[RingName] = []
        for pid, (ticks, fd) in list(self._inside.items()):
            if ring_format.start_ticks(pid) != ticks:
                del self._inside[pid]
                os.close(fd)
                continue
            names += ring_names(f"/proc/self/fd/{fd}")[0]
        return names

    def scan(self) -> None:
        """List the directory once and check each ring not judged before; files refused for
        good are not opened again. Rings of our own dead trainers are noted in `leftovers`,
        not removed (that is `remove_leftovers()`)."""
        listing = _Listing()
        self._others = None
        now = time.time_ns()
        running = self._running
        exited = running.exited()
        for name in [*self._names(), *self._names_inside()]:
            key = (name.inode, name.pid)
            refused = self._last.refused.get(key)
            if refused is not None and refused.holds(now):
                listing.refuse(name, refused)
                continue
            placed = self._last.trusted.get(key)
            if placed is not None and running.runs(placed.pid, placed.ticks, exited):
                listing.trust(placed)
                continue
            self._judge(name, listing)
        self._last = listing
        self.rings, self.refusals, self.leftovers = (
            listing.rings, listing.refusals, listing.leftovers)
        running.hold([(p.pid, p.ticks) for p in listing.trusted.values()])

    def start_ticks(self, pid: int) -> int | None:
        """`pid`'s start ticks now (ring_format.start_ticks), without reading /proc while the
        process the last scan trusted a ring for under that PID is held and runs."""
        for placed in self._last.trusted.values():
            if placed.pid == pid and self._running.check(pid, placed.ticks):
                return placed.ticks
        return ring_format.start_ticks(pid)

    def _judge(self, name: RingName, listing: _Listing) -> None:
        """Place the ring `name` in `listing`: trusted for its live process, our leftover,
        or refused (for good, or for now)."""
        try:
            reader = RingReader(name.path, owner=name.uid, pid=name.pid)
        except RingUnfinished as exc:
            # Looked at again next scan where a process of the name's uid has its PID here (by
            # number: a hint of when to look, never trust), else once its writer had its time.
            soon = process_owner(name.pid) == name.uid
            listing.refuse(name, _Refusal(str(exc), name.pid, exc.settled_ns), for_good=not soon)
            return
        except RingRefused as exc:  # not a ring, or not the uid's its name claims
            listing.refuse(name, _Refusal(str(exc), name.pid))
            return
        except RingError as exc:  # may pass later
            listing.refuse(name, _Refusal(str(exc), name.pid), for_good=False)
            return
        header = reader.header
        reader.close()
        ours = header.namespace is not None and header.namespace == self.namespace
        if ours or header.namespace is None:
            pid: int | None = name.pid
        else:
            pid = self._pid_here(header.namespace, name.pid)
        if pid is None:  # a process of another namespace that we cannot see (or gone)
            listing.refuse(name, _Refusal(f"{name.path} is of a PID namespace gputop cannot "
                                          "see into", None))
            return
        ticks = ring_format.start_ticks(pid)
        if ours and _gone(header.start_ticks, ticks) and _is_ours(name):
            listing.leftovers.append(name)  # proven: our namespace, its process gone
            return
        if ticks is None:  # gone (unproven: another namespace's PID, or one not named)
            listing.refuse(name, _Refusal(f"no process with PID {pid}", None))
            return
        ring = TrustedRing(name, header.namespace)
        try:
            open_ring(ring, pid, ticks).close()
        except RingRefused as exc:
            listing.refuse(name, _Refusal(str(exc), pid))
            return
        except RingError as exc:
            listing.refuse(name, _Refusal(str(exc), pid), for_good=False)
            return
        listing.trust(_Placed(pid, ticks, ring))

    def _pid_here(self, namespace: Namespace, inner: int) -> int | None:
        """The PID /proc gives the process that is `inner` in `namespace`, if we see it."""
        if self._others is None:
            self._others = namespace_pids(skip=self.namespace)
        return self._others.get(namespace, {}).get(inner)

    def _names(self) -> list[RingName]:
        """The directory's ring names, listed again only when a ring's name came or went
        (inotify), or where nothing tells that, or its events outweigh its entries, when
        its mtime moved (or moved so lately that a later change could carry the same stamp):
        /dev/shm may hold hundreds of other files (semaphores, NCCL and torch segments), and
        listing them every tick cost more than the rest of attaching."""
        path = self.path()
        try:
            st = os.stat(path)
        except OSError:
            self._listed = None
            return []
        where = (path, st.st_dev, st.st_ino)
        watch = self._watching(where)
        if watch is not None:
            changed = watch.changed()
            if watch.drained <= EVENT_BYTES * (self._entries + LISTING_EVENTS):
                if changed or self._listed is None or self._listed[0][:3] != where:
                    self._listed = ((*where, 0), self._list(path))
                return self._listed[1]
            self._unwatch()  # busier than a listing: the mtime says when to list
            self._unwatched_scans = REWATCH_SCANS
            self._listed = None
        stamp = (*where, st.st_mtime_ns)
        if self._listed is not None and self._listed[0] == stamp:
            return self._listed[1]
        names = self._list(path)
        settled = time.time_ns() - st.st_mtime_ns > SETTLED_NS
        self._listed = (stamp, names) if settled else None
        return names

    def _list(self, path: str) -> list[RingName]:
        """The ring names in `path`, noting how many entries it holds."""
        names, self._entries = ring_names(path)
        return names

    def _watching(self, where: tuple[str, int, int]) -> PrefixWatch | None:
        """The inotify watch on the directory at `where` (path, device, inode), made anew
        when another directory is there now; None when not wanted or not available."""
        if not self._watch_wanted:
            return None
        if self._unwatched_scans:
            self._unwatched_scans -= 1
            return None
        if self._watch is None or self._watch[0] != where:
            self._unwatch()
            watch = PrefixWatch(where[0], ring_format.NAME_PREFIX)
            self._watch = (where, watch)
            self._listed = None  # events before the watch began are unknown: list now
        watch = self._watch[1]
        return watch if watch.watching else None

    def close(self) -> None:
        """Stop watching the directory and the trusted rings' processes."""
        self._unwatch()
        self._running.close()
        for _, fd in self._inside.values():
            os.close(fd)
        self._inside = {}

    def _unwatch(self) -> None:
        """Stop watching the directory."""
        if self._watch is not None:
            self._watch[1].close()
            self._watch = None

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
        ring = self.rings.get(pid)
        if ring is None:
            raise RingError(self.refusals.get(pid) or f"PID {pid} has no probe ring yet")
        ticks = ring_format.start_ticks(pid)
        if ticks is None:
            raise RingError(f"no process with PID {pid}")
        return open_ring(ring, pid, ticks)


def _gone(written: int, now: int | None) -> bool:
    """Whether the process that wrote start ticks `written` is gone, its PID free (`now`
    None) or another process's (other start ticks; a writer that could not read its own
    wrote 0, and proves nothing then)."""
    return now is None or (written != 0 and now != written)


def _is_ours(name: RingName) -> bool:
    """Whether the ring `name` is ours: its name claims our uid, and lstat proves it."""
    me = os.getuid()
    if name.uid != me:
        return False
    try:
        return os.lstat(name.path).st_uid == me
    except OSError:  # gone already
        return False
