"""Pure worker grouping: which processes are trainers, DataLoader workers and launchers.

torch >= 2.5 names a DataLoader worker's main thread (so its /proc comm) `pt_data_worker`,
the trainer's pin-memory thread `pt_data_pin`, and torchrun's process `pt_elastic`.
Older torch names nothing; `legacy_candidates` covers it conservatively, kept apart.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gputop.core.model import Role, TrainerGroup

WORKER_COMM = "pt_data_worker"
PIN_THREAD_COMM = "pt_data_pin"
LAUNCHER_COMM = "pt_elastic"
FORKSERVER_MARK = "from multiprocessing.forkserver import main"
RESOURCE_TRACKER_MARK = "multiprocessing.resource_tracker"
SPAWN_MARK = "from multiprocessing.spawn import spawn_main"
MAX_DEPTH = 64


class ProcRow(Protocol):
    """What grouping reads from a process (ProcessSample satisfies it)."""

    @property
    def pid(self) -> int: ...
    @property
    def ppid(self) -> int | None: ...
    @property
    def name(self) -> str: ...
    @property
    def cmdline(self) -> tuple[str, ...]: ...
    @property
    def num_threads(self) -> int | None: ...
    @property
    def cpu_percent(self) -> float | None: ...
    @property
    def gpu_memory_bytes(self) -> int | None: ...
    @property
    def gpu_indices(self) -> tuple[int, ...]: ...


@dataclass(frozen=True)
class Grouping:
    """Roles that are not "other", and the links between workers, trainers and launchers."""

    roles: Mapping[int, Role] = field(default_factory=dict)
    trainer_of: Mapping[int, int] = field(default_factory=dict)
    workers_of: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    launcher_of: Mapping[int, int] = field(default_factory=dict)

    def role(self, pid: int) -> Role:
        """The role of `pid` ("other" when nothing marked it)."""
        return self.roles.get(pid, "other")


def is_helper(row: ProcRow, by_pid: Mapping[int, ProcRow]) -> bool:
    """The multiprocessing forkserver or resource_tracker: never a trainer, skipped on walks.

    A child the forkserver forked keeps the server's cmdline, so it is a helper only
    when its parent is not the forkserver.
    """
    text = " ".join(row.cmdline)
    if RESOURCE_TRACKER_MARK in text:
        return True
    if FORKSERVER_MARK not in text:
        return False
    parent = by_pid.get(row.ppid) if row.ppid else None
    return parent is None or not is_forkserver(parent)


def is_forkserver(row: ProcRow) -> bool:
    """The multiprocessing forkserver, parent of every child started by forkserver."""
    return FORKSERVER_MARK in " ".join(row.cmdline)


def is_spawn_child(row: ProcRow) -> bool:
    """A child started by multiprocessing's spawn method (python -c 'from ... spawn_main')."""
    return SPAWN_MARK in " ".join(row.cmdline)


def is_python(row: ProcRow) -> bool:
    """A Python interpreter, by comm or argv[0]."""
    if row.name.startswith(("python", "pt_main_thread")):
        return True
    return (bool(row.cmdline) and "python" in row.cmdline[0]  # most rows stop here
            and os.path.basename(row.cmdline[0]).startswith("python"))


def uses_gpu(row: ProcRow) -> bool:
    """Whether NVML lists this process on any device."""
    return bool(row.gpu_indices) or row.gpu_memory_bytes is not None


def matters(row: ProcRow) -> bool:
    """Whether a process can take a part in a grouping itself (a Python process, one named
    by torch, one on a GPU): one that is none of these, coming or going, changes nothing
    unless its parent is one."""
    return row.name in (WORKER_COMM, LAUNCHER_COMM) or uses_gpu(row) or is_python(row)


def involved(rows: Iterable[ProcRow], grouping: Grouping) -> frozenset[int]:
    """The PIDs a grouping of `rows` rests on: those that matter and those it names."""
    pids = {row.pid for row in rows if matters(row)}
    pids.update(grouping.roles, grouping.trainer_of.values(), grouping.launcher_of.values())
    return frozenset(pids)


def classify(
    rows: Iterable[ProcRow],
    probe_pids: frozenset[int] = frozenset(),
    legacy: Mapping[int, int] | None = None,
) -> Grouping:
    """Assign roles; `legacy` maps extra worker pids to trainers for torch < 2.5 (see below)."""
    by_pid = {row.pid: row for row in rows}
    roles: dict[int, Role] = {}
    trainer_of: dict[int, int] = {}
    for row in by_pid.values():
        if row.name == WORKER_COMM:
            roles[row.pid] = "worker"
            trainer = _first_non_worker_ancestor(row, by_pid)
            if trainer is not None:
                trainer_of[row.pid] = trainer
        elif row.name == LAUNCHER_COMM:
            roles[row.pid] = "launcher"
    for worker, trainer in (legacy or {}).items():
        if worker in by_pid and worker not in roles and trainer not in trainer_of:
            roles[worker] = "worker"
            trainer_of[worker] = trainer
    for trainer in set(trainer_of.values()):
        roles.setdefault(trainer, "trainer")
    for row in by_pid.values():
        if row.pid in roles or not (row.pid in probe_pids or (uses_gpu(row) and is_python(row))):
            continue
        if not is_helper(row, by_pid):
            roles[row.pid] = "trainer"
    workers_of: dict[int, list[int]] = {}
    for worker, trainer in trainer_of.items():
        workers_of.setdefault(trainer, []).append(worker)
    launcher_of = {
        pid: launcher
        for pid, role in roles.items()
        if role == "trainer" and (launcher := _launcher_above(pid, by_pid, roles)) is not None
    }
    return Grouping(
        roles=roles,
        trainer_of=trainer_of,
        workers_of={t: tuple(sorted(w)) for t, w in workers_of.items()},
        launcher_of=launcher_of,
    )


