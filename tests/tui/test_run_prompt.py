"""Pilot tests: `gputop run`'s quit prompt, Ctrl-C forwarding, `d`, and the final advice."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from gputop.core.model import Frame
from gputop.tui import build_app
from gputop.tui.app import GputopApp
from gputop.tui.modes.run import RunMode
from gputop.tui.widgets.linepane import LinePane
from gputop.tui.widgets.quit_prompt import QuitPrompt
from tests.helpers.tui import FedSampler, first_frames, frames, running, sync

TRAINER = 4242  # the recorded trainer the fixture frames attach to


class FakeCommand:
    """Stands where wiring's RunCommand stands: records what the app asked of it."""

    def __init__(self) -> None:
        self.pid = TRAINER
        self.log: str | None = "gputop-run-1.log"
        self.alive = True
        self.interrupts = 0
        self.stopped = False
        self.detached = False

    def running(self) -> bool:
        return self.alive

    def interrupt(self) -> None:
        self.interrupts += 1

    def stop(self) -> None:
        self.stopped = True

    def detach(self) -> None:
        self.detached = True


def _app(command: FakeCommand | None = None) -> tuple[GputopApp, FedSampler]:
    sampler = FedSampler()
    return build_app(sampler, command=command), sampler


def _text(app: GputopApp, pane: str) -> str:
    return app.query_one(f"#{pane}", LinePane).text


def _run_mode(app: GputopApp) -> RunMode:
    """The controller of `gputop run`'s app, which watches its command."""
    assert isinstance(app.mode, RunMode)
    return app.mode


def _count_looks(app: GputopApp) -> Callable[[], int]:
    """How many times the app has looked whether the command ended, from now on."""
    looks = 0
    check = _run_mode(app).check_command

    def counted() -> None:
        nonlocal looks
        looks += 1
        check()

    _run_mode(app).check_command = counted  # type: ignore[method-assign]
    return lambda: looks


def _exited(frame: Frame) -> Frame:
    """`frame` with its attached trainer gone and the advice that followed it gone too."""
    return replace(frame, attached=tuple(replace(a, alive=False, state="exited")
                                         for a in frame.attached), advice=())


@sync
async def test_q_with_the_command_running_asks_and_esc_cancels() -> None:
    command = FakeCommand()
    app, _ = _app(command)
    async with running(app, *first_frames()) as pilot:
        await pilot.press("q")
        assert isinstance(app.screen, QuitPrompt)
        assert ("training is still running: Q stop it, d detach and leave it running, "
                "Esc cancel") in app.screen.text
        await pilot.press("q")  # q again is no answer: the question stays
        assert isinstance(app.screen, QuitPrompt) and app.is_running
        await pilot.press("escape")
        assert not isinstance(app.screen, QuitPrompt) and app.is_running
        assert (command.stopped, command.detached, command.interrupts) == (False, False, 0)


@pytest.mark.parametrize(("alive", "keys", "stopped", "detached"), [
    pytest.param(True, ("q", "Q"), True, False, id="Q-in-the-prompt-stops-the-command"),
    pytest.param(True, ("q", "d"), False, True, id="d-in-the-prompt-leaves-it-running"),
    pytest.param(False, ("q",), False, False, id="q-after-the-command-ended-asks-nothing"),
    pytest.param(False, ("ctrl+c",), False, False, id="ctrl-c-with-no-command-running"),
])
@sync
async def test_keys_that_quit(alive: bool, keys: tuple[str, ...], stopped: bool,
                              detached: bool) -> None:
    command = FakeCommand()
    command.alive = alive
    app, _ = _app(command)
    async with running(app, *first_frames()) as pilot:
        await pilot.press(*keys)
        await pilot.pause()
        assert not app.is_running
    assert (command.stopped, command.detached, command.interrupts) == (stopped, detached, 0)


@sync
async def test_d_while_the_command_runs_asks_the_quit_question() -> None:
    command = FakeCommand()
    app, sampler = _app(command)
    async with running(app, *first_frames(attach=True)) as pilot:
        await pilot.press("d")
        assert isinstance(app.screen, QuitPrompt)
        assert sampler.detached == [] and not command.detached


