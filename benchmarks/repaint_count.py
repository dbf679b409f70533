"""How many lines gputop-ui repainted since the last look: the count it keeps in a file,
which the drawing floors (textual_floor.py, ansi_floor.py) follow."""

from __future__ import annotations

from pathlib import Path


class RepaintCount:
    """The growth of the count in `path` between looks (None: every line, each look)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._seen: int | None = None

    def lines(self, height: int) -> int:
        """Lines to repaint now, at most `height`."""
        if self.path is None:
            return height
        try:
            total = int(self.path.read_text() or 0)
        except (OSError, ValueError):
            return 0  # gputop-ui has not counted yet
        before, self._seen = self._seen, total
        return 0 if before is None else min(height, max(0, total - before))
