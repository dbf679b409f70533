"""GPUTOP_DEBUG=1: tracebacks of failures gputop survives go to a private log file."""

from __future__ import annotations

import os
import stat
import time
import traceback

ENV = "GPUTOP_DEBUG"
MAX_BYTES = 1 << 20  # the log is started afresh past this size


def enabled() -> bool:
    """Whether GPUTOP_DEBUG asks for tracebacks."""
    return os.environ.get(ENV, "") not in ("", "0")


def log_path() -> str:
    """$XDG_STATE_HOME/gputop/debug.log (default ~/.local/state/gputop/debug.log)."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "gputop", "debug.log")


def log_exception(where: str, exc: BaseException) -> None:
    """Append `exc`'s traceback to the debug log when GPUTOP_DEBUG is set; never raises."""
    if not enabled():
        return
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    try:
        _append(f"{stamp} pid {os.getpid()} {where}\n{text}\n".encode("utf-8", "replace"))
    except OSError:
        return


def _append(data: bytes) -> None:
    path = log_path()
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or not stat.S_ISREG(st.st_mode):
            return  # not a regular file of ours: write nothing into it
        if st.st_size > MAX_BYTES:
            os.ftruncate(fd, 0)
        os.write(fd, data)
    finally:
        os.close(fd)