@sync
async def test_ctrl_c_is_forwarded_and_the_app_stays_until_the_command_ends() -> None:
    command = FakeCommand()
    app, _ = _app(command)
    async with running(app, *first_frames(attach=True)) as pilot:
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert command.interrupts == 1 and app.is_running
        await pilot.press("ctrl+c")  # a second Ctrl-C is the command's to judge too
        assert command.interrupts == 2 and app.is_running
        command.alive = False
        _run_mode(app).check_command()
        await pilot.pause()
        assert app.is_running  # it waits for a frame sampled after the command ended...
        app.show_frame(_exited(frames("data-starved", 1, attach=True)[0]))
        await pilot.pause()
        assert not app.is_running  # ...so the printed summary says "exited"
    final = app.summary_frame()
    assert final is not None and final.attached[0].state == "exited"
    assert not command.stopped and not command.detached


@sync
async def test_the_command_ending_while_the_prompt_asks_quits() -> None:
    command = FakeCommand()
    app, _ = _app(command)
    async with running(app, *first_frames()) as pilot:
        await pilot.press("q")
        command.alive = False
        _run_mode(app).check_command()
        app.show_frame(frames("data-starved", 1)[0])
        await pilot.pause()
        assert not app.is_running
    assert not command.stopped and not command.detached


@sync
async def test_d_detaches_from_the_attached_trainer() -> None:
    app, sampler = _app()
    async with running(app, *first_frames(attach=True, advice=True)) as pilot:
        assert f"attached {TRAINER}" in _text(app, "steps")
        await pilot.press("d")
        await pilot.pause()
        assert sampler.detached == [TRAINER]
        assert _text(app, "steps") == "" and app.is_running


@sync
async def test_advice_stays_marked_final_after_the_trainer_exits_until_d() -> None:
    app, _ = _app()
    live = frames("data-starved", 20, attach=True, advice=True)
    async with running(app, *live) as pilot:
        assert live[-1].advice
        first = live[-1].advice[0].title
        assert first in _text(app, "advice") and "final" not in _text(app, "advice")
        for _ in range(8):  # longer than the advisor keeps items that stopped firing
            app.show_frame(_exited(live[-1]))
        await pilot.pause()
        advice = _text(app, "advice")
        assert first in advice and "final advice" in advice
        summary = app.summary_frame()
        assert summary is not None and summary.advice == live[-1].advice
        await pilot.press("d")  # moving on: the final summary and advice go
        await pilot.pause()
        assert _text(app, "advice") == "" and _text(app, "steps") == ""


@sync
async def test_the_commands_end_is_watched_only_once_the_user_asked_to_leave() -> None:
    """Until Ctrl-C is forwarded or q asks, the command ending changes nothing on screen, so
    no timer wakes the app to look (four wake-ups a second cost ~0.6 ms of CPU a second);
    from then on it looks every COMMAND_CHECK_S and quits after the command ended."""
    command = FakeCommand()
    app, _ = _app(command)
    looks = _count_looks(app)
    async with running(app, *first_frames(attach=True)) as pilot:
        await pilot.pause(1.0)
        assert looks() == 0
        await pilot.press("ctrl+c")
        await pilot.pause(0.8)
        assert looks() >= 2 and app.is_running
        command.alive = False
        await pilot.pause(0.5)
        app.show_frame(_exited(frames("data-starved", 1, attach=True)[0]))
        await pilot.pause()
        assert not app.is_running


@sync
async def test_a_cancelled_quit_question_stops_watching_the_command() -> None:
    command = FakeCommand()
    app, _ = _app(command)
    looks = _count_looks(app)
    async with running(app, *first_frames()) as pilot:
        await pilot.press("q")
        await pilot.pause(0.6)
        assert looks() >= 1
        await pilot.press("escape")
        await pilot.pause(0.6)
        after = looks()
        await pilot.pause(1.0)
        assert looks() == after and app.is_running
