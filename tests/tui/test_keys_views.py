"""The pure parts behind the new keys: the full tree, the badge, the columns kept for the
sort, the column under a click, what `k` names, and the advice page's wrapping."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from gputop.core.model import Advice, Frame, ProcessSample, TrainerGroup
from gputop.tui.views import processes as processes_view
from gputop.tui.views.advice import advice_page_lines
from gputop.tui.views.processes import (
    COMMAND_MIN,
    Rows,
    TableState,
    badge,
    columns_for,
    fold_pid,
    header_line,
    sort_key_at,
    table_rows,
)
from gputop.tui.views.signals import describe, signal_targets
from tests.helpers.spy import spy
from tests.helpers.tui import frames


def _frame() -> Frame:
    return frames("data-starved", 1)[0]


def _proc(pid: int, ppid: int | None, cpu: float = 0.0) -> ProcessSample:
    return ProcessSample(pid=pid, ppid=ppid, name=f"p{pid}", cmdline=(f"p{pid}",),
                         username="ana", state="S", num_threads=1, cpu_percent=cpu,
                         rss_bytes=0, cpu_time_s=0.0, start_ticks=pid)


def _tree(frame: Frame, filter: str = "", only_gpu: bool = False) -> Rows:
    """The full tree's rows, filtered by `filter` and `only_gpu` as TableState does."""
    return table_rows(frame, TableState(tree=True, filter=filter, only_gpu=only_gpu))


def test_tree_guides_show_siblings_still_to_come() -> None:
    frame = replace(_frame(), processes=(
        _proc(1, 0), _proc(10, 1, cpu=5), _proc(11, 10), _proc(20, 1, cpu=1), _proc(21, 20)),
        trainers=())
    rows = _tree(frame)
    assert [(r.process.pid, r.guides, r.children) for r in rows] == [
        (1, "", 2), (10, "├─ ", 1), (11, "│  └─ ", 0), (20, "└─ ", 1), (21, "   └─ ", 0)]


def test_a_parent_loop_loses_no_process_and_ends() -> None:
    """PIDs reused between two /proc reads can make A's parent B and B's parent A."""
    frame = replace(_frame(), processes=(_proc(5, 6), _proc(6, 5), _proc(7, 6), _proc(8, 8)),
                    trainers=())
    assert sorted(r.process.pid for r in _tree(frame)) == [5, 6, 7, 8]


def test_tree_filter_keeps_the_path_from_the_root_to_a_match() -> None:
    rows = _tree(_frame(), filter="torchrun")
    assert [r.process.pid for r in rows][:4] == [1, 812, 4100, 5300]
    assert {5310, 5321, 5322} <= {r.process.pid for r in rows}  # what runs beneath comes along
    assert 4242 not in {r.process.pid for r in rows}


def test_tree_gpu_only_keeps_trainers_workers_and_their_ancestors() -> None:
    pids = {r.process.pid for r in _tree(_frame(), only_gpu=True)}
    assert pids == {1, 812, 4100, 4242, 4251, 4252, 4253, 5300, 5310, 5321, 5322}


def test_fold_in_the_tree_is_the_row_itself_and_in_groups_the_trainer() -> None:
    tree = {r.process.pid: r for r in _tree(_frame())}
    assert fold_pid(tree[4100]) == 4100 and fold_pid(tree[4251]) is None
    grouped = {r.process.pid: r for r in table_rows(_frame(), TableState())}
    assert fold_pid(grouped[4251]) == 4242 and fold_pid(grouped[6200]) is None


def test_the_sorted_column_stays_when_narrow_columns_go() -> None:
    assert "TIME" not in [c.name for c in columns_for(80)]
    kept = [c.name for c in columns_for(80, keep="TIME")]
    assert "TIME" in kept and sum(c.width + 1 for c in columns_for(80, "TIME")) + \
        COMMAND_MIN <= 80
    assert [c.name for c in columns_for(80, keep="%CPU")] == [c.name for c in columns_for(80)]


def test_a_click_maps_to_the_column_under_it() -> None:
    columns = columns_for(120)
    title = "".join(text for text, _ in header_line(columns, TableState(), 120))
    for name, key in (("PID", "pid"), ("GPU MEM", "gpu"), ("%CPU", "cpu"), ("RSS", "rss"),
                      ("TIME", "time")):
        assert sort_key_at(columns, title.index(name)) == key, name
    for name in ("USER", "THR", "COMMAND"):
        assert sort_key_at(columns, title.index(name)) is None, name


def test_the_badge_shows_only_off_the_default_view() -> None:
    assert badge(TableState()) == "" and badge(TableState(collapsed=frozenset({1}))) == ""
    assert badge(TableState(filter="  lr ")) == " filter: lr · sort: %CPU▼ "
    assert badge(TableState(sort="pid", ascending=True, tree=True, only_gpu=True)) == \
        " sort: PID▲ · tree · GPU only "
    assert "\x1b" not in badge(TableState(filter="\x1b[2J"))  # typed text reaches no terminal


