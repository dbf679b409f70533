"""The question `q` asks while `gputop run`'s command still runs: stop it, leave it, or stay."""

from __future__ import annotations

from typing import Literal

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Static

Answer = Literal["stop", "detach", "cancel"]
QUESTION = "training is still running: Q stop it, d detach and leave it running, Esc cancel"


class QuitPrompt(ModalScreen[Answer]):
    """A one-line bar at the bottom; only its three answers do anything while it shows."""

    BINDINGS = [
        Binding("Q", "answer('stop')", "stop it", show=False),
        Binding("d", "answer('detach')", "detach", show=False),
        Binding("escape", "answer('cancel')", "cancel", show=False),
    ]

    def __init__(self, pid: int, log: str | None) -> None:
        super().__init__()
        where = f", its output going to {log}" if log else ""
        self.text = (f"{QUESTION}\nPID {pid}: Q sends Ctrl-C (SIGINT), SIGTERM if it runs on; "
                     f"d leaves it running{where}")

    def compose(self) -> ComposeResult:
        """The question and what each answer does."""
        yield Static(self.text, id="quit-prompt", markup=False)

    def action_answer(self, answer: Answer) -> None:
        """Close the bar with the user's answer; the app acts on it."""
        self.dismiss(answer)
