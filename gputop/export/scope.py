"""Whose trainers a recording or /metrics takes: those of the user running gputop (its
effective uid), or with root's `--all-users` everyone's. The live screen is not scoped: like
htop it shows every process. A process is a user's when every uid it has (real, effective,
saved, filesystem) is that user's."""

from __future__ import annotations

import os
import pwd
from dataclasses import replace
from typing import TYPE_CHECKING

from gputop.core.model import Frame, SourceError
from gputop.core.printable import printable
from gputop.sources.procfs import parse_status_uids, read_bytes

if TYPE_CHECKING:
    from gputop.frames.sampler import FrameSink

ALL_USERS = "all-users"
REMEMBERED = 4096  # owners remembered by PID before the memory starts over


class TrainerScope:
    """One user's trainers (`uid`), or everyone's (`uid` None)."""

    def __init__(self, uid: int | None) -> None:
        self.uid = uid
        self._owners: dict[int, tuple[int | None, bool]] = {}  # pid -> (start ticks, ours)

    @classmethod
    def of_caller(cls, all_users: bool = False) -> TrainerScope:
        """The scope gputop takes when run as it is now: its own user's, or everyone's."""
        return cls(None if all_users else os.geteuid())

    @property
    def label(self) -> str:
        """What a recording's `trainers_of` meta row says: `user:NAME` or `all-users`."""
        if self.uid is None:
            return ALL_USERS
        try:
            name = printable(pwd.getpwuid(self.uid).pw_name)
        except KeyError:
            name = str(self.uid)
        return f"user:{name}"

    def takes(self, pid: int, start_ticks: int | None = None) -> bool:
        """Whether process `pid` (started at `start_ticks`, when known) is in the scope; an
        exited process keeps the answer it had while it ran."""
        if self.uid is None:
            return True
        known = self._owners.get(pid)
        if known is not None and (start_ticks is None or known[0] == start_ticks):
            return known[1]
        uids = parse_status_uids(read_bytes(f"/proc/{pid}/status") or b"")
        if uids is None:  # gone: what it was while it ran, or not ours when never seen
            return known[1] if known is not None else False
        ours = set(uids) == {self.uid}
        if len(self._owners) >= REMEMBERED:
            self._owners.clear()
        self._owners[pid] = (start_ticks, ours)
        return ours

    def frame(self, frame: Frame) -> Frame:
        """`frame` with only the scope's trainers: attached rings, trainer groups, the advice
        about one trainer and the input straggler of other users' are left out. Every
        process row stays (its command line is masked where it is written)."""
        if self.uid is None:
            return frame

        def ours(pid: int) -> bool:
            row = frame.process(pid)
            return self.takes(pid, row.start_ticks if row is not None else None)

        attached = tuple(a for a in frame.attached if ours(a.pid))
        trainers = tuple(g for g in frame.trainers if ours(g.pid))
        advice = tuple(a for a in frame.advice if a.trainer_pid is None or ours(a.trainer_pid))
        straggler = frame.straggler if frame.straggler is None or ours(
            frame.straggler.pid) else None
        if (len(attached), len(trainers), len(advice), straggler) == (
                len(frame.attached), len(frame.trainers), len(frame.advice), frame.straggler):
            return frame
        return replace(frame, attached=attached, trainers=trainers, advice=advice,
                       straggler=straggler)


class ScopedSink:
    """A frame sink (a recorder) that is handed only the trainers of `scope`."""

    def __init__(self, sink: FrameSink, scope: TrainerScope) -> None:
        self.sink = sink
        self.scope = scope

    def submit(self, frame: Frame) -> SourceError | None:
        """Hand `frame`, other users' trainers left out, to the sink; the sink's error."""
        return self.sink.submit(self.scope.frame(frame))
