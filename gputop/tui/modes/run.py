"""`gputop run`: the live view of a command gputop started, which q, d and Ctrl-C ask about."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from textual.timer import Timer

from gputop.core.model import Frame
from gputop.tui.modes.live import LiveMode, Signaller
from gputop.tui.widgets.quit_prompt import Answer, QuitPrompt

if TYPE_CHECKING:
    from gputop.tui.app import GputopApp

COMMAND_CHECK_S = 0.25  # how often the app looks whether the command has ended


class Command(Protocol):
    """`gputop run`'s command as the app may control it (wiring hands one over)."""

    @property
    def pid(self) -> int: ...

    @property
    def log(self) -> str | None: ...

    def running(self) -> bool: ...

    def interrupt(self) -> None: ...

    def stop(self) -> None: ...

    def detach(self) -> None: ...


class RunMode(LiveMode):
    """The live view while `gputop run`'s command runs: leaving asks what becomes of it."""

    def __init__(self, app: GputopApp, signaller: Signaller | None, command: Command) -> None:
        super().__init__(app, signaller)
        self.command = command
        self._leave_when_command_ends = False  # Ctrl-C was forwarded: quit once it has ended
        self._leave_on_next_frame = False
        self._command_watch: Timer | None = None  # checks the command's end (see _watch_command)

    def show(self, frame: Frame) -> None:
        super().show(frame)
        if self._leave_on_next_frame:
            self.app.exit()

    def quit(self) -> None:
        """Quit; while the command still runs, ask what becomes of it first."""
        if self.command.running():
            self._ask_about_command()
        else:
            self.app.exit()

    def interrupt(self) -> None:
        """Ctrl-C: the command's while it runs (gputop quits once it has ended), else quit."""
        app = self.app
        if not self.command.running():
            app.exit()
            return
        self.command.interrupt()
        self._leave_when_command_ends = True
        self._watch_command()
        if isinstance(app.screen, QuitPrompt):
            app.screen.dismiss("cancel")
        app.notify(f"Ctrl-C sent to {self.command.pid}; gputop quits when it ends "
                   "(q asks to stop or leave it)", markup=False)

    def hang_up(self) -> None:
        """The terminal is gone: leave the command running (its output goes to its log)."""
        if self.command.running():
            self.command.detach()
        self.app.exit()

    def action_detach(self) -> None:
        """While the command runs this is the quit question: detaching from it means leaving
        it running."""
        if self.command.running():
            self._ask_about_command()
        else:
            super().action_detach()

    def check_command(self) -> None:
        """Quit after the command ended, when the user asked to (Ctrl-C, or q still asking),
        once a frame sampled after its end is on screen."""
        app = self.app
        if not (self._leave_when_command_ends or isinstance(app.screen, QuitPrompt)):
            self._unwatch_command()  # the question was cancelled: its end changes nothing
            return
        if self._leave_on_next_frame or self.command.running():
            return
        if app.sampler.paused:
            app.exit()
        else:
            self._leave_on_next_frame = True

    def _ask_about_command(self) -> None:
        if not isinstance(self.app.screen, QuitPrompt):
            self.app.push_screen(QuitPrompt(self.command.pid, self.command.log), self._answered)
            self._watch_command()

    def _watch_command(self) -> None:
        """Look every COMMAND_CHECK_S whether the command has ended, from the first time the
        user asked to leave once it has (Ctrl-C forwarded, or q asking): until then its end
        changes nothing, and a timer would wake the app four times a second for nothing."""
        if self._command_watch is None:
            self._command_watch = self.app.set_interval(COMMAND_CHECK_S, self.check_command)

    def _unwatch_command(self) -> None:
        if self._command_watch is not None:
            self._command_watch.stop()
            self._command_watch = None

    def _answered(self, answer: Answer | None) -> None:
        """Stop the command (SIGINT now, SIGTERM later from wiring) or leave it, and quit."""
        if answer in (None, "cancel"):
            return
        if answer == "stop":
            self.command.stop()
        else:
            self.command.detach()
        self.app.exit()
