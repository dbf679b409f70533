"""Fixtures for every TUI test: no cursor blink, so screens and snapshots repeat exactly."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from textual.events import Mount
from textual.widgets import Input


@pytest.fixture(autouse=True)
def no_cursor_blink(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Input mounts with its cursor steady (a blink timer would make frames differ)."""
    mount: Callable[[Input, Mount], None] = Input._on_mount

    def steady_mount(self: Input, event: Mount) -> None:
        self.cursor_blink = False
        mount(self, event)

    monkeypatch.setattr(Input, "_on_mount", steady_mount)
