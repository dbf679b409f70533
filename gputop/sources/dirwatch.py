"""Whether a directory gained or lost entries of a given name prefix, told by inotify.

/dev/shm changes all the time on a training server (every DataLoader batch passed through
shared memory makes and unlinks a file there, every semaphore too), so its mtime says
little about rings; listing its hundreds of entries each tick cost more than reading an
attached trainer's ring. The kernel's events name each entry made, removed or renamed:
one read drains them, one substring search tells whether a ring's name is among them.
"""

from __future__ import annotations

import ctypes
import os

_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_ONLYDIR = 0x1000000
_MASK = _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE | _IN_ONLYDIR
# An event whose wd is -1 says the queue overflowed and events were lost: "changed" (a name
# or cookie holding these bytes only costs a listing). A directory replaced at the path is
# for the caller to see (its inode).
_LOST = b"\xff\xff\xff\xff"
_READ_SIZE = 1 << 16


class PrefixWatch:
    """Events on `path` whose entry names hold `prefix`, since the last `changed()`."""

    def __init__(self, path: str, prefix: str) -> None:
        self.path = path
        self._prefix = prefix.encode()
        self._fd = _watch_fd(path)
        self.drained = 0  # bytes of events the last changed() read

    @property
    def watching(self) -> bool:
        """Whether inotify watches the directory (False: no inotify, or no watch was free)."""
        return self._fd is not None

    def changed(self) -> bool:
        """Whether an entry named with the prefix came, went or was renamed (or events were
        lost) since the last call; True when not watching."""
        self.drained = 0
        if self._fd is None:
            return True
        found = False
        while True:
            try:
                data = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                return found
            except OSError:
                self.close()
                return True
            if not data:
                return found
            self.drained += len(data)
            found = found or self._prefix in data or _LOST in data

    def close(self) -> None:
        """Stop watching."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _watch_fd(path: str) -> int | None:
    """A non-blocking inotify fd watching `path`'s entries, or None where there is none."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    if libc.inotify_add_watch(fd, os.fsencode(path), _MASK) < 0:
        os.close(fd)
        return None
    return fd
