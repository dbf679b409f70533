"""Which processes here hold an NVIDIA GPU's device node (/dev/nvidiaN) open."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable

_NODE = re.compile(r"/dev/nvidia(\d{1,3})")
FDS_LOOKED_AT = 4096  # a process's fds beyond this many are not looked at


def gpu_nodes(dev: str = "/dev") -> tuple[int, ...]:
    """The numbers N of the /dev/nvidiaN character devices here (a container sees those of
    the GPUs it was given), in order."""
    found = []
    try:
        names = os.listdir(dev)
    except OSError:
        return ()
    for name in names:
        match = _NODE.fullmatch(f"/dev/{name}")
        if match is None:
            continue
        try:
            if stat.S_ISCHR(os.lstat(os.path.join(dev, name)).st_mode):
                found.append(int(match.group(1)))
        except OSError:
            continue
    return tuple(sorted(found))


def holders(pids: Iterable[int], proc_root: str = "/proc") -> dict[int, frozenset[int]]:
    """N -> the PIDs among `pids` holding /dev/nvidiaN open (their fds' links; a process
    whose fds we may not read holds nothing we know of)."""
    held: dict[int, set[int]] = {}
    for pid in pids:
        fd_dir = f"{proc_root}/{pid}/fd"
        try:
            with os.scandir(fd_dir) as entries:
                for count, entry in enumerate(entries):
                    if count >= FDS_LOOKED_AT:
                        break
                    try:
                        target = os.readlink(entry.path)
                    except OSError:
                        continue
                    match = _NODE.fullmatch(target)
                    if match is not None:
                        held.setdefault(int(match.group(1)), set()).add(pid)
        except OSError:
            continue
    return {node: frozenset(found) for node, found in held.items()}