def trainer_groups(
    grouping: Grouping, rows: Mapping[int, ProcRow], pin_pids: frozenset[int]
) -> tuple[TrainerGroup, ...]:
    """One TrainerGroup per trainer, by pid; `pin_pids` are trainers with a pt_data_pin thread."""
    groups = []
    for pid in sorted(p for p, role in grouping.roles.items() if role == "trainer"):
        trainer = rows.get(pid)
        workers = grouping.workers_of.get(pid, ())
        members = [rows[w] for w in workers if w in rows]
        threads = [r.num_threads for r in ([trainer] if trainer else []) + members]
        groups.append(
            TrainerGroup(
                pid=pid,
                worker_pids=workers,
                workers_cpu_percent=sum(r.cpu_percent or 0.0 for r in members),
                num_threads_total=sum(t or 0 for t in threads),
                pin_memory_thread=pid in pin_pids,
                launcher_pid=grouping.launcher_of.get(pid),
            )
        )
    return tuple(groups)


def _first_non_worker_ancestor(row: ProcRow, by_pid: Mapping[int, ProcRow]) -> int | None:
    """Walk up past workers and multiprocessing helpers; None for orphans (init adopted them)."""
    current = row
    for _ in range(MAX_DEPTH):
        parent = by_pid.get(current.ppid) if current.ppid else None
        if parent is None or parent.pid == 1:
            return None
        if parent.name != WORKER_COMM and not is_helper(parent, by_pid):
            return parent.pid
        current = parent
    return None


def _launcher_above(
    pid: int, by_pid: Mapping[int, ProcRow], roles: Mapping[int, Role]
) -> int | None:
    """The nearest pt_elastic ancestor of a trainer, if any."""
    current = by_pid.get(pid)
    for _ in range(MAX_DEPTH):
        if current is None or not current.ppid:
            return None
        if roles.get(current.ppid) == "launcher":
            return current.ppid
        current = by_pid.get(current.ppid)
    return None


# --- torch < 2.5: no thread names. Conservative, and only for parents proven to run old torch.


def legacy_candidates(rows: Iterable[ProcRow]) -> dict[int, int]:
    """Unnamed multiprocessing children of Python processes: child pid -> would-be trainer.

    A candidate is a Python child that is not a helper, holds no GPU, is not itself a
    parent of such children, and either was spawned (spawn_main), forked by the
    forkserver, or forked directly (same comm and argv as its parent). The caller keeps
    only those whose trainer is shown to have loaded torch older than 2.5.
    """
    by_pid = {row.pid: row for row in rows}
    named = {
        _first_non_worker_ancestor(r, by_pid) for r in by_pid.values() if r.name == WORKER_COMM
    }
    found: dict[int, int] = {}
    python_parent: dict[int, bool] = {}  # each parent judged once, however many children
    forkserver: dict[int, bool] = {}
    for row in by_pid.values():
        parent = by_pid.get(row.ppid) if row.ppid else None
        if parent is None or parent.pid == 1:
            continue
        if (is_py := python_parent.get(parent.pid)) is None:
            is_py = python_parent[parent.pid] = is_python(parent)
        if not is_py:
            continue  # most processes stop here: their parent is no Python
        trainer: ProcRow | None = None
        if (is_fs := forkserver.get(parent.pid)) is None:
            is_fs = forkserver[parent.pid] = is_forkserver(parent)
        if is_fs:
            trainer = by_pid.get(parent.ppid) if parent.ppid else None
        elif (row.name == parent.name and row.cmdline == parent.cmdline) or is_spawn_child(row):
            trainer = parent
        if trainer is None or trainer.pid == 1 or not is_python(trainer):
            continue  # and most children of a Python process here
        if row.name in (WORKER_COMM, LAUNCHER_COMM) or is_helper(row, by_pid) or uses_gpu(row):
            continue
        if trainer.pid not in named:
            found[row.pid] = trainer.pid
    # A candidate with candidates beneath it is a trainer-like parent, not a worker.
    parents = set(found.values())
    return {w: t for w, t in found.items() if w not in parents}


def torch_version_below(version: str, major: int, minor: int) -> bool:
    """Whether a torch version string ("2.4.1+cu121") is older than major.minor."""
    parts = version.split("+")[0].split(".")
    try:
        return (int(parts[0]), int(parts[1])) < (major, minor)
    except (IndexError, ValueError):
        return False


KTHREADD = 2  # the kernel's thread creator (parent 0): every kernel thread is it or its child


def is_kernel_thread(row: ProcRow) -> bool:
    """A kernel thread ([kworker/0:1] and kin), hidden by default as htop hides them."""
    return row.ppid == KTHREADD or (row.pid == KTHREADD and not row.ppid)
