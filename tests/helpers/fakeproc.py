"""A /proc tree in a folder, and which files of watched folders get read, counted by the kernel."""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypedDict, TypeVar

if TYPE_CHECKING:
    from typing import Unpack  # Python 3.11+; annotations only

TAIL = ("0 0 0 -1 {flags} 120 0 0 0 {ut} {st} 0 0 20 0 {thr} 0 {start} 9000 {rss} "
        "18446744073709551615")
IN_ACCESS = 0x1  # a read(2)/pread(2) of a file, or a listing of a folder
IN_OPEN = 0x20  # an open(2) of a file or folder
K = TypeVar("K")
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name


EXIT_SIGNAL_AT = 35  # exit_signal's index after ')'; TAIL ends at index 22


def stat_line(pid: int, comm: str, state: str = "S", ppid: int = 1, ut: int = 0, st: int = 0,
              thr: int = 1, start: int = 100, rss: int = 10,
              exit_signal: int | None = None, flags: int = 0x400000) -> str:
    """A /proc/PID/stat line with the fields gputop reads (to exit_signal when given: -1
    for a thread); `flags` the kernel's PF_* (PF_FORKNOEXEC by default)."""
    line = f"{pid} ({comm}) {state} {ppid} " + TAIL.format(
        ut=ut, st=st, thr=thr, start=start, rss=rss, flags=flags)
    if exit_signal is not None:
        line += " 0" * (EXIT_SIGNAL_AT - 23) + f" {exit_signal}"
    return line


class StatFields(TypedDict, total=False):
    """`stat_line`'s optional fields, as keyword arguments to `FakeProc.add`."""

    state: str
    ppid: int
    ut: int
    st: int
    thr: int
    start: int
    rss: int
    exit_signal: int | None
    flags: int


class FakeProc:
    """A /proc tree in a folder: stat and cmdline files per pid, and ns_last_pid."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "sys/kernel").mkdir(parents=True)
        self.last_pid = 0

    def add(self, pid: int, comm: str, cmdline: str = "", **stat: Unpack[StatFields]) -> None:
        d = self.root / str(pid)
        d.mkdir(exist_ok=True)
        (d / "stat").write_text(stat_line(pid, comm, **stat))
        (d / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0" * bool(cmdline))
        self.last_pid = max(self.last_pid, pid)
        self.bump()

    def bump(self) -> None:
        (self.root / "sys/kernel/ns_last_pid").write_text(f"{self.last_pid}\n")

    def remove(self, pid: int) -> None:
        for f in (self.root / str(pid)).iterdir():
            f.unlink()
        (self.root / str(pid)).rmdir()


class ReadWatch(Generic[K]):
    """Which files of the watched folders were read (or, with `mask` IN_OPEN, opened) since
    the last `take()` (inotify's IN_ACCESS: each read(2)/pread(2) of a file and each listing
    of a folder, counted by the kernel, so the reader under test needs no hook)."""

    def __init__(self, folders: Mapping[K, Path], mask: int = IN_ACCESS) -> None:
        self._mask = mask
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._label_of: dict[int, K] = {}
        for label, folder in folders.items():
            wd = self._libc.inotify_add_watch(self._fd, str(folder).encode(), mask)
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {folder}")
            self._label_of[wd] = label

    def take(self) -> set[tuple[K, str]]:
        """(folder's label, file name) of each file read since the last call; the name is ""
        where the folder itself was listed."""
        seen: set[tuple[K, str]] = set()
        while True:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return seen
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size: offset + _EVENT.size + length].rstrip(b"\0")
                if mask & self._mask and wd in self._label_of:
                    seen.add((self._label_of[wd], name.decode()))
                offset += _EVENT.size + length

    def close(self) -> None:
        os.close(self._fd)
