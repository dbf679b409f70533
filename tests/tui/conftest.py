"""Fixtures for every TUI test: no cursor blink, so screens and snapshots repeat exactly; the
app's one gc.freeze undone after each test, so no test's objects outlive it; and a tmux
session for the tests in a real terminal."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from textual.events import Mount
from textual.widgets import Input

from tests.helpers import tmux

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_cursor_blink(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Input mounts with its cursor steady (a blink timer would make frames differ)."""
    mount: Callable[[Input, Mount], None] = Input._on_mount

    def steady_mount(self: Input, event: Mount) -> None:
        self.cursor_blink = False
        mount(self, event)

    monkeypatch.setattr(Input, "_on_mount", steady_mount)


@pytest.fixture(autouse=True)
def unfreeze_heap() -> Iterator[None]:
    """The app freezes the heap a few frames in (its startup objects); give them back."""
    yield
    gc.unfreeze()


@pytest.fixture
def session() -> Iterator[str]:
    """A detached 120x40 tmux session in the repository whose pane stays after its program
    exits (a module that needs another size defines its own)."""
    with tmux.session(REPO) as name:
        yield name
