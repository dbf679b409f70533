"""The signals `k` sends, on real processes: only to the very process listed (PID and start
time), and to another user's process only as root, with a line that says why not."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from gputop.app.signalling import ProcessSignaller
from gputop.sources import procfs

pytestmark = pytest.mark.slow
OWNER, STRANGER = 54321, 54322  # unused uids: a second user, and a third who tries


@contextmanager
def _sleeper(uid: int | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """A `sleep` that runs until the test ends it (as `uid`, when given)."""
    child = subprocess.Popen(["sleep", "120"], user=uid, group=uid)  # None: our own
    try:
        yield child
    finally:
        child.kill()
        child.wait(timeout=10)


def _key(pid: int) -> tuple[int, int]:
    st = procfs.parse_stat(procfs.read_bytes(f"/proc/{pid}/stat") or b"")
    assert st is not None
    return pid, st.starttime


def _as_user(uid: int, key: tuple[int, int]) -> dict[str, str | None]:
    """What a ProcessSignaller run by `uid` answers about `key` (refusal, then send)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to `uid`, ask, report, never return into pytest
        try:
            os.close(read)
            os.setgid(uid)
            os.setuid(uid)
            signaller = ProcessSignaller()
            answer = {"refusal": signaller.refusal([key]),
                      "send": signaller.send([key], signal.SIGKILL)}
            os.write(write, json.dumps(answer).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def test_the_listed_process_gets_the_signal() -> None:
    with _sleeper() as child:
        assert ProcessSignaller().send([_key(child.pid)], signal.SIGTERM) is None
        assert child.wait(timeout=10) == -signal.SIGTERM


def test_a_pid_now_held_by_another_process_is_not_signalled() -> None:
    with _sleeper() as child:
        pid, start = _key(child.pid)
        answer = ProcessSignaller().send([(pid, start + 1)], signal.SIGKILL)
        assert answer == f"PID {pid} is now another process; nothing sent"
        assert child.poll() is None


def test_an_exited_process_is_named() -> None:
    with _sleeper() as child:
        key = _key(child.pid)
        child.kill()
        child.wait(timeout=10)
        assert ProcessSignaller().refusal([key]) == f"PID {child.pid} has exited"


def test_another_users_process_is_refused_unless_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to run processes as other users")
    with _sleeper(uid=OWNER) as child:
        key = _key(child.pid)
        stranger = _as_user(STRANGER, key)
        why = (f"PID {child.pid} belongs to uid {OWNER}, not to you: only root or uid {OWNER} "
               "may signal it")
        assert stranger == {"refusal": why, "send": why}
        assert child.poll() is None  # the stranger's SIGKILL was never sent
        assert ProcessSignaller().refusal([key]) is None  # root may
        assert _as_user(OWNER, key)["refusal"] is None  # and so may its owner
        assert child.wait(timeout=10) == -signal.SIGKILL  # the owner's SIGKILL ended it
