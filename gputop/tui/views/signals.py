"""What `k` offers to signal, and how the confirmation names it: PIDs, names and a count."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass

from gputop.core.model import Frame, ProcessSample
from gputop.tui.views.processes import Row

SIGNALS: tuple[tuple[str, str, int], ...] = (  # key in the confirmation, name, number
    ("t", "SIGTERM", int(signal.SIGTERM)),
    ("K", "SIGKILL", int(signal.SIGKILL)),
    ("i", "SIGINT", int(signal.SIGINT)),
)
READ_ONLY = "read-only (--readonly): gputop sends no signals"


@dataclass(frozen=True, slots=True)
class SignalTargets:
    """The process under the cursor and, when it belongs to a trainer, that trainer with its
    workers; `whole` says which of the two the confirmation offers first."""

    process: ProcessSample
    trainer: tuple[ProcessSample, ...] = ()  # the trainer first, then its workers
    whole: bool = False

    def chosen(self) -> tuple[ProcessSample, ...]:
        """The processes a signal would go to now."""
        return self.trainer if self.whole and self.trainer else (self.process,)

    def toggled(self) -> SignalTargets:
        """The other choice: only this process, or the whole trainer with its workers."""
        return SignalTargets(self.process, self.trainer, not self.whole and bool(self.trainer))


def signal_targets(row: Row, frame: Frame) -> SignalTargets:
    """What `k` on `row` offers: a trainer's row the trainer with every worker, a worker's
    row the worker (the whole trainer one key away), any other row its process."""
    proc = row.process
    trainer_pid = proc.pid if row.group is not None else proc.trainer_pid
    group = next((g for g in frame.trainers if g.pid == trainer_pid), None)
    if group is None:
        return SignalTargets(proc)
    members = frame.processes_of((group.pid, *group.worker_pids))
    return SignalTargets(proc, tuple(members), whole=proc.pid == group.pid)


def foreign(processes: Sequence[ProcessSample]) -> str | None:
    """Why gputop cannot signal one of `processes` at all: a PID from another PID namespace
    (NVML lists it, /proc here does not) names some other process, or none, here."""
    for proc in processes:
        if not proc.in_proc:
            return (f"PID {proc.pid} has no /proc entry here (another PID namespace): "
                    "gputop cannot signal it")
    return None


def describe(processes: Sequence[ProcessSample]) -> str:
    """The processes a signal goes to, by count, PID and name; a trainer and workers say so."""
    named = ", ".join(f"{p.pid} {p.name}{_role(p)}" for p in processes)
    count = len(processes)
    return f"{count} processes: {named}" if count > 1 else f"PID {named}"


def _role(proc: ProcessSample) -> str:
    if proc.role in ("trainer", "worker", "launcher"):
        return f" ({proc.role})"
    return ""


def owner(processes: Sequence[ProcessSample]) -> str:
    """Whose processes these are, as the table shows it ("alice", "alice, bob")."""
    users = sorted({p.username or "?" for p in processes})
    return ", ".join(users)
