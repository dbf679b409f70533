"""Signals the TUI's `k` sends: only to the very process a row listed (PID and start time),
and only to processes the kernel lets us signal (ours, or anyone's as root).

The TUI never imports this module; wiring hands it a ProcessSignaller (none under --readonly).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
from collections.abc import Iterator, Sequence

from gputop.core.printable import printable
from gputop.sources import procfs

Target = tuple[int, int]  # (pid, start ticks): a ProcessSample.key


class ProcessSignaller:
    """Sends a signal to listed processes; says in one line why one cannot be signalled."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = proc_root

    def refusal(self, targets: Sequence[Target]) -> str | None:
        """Why one of `targets` may not be signalled (gone, its PID reused, not ours), or None."""
        for pid, start in targets:
            reason = self._refusal(pid, start)
            if reason is not None:
                return reason
        return None

    def send(self, targets: Sequence[Target], signum: int) -> str | None:
        """Send `signum` to each target still alive and ours; a line naming those it could not."""
        failures = [reason for pid, start in targets
                    if (reason := self._send_one(pid, start, signum)) is not None]
        return "; ".join(failures) or None

    def _send_one(self, pid: int, start: int, signum: int) -> str | None:
        """Pin the process (a pidfd), check it is the one listed and ours, then signal it."""
        with _pidfd(pid) as fd:
            reason = self._refusal(pid, start)
            if reason is not None:
                return reason
            try:
                if fd is None:
                    os.kill(pid, signum)
                else:
                    signal.pidfd_send_signal(fd, signum)
            except ProcessLookupError:
                return f"PID {pid} has exited"
            except PermissionError:
                return f"PID {pid}: not permitted to signal it"
            except OSError as exc:
                return f"PID {pid}: {exc.strerror or exc}"
        return None

    def _refusal(self, pid: int, start: int) -> str | None:
        st = procfs.parse_stat(procfs.read_bytes(f"{self.proc_root}/{pid}/stat") or b"")
        if st is None:
            return f"PID {pid} has exited"
        if st.starttime != start:
            return f"PID {pid} is now another process; nothing sent"
        uids = procfs.parse_status_uids(
            procfs.read_bytes(f"{self.proc_root}/{pid}/status") or b"")
        if uids is None:
            return f"PID {pid} has exited"
        if not may_signal(uids[0], uids[2]):
            owner = user_name(uids[0])
            return (f"PID {pid} belongs to {owner}, not to you: only root or {owner} "
                    "may signal it")
        return None


def may_signal(real_uid: int, saved_uid: int) -> bool:
    """The kernel's rule for kill(2): root, or our real or effective uid is the target's real
    or saved uid."""
    ours = {os.getuid(), os.geteuid()}
    return os.geteuid() == 0 or bool(ours & {real_uid, saved_uid})


def user_name(uid: int) -> str:
    """The user's login name, or the number when it has none."""
    try:
        return printable(pwd.getpwuid(uid).pw_name)
    except KeyError:
        return f"uid {uid}"


@contextlib.contextmanager
def _pidfd(pid: int) -> Iterator[int | None]:
    """A pidfd for `pid` (the process, not a later one with its number), or None where the
    kernel has none (before Linux 5.3) or the process is gone."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)
