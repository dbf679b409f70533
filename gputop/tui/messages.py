"""Messages the widgets post to the app."""

from __future__ import annotations

from textual.message import Message

from gputop.tui.views.processes import Row


class RowActivated(Message):
    """Enter on a process row: attach when it has a probe, else fold its group."""

    def __init__(self, row: Row) -> None:
        super().__init__()
        self.row = row


class HeaderClicked(Message):
    """A click on a column title of the process table: sort by that column."""

    def __init__(self, sort: str) -> None:
        super().__init__()
        self.sort = sort


class HostChosen(Message):
    """Enter on a fleet row: show that host's GPUs, trainers and advice."""

    def __init__(self, instance: str) -> None:
        super().__init__()
        self.instance = instance
