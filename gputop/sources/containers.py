"""Which container a process runs in (from /proc/PID/cgroup) and its PID inside it (NSpid).

Docker, containerd, Podman and CRI-O name the cgroup of each container after its id
(`docker-<id>.scope`, `/docker/<id>`, `cri-containerd-<id>.scope`, `libpod-<id>.scope`,
`crio-<id>.scope`); Kubernetes puts a pod's containers beneath `kubepods…pod<uid>` (its
uid's dashes written as underscores under systemd). A cgroup path is chosen by whoever
made the cgroup: it is read bounded, and only an exact, printable match names a container;
anything else is no container, never an error.

Every runtime gives its containers a mount namespace of their own, so the cgroup of a process
in ours is not read (the costliest file of a first look at a process: a line per hierarchy);
nor is NSpid of one in our PID namespace. Each is read once, when the process is first seen.
"""

from __future__ import annotations

import os
import re

from gputop.core.frozen import frozen
from gputop.sources.procfs import read_bytes

SHORT_ID = 12  # hex digits shown of a container id, as `docker ps` shows them
CGROUP_LIMIT = 16 << 10  # bytes of /proc/PID/cgroup read: a line per hierarchy, a path each
PATH_LIMIT = 4096  # the kernel's PATH_MAX: a longer line is not a cgroup path
STATUS_LIMIT = 8 << 10
PARSED_KEPT = 4096  # distinct cgroup files remembered parsed (many processes share one)

_ID = rb"([0-9a-f]{12,64})"
_UUID = rb"([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
# A container's own cgroup: systemd's scope (cgroupfs drivers drop the suffix) ...
_SCOPE = re.compile(rb"(?:docker|cri-containerd|libpod|crio)-" + _ID + rb"(?:\.scope)?")
# ... systemd's cgroup v1 name under a pod slice ("…pod<uid>.slice:cri-containerd:<id>")
_COLONS = re.compile(rb".*:(?:docker|cri-containerd|crio):" + _ID)
_BARE = re.compile(rb"[0-9a-f]{64}")  # /docker/<id>, /kubepods/burstable/pod<uid>/<id>
_PATH = re.compile(rb"/[!-~]*")  # printable ASCII, no spaces
_POD = re.compile(rb"(?:kubepods(?:-[a-z]+)*-)?pod" + _UUID + rb"(?:\.slice)?(?=:|$)")


@frozen
class Container:
    """A container: its id cut to SHORT_ID hex digits, and its Kubernetes pod's uid."""

    id: str | None
    pod_uid: str | None = None


def parse_cgroup(data: bytes) -> Container | None:
    """The container /proc/PID/cgroup text `data` places its process in, or None; the
    unified hierarchy's line first, then each v1 line, the first that names one."""
    if len(data) > CGROUP_LIMIT or not data.isascii():
        return None
    lines = data.splitlines()
    for line in sorted(lines, key=lambda line: not line.startswith(b"0::")):
        parts = line.split(b":", 2)
        if len(parts) != 3 or len(parts[2]) > PATH_LIMIT:
            continue
        found = _in_path(parts[2])
        if found is not None:
            return found
    return None


def _in_path(path: bytes) -> Container | None:
    """The container a cgroup path names: the innermost id beneath any pod."""
    if _PATH.fullmatch(path) is None:
        return None
    ident: bytes | None = None
    pod: bytes | None = None
    parent = b""
    for part in path.split(b"/"):
        if (pod_match := _POD.match(part)) is not None:
            pod = pod_match.group(1).replace(b"_", b"-")
        match = _SCOPE.fullmatch(part) or _COLONS.fullmatch(part)
        if match is not None:
            ident = match.group(1)
        elif _BARE.fullmatch(part) and (parent == b"docker" or pod is not None):
            ident = part
        parent = part
    if ident is None and pod is None:
        return None
    return Container(None if ident is None else ident[:SHORT_ID].decode(),
                     None if pod is None else pod.decode())


def nspid(status: bytes) -> int | None:
    """The PID in the process's own namespace: the last field of status's NSpid line, when
    that line has more than one (the process runs in a namespace below ours)."""
    for line in status.splitlines():
        if line.startswith(b"NSpid:"):
            fields = line.split()
            last = fields[-1]
            return int(last) if len(fields) > 2 and last.isdigit() and len(last) < 12 else None
    return None


class ContainerReader:
    """Reads, for a process first seen, its container and its PID inside it; the cgroup
    text of many processes is the same and is parsed once."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = proc_root
        self._parsed: dict[bytes, Container | None] = {}
        self._mounts = _namespace(f"{proc_root}/self/ns/mnt")
        self._pids = _namespace(f"{proc_root}/self/ns/pid")

    def container_of(self, pid: int) -> Container | None:
        """`pid`'s container, None when it runs in none (or its cgroup cannot be read)."""
        if _in_namespace(f"{self.proc_root}/{pid}/ns/mnt", self._mounts):
            return None
        data = read_bytes(f"{self.proc_root}/{pid}/cgroup", CGROUP_LIMIT + 1)
        if data is None:
            return None
        parsed = self._parsed
        if data in parsed:
            return parsed[data]
        found = parse_cgroup(data)
        if len(parsed) >= PARSED_KEPT:
            parsed.clear()
        parsed[data] = found
        return found

    def inner_pid(self, pid: int) -> int | None:
        """`pid`'s PID inside its PID namespace when that is not ours, else None."""
        if _in_namespace(f"{self.proc_root}/{pid}/ns/pid", self._pids):
            return None
        status = read_bytes(f"{self.proc_root}/{pid}/status", STATUS_LIMIT)
        return None if status is None else nspid(status)


def _namespace(path: str) -> str | None:
    """The namespace link at `path` ("pid:[4026531836]"), None when it cannot be read."""
    try:
        return os.readlink(path)
    except OSError:
        return None


def _in_namespace(path: str, ours: str | None) -> bool:
    """Whether the namespace link at `path` is `ours` (one readlink); False where that
    cannot be told (another user's process, when we are not root), so the file is read."""
    if ours is None:
        return False
    try:
        return os.readlink(path) == ours
    except OSError:
        return False
