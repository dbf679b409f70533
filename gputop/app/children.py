"""Child processes gputop starts: `gputop run`'s command under the probe (environment +
sitecustomize), and the demo trainer that `gputop --demo` shows on simulated GPU 0."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import NamedTuple

from gputop.core.safe_files import PRIVATE, WriteRefused, create_new, open_own
from gputop.probe.inherit import probe_env  # the environment `python -m gputop.probe` sets

_LOG_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC


class LogError(Exception):
    """The file for the command's output cannot be opened; the message names it and why."""


class RunLog(NamedTuple):
    """An open log for the command's output; `created`: gputop made the file just now."""

    fd: int
    path: str
    created: bool


def open_log(path: str, new: bool = False, mode: int = PRIVATE) -> RunLog:
    """Open `path` to append to, never truncating it; `new`: it must not exist (nor be a link).

    Created exclusively (with `mode`) first, so we know whether the file is ours to remove
    again; an existing file must be our regular file, never a link to one.
    """
    try:
        return RunLog(create_new(path, _LOG_FLAGS, mode), path, created=True)
    except FileExistsError as exc:
        if new:
            raise LogError(f"cannot write the log {path}: {exc.strerror}") from None
    except WriteRefused as exc:
        raise LogError(f"cannot write the log {path}: {exc}") from None
    try:
        return RunLog(open_own(path, _LOG_FLAGS), path, created=False)
    except WriteRefused as exc:
        raise LogError(f"cannot write the log {path}: {exc}") from None


def discard_log(log: RunLog) -> None:
    """Close the log of a command that never started; remove it if gputop created it."""
    try:
        if log.created:
            ours = os.fstat(log.fd)
            there = os.stat(log.path, follow_symlinks=False)
            if (ours.st_dev, ours.st_ino) == (there.st_dev, there.st_ino) and not there.st_size:
                os.unlink(log.path)
    except OSError:
        pass  # already gone or replaced: nothing of ours to remove
    finally:
        os.close(log.fd)


def start_under_probe(
    command: Sequence[str], env: Mapping[str, str] | None = None, forward_sigint: bool = True,
    log: str | None = None, new_log: bool = False, log_mode: int = PRIVATE,
) -> subprocess.Popen[bytes]:
    """Start `command` with the probe; Ctrl-C goes to the child, which decides when to stop.

    With `log`, the child's output goes to that file, its stdin is empty and it runs in a
    session of its own: the terminal belongs to the TUI (a trainer's progress bars would
    tear it), and the terminal's hang-up or Ctrl-C reach gputop, which decides, so the
    command can outlive gputop when the user detaches. An unwritable log raises LogError;
    a command that cannot start raises OSError and leaves no log it made.
    """
    if log is None:
        child = subprocess.Popen(list(command), env=probe_env(env))
    else:
        out = open_log(log, new=new_log, mode=log_mode)
        try:
            child = subprocess.Popen(list(command), env=probe_env(env), stdin=subprocess.DEVNULL,
                                     stdout=out.fd, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        except BaseException:
            discard_log(out)
            raise
        os.close(out.fd)
    if forward_sigint:
        _forward_sigint(child)
    return child


def exit_status(returncode: int) -> int:
    """The child's code as a shell reports it: killed by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def interrupt(child: subprocess.Popen[bytes]) -> None:
    """Send the child a SIGINT (the TUI calls this when Ctrl-C is a key, not a signal)."""
    if child.poll() is None:
        child.send_signal(signal.SIGINT)


def _forward_sigint(child: subprocess.Popen[bytes]) -> None:
    """Relay SIGINT to the child instead of dying first (only from the main thread)."""

    def relay(signum: int, frame: FrameType | None) -> None:
        if not _terminal_sent_it(child):
            interrupt(child)

    with contextlib.suppress(ValueError):  # not the main thread: leave SIGINT alone
        signal.signal(signal.SIGINT, relay)


def _terminal_sent_it(child: subprocess.Popen[bytes]) -> bool:
    """True when a cooked-mode terminal already sent SIGINT to the child's process group
    (it is the terminal's foreground group: ours, unless the child has a session of its own)."""
    try:
        import termios

        fd = sys.stdin.fileno()
        if os.tcgetpgrp(fd) != os.getpgid(child.pid):
            return False
        return bool(termios.tcgetattr(fd)[3] & termios.ISIG)
    except (OSError, ValueError, AttributeError, ImportError):
        return False


STOP_GRACE_S = 10.0  # after the SIGINT of a stop, the command's own handler has this long
KILL_AFTER_S = 5.0  # after SIGTERM, this long before SIGKILL


@dataclass
class RunCommand:
    """`gputop run`'s command as the TUI controls it: Ctrl-C, stop, or leave it running."""

    process: subprocess.Popen[bytes]
    log: str | None = None
    detached: bool = False
    stopping: bool = False

    @property
    def pid(self) -> int:
        """The command's PID (the TUI attaches to it)."""
        return self.process.pid

    def running(self) -> bool:
        """Whether the command still runs (reaps it once it has ended)."""
        return self.process.poll() is None

    def interrupt(self) -> None:
        """Ctrl-C for the command: a SIGINT, so its own handler (KeyboardInterrupt) runs."""
        interrupt(self.process)

    def stop(self) -> None:
        """Begin stopping: SIGINT now; `finish` sends SIGTERM if it outlives the grace period."""
        self.stopping = True
        self.interrupt()

    def detach(self) -> None:
        """Leave the command running when gputop exits (its output still goes to its log)."""
        self.detached = True

    def finish(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """The command's exit status once it has ended, or None when it was left running.

        A command still running and not detached is stopped as a user would stop it: SIGINT
        (unless `stop` sent one), `grace_s` for its handler, then SIGTERM, then SIGKILL.
        """
        if self.detached and self.running():
            return None
        if self.running():
            if not self.stopping:
                self.stop()
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.process.terminate()
                try:
                    self.process.wait(KILL_AFTER_S)
                except subprocess.TimeoutExpired:
                    self.process.kill()
        return exit_status(self.process.wait())


@dataclass
class DemoTrainer:
    """A running demo process (`python -m gputop.app.demo_trainer`, the demo's idle holder);
    it leads a process group of its own, which holds everything it starts, and it also exits
    by itself when gputop dies."""

    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        """The trainer's PID: simulated GPU 0's owner."""
        return self.process.pid

    def stop(self, timeout_s: float = 3.0) -> None:
        """Terminate the trainer and reap it; then end what is left of its group (its
        DataLoader workers), so that nothing it started outlives the stop."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout_s)
        end_group(self.process.pid, timeout_s)


def end_group(pgid: int, timeout_s: float) -> None:
    """SIGKILL process group `pgid` and wait (at most `timeout_s`) until none of it runs; its
    leader is reaped already, so the group's ID cannot have been reused."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return  # no one left in it
    deadline = time.monotonic() + timeout_s
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.01)


def group_members(pgid: int) -> list[int]:
    """The processes of group `pgid` that have not exited (zombies left out)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            found.append(int(entry.name))
    return found


def start_demo_trainer(workers: int | None = None, extra_args: Sequence[str] = ()
                       ) -> DemoTrainer:
    """Start the demo trainer quietly in the background, with this gputop on its path
    (`workers`: override its scenario's count)."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    count = () if workers is None else ("--workers", str(workers))
    process = subprocess.Popen(
        [sys.executable, "-m", "gputop.app.demo_trainer", *count, *extra_args],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=env, close_fds=True, start_new_session=True,  # its group: what it starts
    )
    return DemoTrainer(process)
