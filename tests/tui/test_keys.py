"""Pilot tests for the keys htop and nvitop users reach for: k (signal, with a confirmation that
names its targets; none under --readonly), T (the full tree), a click on a column title (sort),
the filter line and the badge, the sorted column kept on screen, A (the advice whole)."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

import pytest
from textual import events
from textual.widgets import Input

from gputop.core import fmt
from gputop.tui import build_app
from gputop.tui.app import GputopApp
from gputop.tui.views.signals import READ_ONLY
from gputop.tui.widgets.advice_page import AdvicePage
from gputop.tui.widgets.linepane import LinePane
from gputop.tui.widgets.signal_prompt import SignalPrompt
from gputop.tui.widgets.table import ProcessTable
from tests.helpers.tui import (
    FedSampler,
    RecordingSignaller,
    first_frames,
    notices,
    running,
    screen_text,
    sync,
)

if TYPE_CHECKING:
    from textual.pilot import Pilot

TRAINER, WORKERS = 4242, (4251, 4252, 4253)


def _app(signaller: RecordingSignaller | None = None) -> GputopApp:
    return build_app(FedSampler(), signaller=signaller)


def _table(app: GputopApp) -> ProcessTable:
    return app.query_one(ProcessTable)


def _pids(app: GputopApp) -> list[int]:
    return [row.process.pid for row in _table(app).rows]


def _title_row(app: GputopApp) -> str:
    return _table(app).text.splitlines()[0]


def _key(app: GputopApp, pid: int) -> tuple[int, int]:
    assert app.frame is not None
    return next(p.key for p in app.frame.processes if p.pid == pid)


async def _cursor_to(app: GputopApp, pilot: Pilot[int], pid: int) -> None:
    table = _table(app)
    for _ in range(len(table.rows)):
        if table.selected is not None and table.selected.process.pid == pid:
            return
        await pilot.press("down")
    raise AssertionError(f"{pid} is not in the table")


# ---- k: signals ---------------------------------------------------------------------------

@sync
async def test_k_on_a_trainer_names_it_and_its_workers_and_t_sends_sigterm_to_all() -> None:
    signaller = RecordingSignaller()
    app = _app(signaller)
    async with running(app, *first_frames()) as pilot:
        selected = _table(app).selected
        assert selected is not None
        assert selected.process.pid == TRAINER  # the busiest row
        await pilot.press("k")
        assert isinstance(app.screen, SignalPrompt)
        question = "\n".join(screen_text(app))
        assert ("send a signal to 4 processes: 4242 python (trainer), 4251 pt_data_worker "
                "(worker), 4252 pt_data_worker (worker), 4253 pt_data_worker (worker) "
                "(user ana)?") in " ".join(question.split())
        assert "t SIGTERM" in question and "K SIGKILL" in question and "Esc cancel" in question
        await pilot.press("t")
        assert not isinstance(app.screen, SignalPrompt)
        keys = [_key(app, pid) for pid in (TRAINER, *WORKERS)]
        assert signaller.sent == [(keys, signal.SIGTERM)]
        assert "SIGTERM sent to 4 processes: 4242 python (trainer)" in notices(app)[-1]


@pytest.mark.parametrize(("key", "signum"), [("K", signal.SIGKILL), ("i", signal.SIGINT)])
@sync
async def test_k_then_the_signal_key_sends_that_signal(key: str, signum: int) -> None:
    signaller = RecordingSignaller()
    app = _app(signaller)
    async with running(app, *first_frames()) as pilot:
        await pilot.press("f9", key)  # F9, as in htop, opens the same confirmation
        assert [sig for _, sig in signaller.sent] == [signum]


@sync
async def test_escape_cancels_and_a_second_k_sends_nothing() -> None:
    signaller = RecordingSignaller()
    app = _app(signaller)
    async with running(app, *first_frames()) as pilot:
        await pilot.press("k", "k")
        assert isinstance(app.screen, SignalPrompt)  # k again is no answer: K kills
        await pilot.press("escape")
        assert not isinstance(app.screen, SignalPrompt)
        assert signaller.sent == []


@sync
async def test_on_a_worker_k_offers_the_worker_and_w_the_whole_trainer() -> None:
    signaller = RecordingSignaller()
    app = _app(signaller)
    async with running(app, *first_frames()) as pilot:
        await _cursor_to(app, pilot, 4252)
        await pilot.press("k")
        prompt = app.screen
        assert isinstance(prompt, SignalPrompt)
        assert "send a signal to PID 4252 pt_data_worker (worker) (user ana)?" in prompt.text
        assert "w the whole trainer (4 processes)" in prompt.text
        await pilot.press("w")
        assert "4 processes: 4242 python (trainer)" in prompt.text
        assert "w only PID 4252" in prompt.text
        await pilot.press("w", "i")
        assert signaller.sent == [([_key(app, 4252)], signal.SIGINT)]


@sync
async def test_k_on_a_process_that_is_not_ours_is_refused_and_says_so() -> None:
    reason = "PID 6200 belongs to bo, not to you: only root or bo may signal it"
    signaller = RecordingSignaller(refuse=reason)
    app = _app(signaller)
    async with running(app, *first_frames()) as pilot:
        await _cursor_to(app, pilot, 6200)
        await pilot.press("k")
        assert not isinstance(app.screen, SignalPrompt)
        assert notices(app)[-1] == f"not signalled: {reason}"
        assert signaller.sent == []


@sync
async def test_k_refuses_a_pid_from_another_pid_namespace() -> None:
    signaller = RecordingSignaller()
    app = _app(signaller)
    async with running(app, *first_frames()) as pilot:
        await _cursor_to(app, pilot, 99123)  # NVML lists it; /proc here does not
        await pilot.press("k")
        assert not isinstance(app.screen, SignalPrompt)
        assert "another PID namespace" in notices(app)[-1]


@sync
async def test_readonly_has_no_k() -> None:
    app = _app(signaller=None)  # what --readonly hands over
    async with running(app, *first_frames(), size=(160, 40)) as pilot:
        await pilot.press("k")
        assert not isinstance(app.screen, SignalPrompt)
        assert notices(app)[-1] == READ_ONLY
        assert " kill " not in app.query_one("#footer", LinePane).text
    with_k = _app(RecordingSignaller())
    async with running(with_k, *first_frames(), size=(160, 40)) as pilot:
        assert " F9 kill " in with_k.query_one("#footer", LinePane).text


@sync
async def test_k_no_longer_moves_the_cursor() -> None:
    app = _app(RecordingSignaller())
    async with running(app, *first_frames()) as pilot:
        await pilot.press("down", "down", "k", "escape")
        assert _table(app).cursor == 2


# ---- t: the full process tree (htop's key; F5 too) -----------------------------------------------

@sync
async def test_t_shows_every_process_under_its_parent_and_back() -> None:
    app = _app()
    async with running(app, *first_frames(), size=(160, 70)) as pilot:
        await pilot.press("t")
        rows = {row.process.pid: row for row in _table(app).rows}
        assert rows[1].depth == 0 and rows[812].depth == 1 and rows[4100].depth == 2
        assert rows[TRAINER].depth == 3 and rows[4251].depth == 4 and rows[5321].depth == 5
        order = _pids(app)
        assert order.index(1) < order.index(812) < order.index(4100) < order.index(TRAINER)
        text = _table(app).text
        assert "├─ ▾ sshd: /usr/sbin/sshd -D" in text and "│  └─ ▾ -bash" in text  # as htop F5
        assert "tree" in _title_row(app)
        await pilot.press("t")
        assert _table(app).rows[0].process.pid == TRAINER and not _table(app).rows[0].tree


@sync
async def test_space_in_the_tree_folds_the_processes_beneath() -> None:
    app = _app()
    async with running(app, *first_frames(), size=(160, 70)) as pilot:
        await pilot.press("t")
        await _cursor_to(app, pilot, 4100)
        await pilot.press("space")
        assert 4100 in _pids(app) and not {TRAINER, 5300, 4251} & set(_pids(app))
        await pilot.press("space")
        assert {TRAINER, 5300, 4251} <= set(_pids(app))


# ---- a click on a column title sorts ------------------------------------------------------

@sync
async def test_clicking_a_column_title_sorts_by_it_and_again_reverses() -> None:
    app = _app()
    async with running(app, *first_frames()) as pilot:
        await pilot.click(ProcessTable, offset=(3, 0))  # PID
        assert (app.state.sort, app.state.ascending) == ("pid", True)
        assert _pids(app)[0] == 1
        await pilot.click(ProcessTable, offset=(3, 0))
        assert (app.state.sort, app.state.ascending) == ("pid", False)
        x = _title_row(app).index("RSS")
        await pilot.click(ProcessTable, offset=(x, 0))
        assert app.state.sort == "rss" and _pids(app)[0] == 5310


# ---- the filter line, the badge, the sorted column ---------------------------------------

@sync
async def test_the_filter_text_is_on_screen_while_typing() -> None:
    app = _app()
    async with running(app, *first_frames(), size=(80, 24)) as pilot:
        await pilot.press("slash", *"torchrun")
        rows = screen_text(app)
        assert "torchrun" in rows[-2], rows[-3:]  # the row above the key line


@sync
async def test_after_enter_a_badge_names_the_filter_and_the_sort() -> None:
    app = _app()
    async with running(app, *first_frames(), size=(80, 24)) as pilot:
        assert "filter" not in _title_row(app) and "sort" not in _title_row(app)
        await pilot.press("slash", *"lr 3e", "enter")
        assert "filter: lr 3e · sort: %CPU▼" in _title_row(app)
        assert "filter: lr 3e" in screen_text(app)[_table(app).region.y]
        await pilot.press("escape")
        assert "filter" not in _title_row(app)


@sync
async def test_T_at_80_columns_shows_the_time_column_it_sorts_by() -> None:
    app = _app()
    async with running(app, *first_frames(), size=(80, 24)) as pilot:
        assert "TIME" not in _title_row(app)  # no room for it unsorted
        await pilot.press("T")
        title = _title_row(app)
        assert "TIME▼" in title and "sort: TIME▼" in title
        assert _pids(app)[0] == TRAINER  # the most CPU time: 1843.2 s
        assert fmt.cpu_time(1843.2) in _table(app).text.splitlines()[1]


# ---- A: the advice whole ------------------------------------------------------------------

@sync
async def test_A_shows_every_piece_of_advice_whole_at_80x24() -> None:
    app = _app()
    async with running(app, *first_frames(attach=True, advice=True), size=(80, 24)) as pilot:
        advice = app.shown_advice()
        assert advice and "…" in app.query_one("#advice", LinePane).text  # cut in the pane
        await pilot.press("A")
        assert isinstance(app.screen, AdvicePage)
        await pilot.pause()
        page = app.screen.query_one("#advice-page", LinePane)
        assert page.size.width >= 78  # full width
        words = " ".join(page.text.split())
        for item in advice:
            for text in (item.title, item.evidence, item.action):
                assert " ".join(text.split()) in words
        assert "…" not in page.text
        await pilot.press("escape")
        assert not isinstance(app.screen, AdvicePage)


@sync
async def test_A_without_advice_says_so() -> None:
    app = _app()
    async with running(app, *first_frames(), size=(80, 24)) as pilot:
        await pilot.press("A")
        assert not isinstance(app.screen, AdvicePage)
        assert notices(app)[-1] == "no advice to show"


@sync
async def test_keys_typed_right_after_slash_reach_the_filter() -> None:
    """Over SSH "/lr" arrives in one read: the filter must have the keys before "l" is
    handled, or the letters go to the table and are lost."""
    app = _app()
    async with running(app, *first_frames(), size=(80, 24)) as pilot:
        for key, char in (("slash", "/"), ("l", "l"), ("r", "r")):
            app.post_message(events.Key(key, char))
        await pilot.pause()
        assert app.query_one("#filter", Input).value == "lr"


@sync
async def test_a_key_right_after_enter_reaches_the_table_not_the_filter() -> None:
    """Over SSH "/ssh" Enter "k" can arrive in one read: Enter closes the filter before "k"
    is handled, so "k" asks to kill the filtered rows instead of becoming filter text."""
    app = _app()
    async with running(app, *first_frames(), size=(80, 24)) as pilot:
        for key, char in (("slash", "/"), ("s", "s"), ("enter", "\r"), ("k", "k")):
            app.post_message(events.Key(key, char))
        await pilot.pause()
        assert app.state.filter == "s"
        assert not app.query_one("#filter", Input).display


@sync
async def test_a_slash_typed_into_the_filter_is_text() -> None:
    app = _app()
    async with running(app, *first_frames(), size=(80, 24)) as pilot:
        await pilot.press("slash", *"/usr/sbin")
        assert app.query_one("#filter", Input).value == "/usr/sbin"
        await pilot.press("enter", "question_mark", "slash")  # under the help: no filter
        assert not app.screen_stack[0].query_one("#filter", Input).display