def test_a_long_filter_is_cut_to_the_title_row_with_command_still_there() -> None:
    line = header_line(columns_for(80), TableState(filter="x" * 200), 80)
    text = "".join(t for t, _ in line)
    assert len(text) == 80 and "COMMAND" in text and "…" in text


def test_k_on_a_trainer_offers_it_with_every_worker_by_pid_and_name() -> None:
    frame = _frame()
    rows = {r.process.pid: r for r in table_rows(frame, TableState())}
    trainer = signal_targets(rows[4242], frame)
    assert trainer.whole and [p.pid for p in trainer.chosen()] == [4242, 4251, 4252, 4253]
    worker = signal_targets(rows[4251], frame)
    assert [p.pid for p in worker.chosen()] == [4251]
    assert [p.pid for p in worker.toggled().chosen()] == [4242, 4251, 4252, 4253]
    plain = signal_targets(rows[6200], frame)
    assert plain.trainer == () and plain.toggled().chosen() == plain.chosen()
    assert describe(plain.chosen()) == "PID 6200 tensorboard"


def test_the_advice_page_wraps_every_item_whole() -> None:
    long = Advice(id="x", severity="critical", title="GPUs are waiting for input",
                  evidence="e " * 70 + "END-OF-EVIDENCE", action="a " * 70 + "END-OF-ACTION")
    lines = advice_page_lines([long], 40)
    texts = ["".join(t for t, _ in line) for line in lines]
    assert all(len(t) <= 40 for t in texts) and not any("…" in t for t in texts)
    assert any("END-OF-EVIDENCE" in t for t in texts) and any("END-OF-ACTION" in t for t in texts)
    assert texts[:3] == ["advice: 1 item", "↑ ↓ PgUp PgDn scroll; Esc or A closes", ""]
    assert texts[3].startswith("✖ GPUs are waiting") and texts[4].startswith("  e e")


def _busy_and_idle() -> Frame:
    """Idle processes (0 %, unknown %) out of PID order, busy ones with ties, a trainer
    that is idle itself but whose workers are busy."""
    procs = [_proc(pid, 1, cpu=cpu) for pid, cpu in (
        (90, 0.0), (7, 3.0), (55, 0.0), (12, 3.0), (3, 50.0), (70, 0.0), (40, 0.5))]
    procs.append(replace(_proc(30, 1), cpu_percent=None))
    trainer = replace(_proc(60, 1), role="trainer")
    worker = replace(_proc(61, 60, cpu=20.0), role="worker", trainer_pid=60)
    group = TrainerGroup(pid=60, worker_pids=(61,), workers_cpu_percent=20.0,
                         num_threads_total=2, pin_memory_thread=False)
    return replace(_frame(), processes=(*procs, trainer, worker), trainers=(group,))


@pytest.mark.parametrize("ascending", [False, True])
def test_the_cpu_sort_orders_busy_then_idle_by_pid(ascending: bool) -> None:
    rows = table_rows(_busy_and_idle(), TableState(ascending=ascending))
    order = [r.process.pid for r in rows if r.depth == 0]
    descending = [3, 60, 7, 12, 40, 30, 55, 70, 90]  # %CPU (a trainer's with its workers), PID
    assert order == (descending[::-1] if ascending else descending)


def test_the_cpu_sort_asks_no_sort_key_of_idle_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Most of a machine's processes are idle: they keep their PID order, no key made."""
    asked: list[int] = []
    real = processes_view._sort_value

    def counting(sort: str, groups: dict[int, TrainerGroup]
                 ) -> Callable[[ProcessSample], tuple[float, int]]:
        return spy(real(sort, groups), lambda proc: asked.append(proc.pid))

    monkeypatch.setattr(processes_view, "_sort_value", counting)
    table_rows(_busy_and_idle(), TableState())
    assert sorted(set(asked)) == [3, 7, 12, 40, 60, 61]  # the busy, and the busy group's


def test_trainer_groups_come_out_the_same_by_either_path() -> None:
    """With nothing filtered the groups are spliced into the sorted processes; a fold of a
    PID not listed sends the same frame down the filtering path: the rows agree."""
    frame = _busy_and_idle()
    for ascending in (False, True):
        state = TableState(ascending=ascending)
        spliced = table_rows(frame, state)
        looped = table_rows(frame, replace(state, collapsed=frozenset({99999})))
        assert [(r.process.pid, r.depth, r.group, r.last) for r in spliced] == [
            (r.process.pid, r.depth, r.group, r.last) for r in looped]
        assert any(r.group is not None for r in spliced) and any(r.depth for r in spliced)
