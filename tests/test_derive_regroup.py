"""Roles are worked out again only when what changed can change them: a process that has
nothing to do with Python, torch or a GPU coming and going on a busy machine does not
make every tick regroup thousands of processes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import pytest

from gputop.analysis import grouping
from gputop.core.model import ProcessSample
from gputop.frames.derive import Derivation
from gputop.sources.base import ProcessScan, ProcessWaits
from tests.helpers import builders
from tests.helpers.spy import spy


class _Quiet:
    """What derive asks the process source besides the scan: no old torch, no waits known,
    no pin-memory thread."""

    def torch_version(self, pid: int) -> str | None:
        return None

    def waits(self, pids: Iterable[int]) -> dict[int, ProcessWaits]:
        return {}

    def threads_named(self, pids: Iterable[int], comm: str) -> frozenset[int]:
        return frozenset()


def _sleeper(pid: int, ppid: int = 1) -> ProcessSample:
    return replace(builders.process(pid, ppid=ppid), name="sleep", cmdline=("sleep", "60"))


def test_regrouping_only_when_what_changed_can_matter(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(grouping, "classify",
                        spy(grouping.classify, lambda *a, **k: calls.append(1)))
    trainer = builders.process(10)
    worker = replace(builders.process(11, ppid=10), name=grouping.WORKER_COMM)
    rows = (trainer, worker, *(_sleeper(pid) for pid in range(100, 300)))
    derive, source = Derivation(), _Quiet()

    def tick(rows: tuple[ProcessSample, ...], moved: tuple[ProcessSample, ...] | None = (),
             gone: frozenset[int] = frozenset()) -> dict[int, ProcessSample]:
        scan = ProcessScan(rows, bool(moved is None or moved or gone), moved, gone)
        return {row.pid: row for row in derive.processes(scan, frozenset(), source)[0]}

    assert tick(rows, None)[11].role == "worker" and len(calls) == 1
    born = _sleeper(999)
    tick((*rows, born), (born,))  # an unrelated process started
    tick(rows, (), frozenset({999}))  # and ended
    assert len(calls) == 1
    child = _sleeper(998, ppid=10)  # a child of the trainer: a would-be worker
    tick((*rows, child), (child,))
    assert len(calls) == 2
    assert 11 not in tick(rows[:1] + rows[2:], (), frozenset({11}))  # the worker ended
    assert len(calls) == 3
    tick(rows, None)  # a source that does not say what changed
    assert len(calls) == 4
