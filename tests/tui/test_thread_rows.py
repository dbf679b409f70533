"""H's rows: each process's threads beneath it (TID in the PID column, the thread's name as
the command, dim), sorted by the key; none while H is off or the process is folded."""

from __future__ import annotations

from dataclasses import replace

from gputop.core.model import Frame, ThreadSample
from gputop.tui.views.processes import (
    COLUMNS,
    TableState,
    badge,
    fold_pid,
    row_line,
    table_rows,
)
from tests.helpers.builders import frame, process, trainer_with_workers

ON = TableState(threads=True)


def _thread(tid: int, name: str, cpu: float | None) -> ThreadSample:
    return ThreadSample(tid=tid, comm=name, state="S", start_ticks=tid, cpu_percent=cpu,
                        cpu_time_s=1.0)


def _with_threads() -> Frame:
    job, group = trainer_with_workers(100, workers=1, worker_cpu=10.0)
    shown = frame(processes=[*job, process(300, cpu=50.0)], trainers=(group,))
    return replace(shown, threads={
        100: (_thread(110, "pt_data_pin", 1.0), _thread(111, "pt_autograd", 30.0)),
        101: (_thread(120, "loader-io", None),),
        300: (_thread(310, "busy-helper", 5.0),)})


def _listed(state: TableState, shown: Frame) -> list[tuple[int, bool]]:
    return [(row.process.pid, row.thread) for row in table_rows(shown, state)]


def test_h_off_lists_no_thread_even_when_the_frame_has_some() -> None:
    assert not any(thread for _, thread in _listed(TableState(), _with_threads()))


def test_h_on_lists_each_process_threads_beneath_it_busiest_first() -> None:
    assert _listed(ON, _with_threads()) == [
        (100, False), (111, True), (110, True), (101, False), (120, True),
        (300, False), (310, True)]


def test_a_folded_trainer_shows_neither_workers_nor_threads() -> None:
    folded = replace(ON, collapsed=frozenset({100}))
    assert _listed(folded, _with_threads()) == [(100, False), (300, False), (310, True)]


def test_the_filter_keeps_the_matching_process_with_its_threads() -> None:
    assert _listed(replace(ON, filter="300"), _with_threads()) == [(300, False), (310, True)]


def test_a_thread_row_shows_its_tid_and_name_dim_and_folds_nothing() -> None:
    row = next(row for row in table_rows(_with_threads(), ON) if row.process.pid == 111)
    line = row_line(row, COLUMNS, 120, selected=False)
    text = "".join(span for span, _ in line)
    assert text.lstrip().startswith("111 ")
    assert text.rstrip().endswith("pt_autograd")
    assert "30.0" in text
    assert {style for _, style in line} == {"dim"}
    assert fold_pid(row) is None


def test_in_the_tree_thread_rows_take_the_tree_guides() -> None:
    rows = table_rows(_with_threads(), replace(ON, tree=True))
    texts = {row.process.pid: "".join(s for s, _ in row_line(row, COLUMNS, 120, False))
             for row in rows}
    assert "├─ pt_autograd" in texts[111]
    assert "└─ loader-io" in texts[120]


def test_the_badge_says_threads_while_h_is_on() -> None:
    assert "threads" in badge(ON)
    assert "threads" not in badge(TableState())
