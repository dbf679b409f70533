"""A second, real user for tests of what another user on a shared machine can do."""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable

OTHER_UID = 54321


def as_other_user(action: Callable[[], object], uid: int = OTHER_UID) -> None:
    """Run `action` in a forked child that has become `uid` (gid too); fail if it fails."""
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        code = 1
        try:
            become(uid)
            action()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"the action as uid {uid} failed"


def become(uid: int = OTHER_UID) -> None:
    """Make this (forked) process `uid`, its gid too, with no supplementary groups."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
