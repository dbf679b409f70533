"""A trainer's `trainer` label: a short hash of what stays the same when it restarts.

The hash covers the host, the command line (secrets masked, as in every exported label) and,
for a rank of a multi-process job, its rank; the PID is left to `gputop_trainer_info`, so a
trainer restarted with the same command keeps its series. Two live trainers with the same
key (the same command started twice) are told apart by start order: the oldest keeps the
plain hash, the next ones hash their ordinal in too. A trainer whose command line gputop
cannot read (no /proc entry: another PID namespace) is hashed with its PID instead.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from gputop.core.masking import mask_secrets
from gputop.core.model import Frame, ProcessSample

HASH_CHARS = 12  # 48 bits: a collision among one fleet's trainers is out of reach
COMMAND_CHARS = 200  # gputop_trainer_info's `command` label, cut to this


def command_line(row: ProcessSample | None) -> str:
    """The process's command line with secret-looking values masked (its name without one)."""
    if row is None:
        return ""
    words = mask_secrets(row.cmdline) if row.cmdline else [row.name]
    return " ".join(words)


def shown_command(row: ProcessSample | None) -> str:
    """The masked command line as `gputop_trainer_info` carries it, cut to COMMAND_CHARS."""
    line = command_line(row)
    return line if len(line) <= COMMAND_CHARS else line[:COMMAND_CHARS - 1] + "…"


def stable_id(host: str, command: str, rank: str = "", ordinal: int = 0) -> str:
    """The hash of a trainer's host, masked command line, rank (and ordinal past the first)."""
    key = "\0".join((host, command, rank) + ((str(ordinal),) if ordinal else ()))
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:HASH_CHARS]


def _rank(frame: Frame, pid: int) -> str:
    """The rank of a trainer that is one of several ranks ("" for a lone process)."""
    for state in frame.attached:
        if state.pid == pid:
            c = state.config
            multi = c.world_size is not None and c.world_size > 1
            return str(c.rank) if multi and c.rank is not None else ""
    return ""


def trainer_ids(frame: Frame, pids: Iterable[int]) -> dict[int, str]:
    """Each trainer PID's stable `trainer` label (see the module's docstring)."""
    host = frame.host.hostname
    rows = {r.pid: r for r in frame.processes}
    keyed: dict[tuple[str, str], list[int]] = {}
    for pid in set(pids):
        keyed.setdefault((command_line(rows.get(pid)) or f"pid {pid}", _rank(frame, pid)),
                         []).append(pid)
    ids: dict[int, str] = {}
    for (command, rank), same in keyed.items():
        same.sort(key=lambda pid: (rows[pid].start_ticks if pid in rows else 0, pid))
        for ordinal, pid in enumerate(same):
            ids[pid] = stable_id(host, command, rank, ordinal)
    return ids


def job_id(frame: Frame, pid: int) -> str:
    """A stable name for the job a trainer or launcher `pid` heads: its host and command."""
    row = next((r for r in frame.processes if r.pid == pid), None)
    return stable_id(frame.host.hostname, command_line(row) or f"pid {pid}")
