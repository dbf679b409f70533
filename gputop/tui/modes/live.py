"""This machine, live: its processes may be attached to, detached from and signalled."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from textual.binding import Binding

from gputop.tui.modes.base import Mode
from gputop.tui.modes.keys import FILTER, FILTER_LINE, HELP, INTERRUPT, PAUSE, QUIT, TABLE, sorting
from gputop.tui.views.signals import READ_ONLY, SIGNALS, describe, foreign, signal_targets
from gputop.tui.widgets.signal_prompt import Choice, SignalPrompt

if TYPE_CHECKING:
    from gputop.tui.app import GputopApp


class Signaller(Protocol):
    """What `k` needs to signal listed processes, each named by its key (PID, start ticks);
    wiring hands one over (gputop.app.signalling), none under --readonly."""

    def refusal(self, targets: Sequence[tuple[int, int]]) -> str | None: ...

    def send(self, targets: Sequence[tuple[int, int]], signum: int) -> str | None: ...


SIGNAL = Binding("k,f9", "mode('signal')", "kill", key_display="F9")


class LiveMode(Mode):
    """This machine's processes, sorted, filtered, attached to and signalled."""

    BINDINGS = (QUIT, INTERRUPT, HELP, PAUSE, FILTER, SIGNAL,
                *sorting("cpu", "rss", "gpu", "pid", "time"), *TABLE,
                Binding("a", "attach", "attach", show=False),
                Binding("d", "mode('detach')", "detach", show=False),
                *FILTER_LINE)

    def __init__(self, app: GputopApp, signaller: Signaller | None) -> None:
        super().__init__(app)
        self.signaller = signaller  # None: read-only, `k` refuses

    @functools.cached_property
    def footer_keys(self) -> list[Binding]:
        """The live keys; `k` only where signals may be sent."""
        return [b for b in self.BINDINGS if self.signaller is not None or b is not SIGNAL]

    def action_detach(self) -> None:
        """d: stop showing the attached trainers."""
        self.app.detach_trainers()

    def action_signal(self) -> None:
        """k / F9: ask which signal to send to the process under the cursor, or to its trainer
        with the workers; refused under --readonly and for processes that are not ours."""
        app = self.app
        if self.signaller is None:
            app.notify(READ_ONLY, severity="warning", markup=False)
            return
        row = app.selected_row()
        if row is None or app.frame is None:
            app.notify("no process under the cursor", markup=False)
            return
        targets = signal_targets(row, app.frame)
        chosen = targets.chosen()
        reason = foreign(chosen) or self.signaller.refusal([p.key for p in chosen])
        if reason is not None:
            app.notify(f"not signalled: {reason}", severity="error", markup=False)
            return
        app.push_screen(SignalPrompt(targets), self._signal_answered)

    def _signal_answered(self, choice: Choice | None) -> None:
        """Send the chosen signal and say what became of it."""
        if choice is None or self.signaller is None:
            return
        number, processes = choice
        name = next(name for _, name, signum in SIGNALS if signum == number)
        failed = foreign(processes) or self.signaller.send([p.key for p in processes], number)
        if failed is not None:
            self.app.notify(f"{name} not sent to all: {failed}", severity="error", markup=False)
        else:
            self.app.notify(f"{name} sent to {describe(processes)}", markup=False)
