"""The process table's rows are found without extra passes over a machine's idle processes:
a trainer's rows and its workers' come from the frame's index (the sampler's), so an idle
row is read only to sort it (counted in attribute reads, not timed: 8 a row before)."""

from __future__ import annotations

from dataclasses import replace

from gputop.tui.views.processes import TableState, table_rows
from tests.helpers.builders import frame, process, trainer_with_workers
from tests.helpers.watched import reads, watched

IDLE = 400


def test_an_idle_row_is_read_only_to_sort_it() -> None:
    job, group = trainer_with_workers(10, workers=3, worker_cpu=50.0)
    idle = [watched(process(pid, cpu=0.0)) for pid in range(1000, 1000 + IDLE)]
    unplaced = frame(processes=[*job, *idle], trainers=(group,))
    rows = unplaced.processes
    placed = replace(unplaced, process_index=(rows, {row.pid: at for at, row in enumerate(rows)}))
    reads[0] = 0
    shown = table_rows(placed, TableState())
    # %CPU and PID to tell busy from idle (twice: a comprehension each), PID to sort the idle
    # and to find the trainers among the sorted, PPID to leave the kernel's threads out; none
    # to look a trainer or worker up
    assert reads[0] / IDLE <= 7
    assert [row.process.pid for row in shown] == [
        row.process.pid for row in table_rows(unplaced, TableState())]
    assert [row.process.pid for row in shown][:5] == [10, 11, 12, 13, 1000]
