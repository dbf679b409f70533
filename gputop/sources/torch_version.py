"""The torch version a process loaded, from the version.py beside the libtorch it maps."""

from __future__ import annotations

import os
import re
from collections.abc import Container

from gputop.sources import procfs

MAPS_LIMIT = 16 << 20
VERSION_LIMIT = 1 << 16  # torch's version.py is a few hundred bytes
TORCH_LIB = b"/torch/lib/libtorch"
_VERSION_RE = re.compile(rb"""__version__\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""")


class TorchVersions:
    """Each process's torch version, read once per process (its pid and start time)."""

    def __init__(self, proc_root: str) -> None:
        self.proc_root = proc_root
        self.known: dict[tuple[int, int], str | None] = {}

    def of(self, pid: int, start: int) -> str | None:
        """The torch version of `pid`, started at `start` (None: no torch, or unknown)."""
        key = (pid, start)
        if key not in self.known:
            self.known[key] = read_torch_version(self.proc_root, pid)
        return self.known[key]

    def keep_only(self, pids: Container[int]) -> None:
        """Forget the processes not among `pids`."""
        if self.known:
            self.known = {k: v for k, v in self.known.items() if k[0] in pids}


def read_torch_version(proc_root: str, pid: int) -> str | None:
    """torch.__version__ of `pid`, from the version.py beside its libtorch.

    That file lies under a path the process's owner controls, so it is read only when
    every uid of the process (real, effective, saved, fs, from status; an owner of /proc
    files shows one uid, and root's once a process makes itself non-dumpable) is our
    effective uid: no privilege is crossed. Even then no component may be a symlink and
    the file is read only once seen regular and small. Another user's trainer is never
    proven old, not even for root: nothing else in /proc tells torch's version (< 2.5
    names no thread), so its unnamed workers stay rows of their own rather than root
    open a path that user named. The /proc/PID fd held throughout keeps a reused pid
    from answering for this one.
    """
    try:
        proc_dir = os.open(f"{proc_root}/{pid}", os.O_PATH | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        return _own_torch_version(proc_dir)
    finally:
        os.close(proc_dir)


def _own_torch_version(proc_dir: int) -> str | None:
    """torch.__version__ of the process whose /proc dir is open, if all its uids are ours."""
    uids = procfs.parse_status_uids(procfs.read_bytes("status", dir_fd=proc_dir) or b"")
    if uids is None or set(uids) != {os.geteuid()}:
        return None
    torch_dir = _torch_dir(procfs.read_bytes("maps", MAPS_LIMIT, dir_fd=proc_dir) or b"")
    if torch_dir is None:
        return None
    source = procfs.read_regular_beneath(
        "root", f"{torch_dir}/version.py", VERSION_LIMIT, dir_fd=proc_dir
    )
    match = _VERSION_RE.search(source or b"")
    return None if match is None else match.group(1).decode("ascii", "replace")


def _torch_dir(maps: bytes) -> str | None:
    """The torch package directory of the first libtorch named in /proc/PID/maps text."""
    at = maps.find(TORCH_LIB)
    if at < 0:
        return None
    line_start = maps.rfind(b"\n", 0, at) + 1
    fields = maps[line_start : at + len(b"/torch")].split(maxsplit=5)  # the path may hold spaces
    if len(fields) < 6 or not fields[5].startswith(b"/"):
        return None
    return os.fsdecode(fields[5])
