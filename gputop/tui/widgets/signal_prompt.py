"""The confirmation `k` asks for: which signal, to which processes (named), or cancel."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Static

from gputop.core.model import ProcessSample
from gputop.tui.views.signals import SIGNALS, SignalTargets, describe, owner

Choice = tuple[int, tuple[ProcessSample, ...]]  # the signal number and where it goes


class SignalPrompt(ModalScreen[Choice | None]):
    """A bar at the bottom naming every target; only its own keys do anything while it shows
    (K, not k, kills: a second k never sends anything)."""

    BINDINGS = [
        *(Binding(key, f"send({number})", name, show=False) for key, name, number in SIGNALS),
        Binding("w", "switch_targets", "whole trainer / this process", show=False),
        Binding("escape", "cancel", "cancel", show=False),
    ]

    def __init__(self, targets: SignalTargets) -> None:
        super().__init__()
        self.targets = targets

    @property
    def text(self) -> str:
        """The question: what receives the signal, and the keys that answer it."""
        chosen = self.targets.chosen()
        keys = "  ".join(f"{key} {name}" for key, name, _ in SIGNALS)
        other = ""
        if self.targets.trainer:
            other = (f"  w only PID {self.targets.process.pid}" if self.targets.whole
                     else f"  w the whole trainer ({len(self.targets.trainer)} processes)")
        return (f"send a signal to {describe(chosen)} (user {owner(chosen)})?\n"
                f"{keys}{other}  Esc cancel")

    def compose(self) -> ComposeResult:
        """The question and its answers."""
        yield Static(self.text, id="signal-prompt", markup=False)

    def action_send(self, number: int) -> None:
        """Close with the chosen signal; the app sends it."""
        self.dismiss((number, self.targets.chosen()))

    def action_switch_targets(self) -> None:
        """Switch between this process and its whole trainer with the workers."""
        if self.targets.trainer:
            self.targets = self.targets.toggled()
            self.query_one("#signal-prompt", Static).update(self.text)

    def action_cancel(self) -> None:
        """Close and send nothing."""
        self.dismiss(None)
