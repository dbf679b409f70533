"""A tick of derive looks at each ordinary process row once: roles, waits and the trainer
groups touch the few rows they concern, not the hundreds of others (counted in attribute
reads); and the rows come out as they did when waits were a second pass."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from gputop.analysis import grouping
from gputop.core.model import ProcessSample
from gputop.frames.derive import Derivation
from gputop.sources.base import ProcessScan, ProcessWaits
from tests.helpers import builders
from tests.helpers.watched import reads, watched

OTHERS = 400


class _Waits:
    """The process source's on-demand facts: each asked pid waits `wait` %."""

    def __init__(self) -> None:
        self.wait = 10.0

    def torch_version(self, pid: int) -> str | None:
        return None

    def waits(self, pids: Iterable[int]) -> dict[int, ProcessWaits]:
        return {pid: ProcessWaits(self.wait, 1.0, 2.0, 3.0) for pid in pids}

    def threads_named(self, pids: Iterable[int], comm: str) -> frozenset[int]:
        return frozenset()


def _job() -> tuple[ProcessSample, ...]:
    trainer = replace(builders.process(10), gpu_indices=(0,), gpu_memory_bytes=1 << 30)
    workers = tuple(replace(builders.process(w, ppid=10), name=grouping.WORKER_COMM)
                    for w in (11, 12))
    return (trainer, *workers)


def _others() -> tuple[ProcessSample, ...]:
    return tuple(watched(builders.process(pid)) for pid in range(1000, 1000 + OTHERS))


def _reads_per_row(derive: Derivation, scan: ProcessScan, source: _Waits) -> float:
    reads[0] = 0
    derive.processes(scan, frozenset(), source)
    return reads[0] / OTHERS


def test_a_steady_tick_reads_each_ordinary_row_once() -> None:
    rows = (*_job(), *_others())
    derive, source = Derivation(), _Waits()
    derive.processes(ProcessScan(rows, True), frozenset(), source)
    # A source that does not say which rows use a GPU: derive finds them, then marks.
    assert _reads_per_row(derive, ProcessScan(rows, False, ()), source) <= 3
    told = ProcessScan(rows, False, (), frozenset(), frozenset({10}))
    assert _reads_per_row(derive, told, source) <= 1


def test_a_scan_that_says_where_rows_are_leaves_ordinary_rows_unread() -> None:
    rows = (*_job(), *_others())
    positions = {row.pid: at for at, row in enumerate(rows)}
    derive, source = Derivation(), _Waits()
    first = derive.processes(ProcessScan(rows, True, positions=positions), frozenset(), source)
    placed = ProcessScan(rows, False, (), frozenset(), frozenset({10}), positions)
    assert _reads_per_row(derive, placed, source) == 0
    assert derive.processes(placed, frozenset(), source) == first


def test_rows_come_out_the_same_whether_or_not_the_scan_places_them() -> None:
    job, others = _job(), tuple(builders.process(pid) for pid in range(1000, 1010))
    ticks = [((*job, *others), frozenset()), ((*job, *others), frozenset({10})),
             ((job[0], job[1], replace(job[2], ppid=1), *others), frozenset({10}))]
    walked, placed, source = Derivation(), Derivation(), _Waits()
    for rows, probes in ticks:
        positions = {row.pid: at for at, row in enumerate(rows)}
        out = walked.processes(ProcessScan(rows, True), probes, source)
        assert placed.processes(ProcessScan(rows, True, positions=positions), probes,
                                source) == out


def test_rows_carry_roles_and_this_ticks_waits() -> None:
    job, others = _job(), tuple(builders.process(pid) for pid in range(1000, 1010))
    derive, source = Derivation(), _Waits()

    def tick(rows: tuple[ProcessSample, ...], probes: frozenset[int] = frozenset()) -> dict[
            int, ProcessSample]:
        out, _ = derive.processes(ProcessScan(rows, True), probes, source)
        return {row.pid: row for row in out}

    first = tick((*job, *others))
    assert [first[p].role for p in (10, 11, 12)] == ["trainer", "worker", "worker"]
    assert {first[p].runqueue_wait_percent for p in (10, 11, 12)} == {10.0}
    assert first[1000] is others[0] and first[1000].runqueue_wait_percent is None
    source.wait = 20.0
    second = tick((*job, *others), frozenset({10}))
    assert second[10].has_probe and second[11].runqueue_wait_percent == 20.0
    again = tick((*job, *others), frozenset({10}))
    assert again[11] is second[11], "unchanged marks and waits keep the row"
    # A worker re-parented away from its trainer: no waits asked, its row's own (none).
    orphan = replace(job[2], ppid=1)
    after = tick((job[0], job[1], orphan, *others))
    assert after[12] == replace(orphan, role="worker")
    assert after[11].runqueue_wait_percent == 20.0
