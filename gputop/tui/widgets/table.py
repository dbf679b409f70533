"""The process table: a line widget that formats only the visible rows and keeps a keyed cursor."""

from __future__ import annotations

from textual.binding import Binding

from gputop.core.model import ProcessSample
from gputop.tui.lines import Line
from gputop.tui.messages import HeaderClicked, RowActivated
from gputop.tui.views.processes import (
    Column,
    Row,
    Rows,
    TableState,
    columns_for,
    cursor_line,
    header_line,
    row_line,
    sort_key_at,
    sorted_column,
)
from gputop.tui.widgets.linepane import LinePane


class CursorTable(LinePane):
    """A title line and the rows that fit beneath it, one of them under a cursor that the
    arrow keys move; subclasses say how many rows there are and paint them."""

    AUTO_HEIGHT = False
    can_focus = True
    BINDINGS = [
        Binding("up", "move(-1)", "up", show=False),  # k signals (htop), so no vi keys
        Binding("down", "move(1)", "down", show=False),
        Binding("pageup", "page(-1)", "page up", show=False),
        Binding("pagedown", "page(1)", "page down", show=False),
        Binding("home", "edge(-1)", "top", show=False),
        Binding("end", "edge(1)", "bottom", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.cursor = 0
        self.top = 0
        self._following = False  # the cursor follows its row only once the user moved it

    def row_count(self) -> int:
        """How many rows there are."""
        raise NotImplementedError

    def _paint(self) -> None:
        raise NotImplementedError

    def on_resize(self) -> None:
        """Re-cut the visible window for the new size."""
        super().on_resize()
        self._paint()

    def action_move(self, delta: int) -> None:
        """Cursor up or down one row."""
        self._set_cursor(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        """Cursor up or down one screen."""
        self._set_cursor(self.cursor + direction * max(1, self._body_height() - 1))

    def action_edge(self, direction: int) -> None:
        """Cursor to the first or last row."""
        self._set_cursor(0 if direction < 0 else self.row_count() - 1)

    def _set_cursor(self, index: int) -> None:
        self.cursor = max(0, min(index, self.row_count() - 1))
        self._following = True
        self._paint()

    def _body_height(self) -> int:
        return max(0, self.inner_size.height - 1)

    def _visible(self) -> range:
        """The rows in view, the cursor among them; the first rows (the busiest, the worst)
        stay in view whenever the cursor allows it."""
        body, count = self._body_height(), self.row_count()
        self.cursor = max(0, min(self.cursor, count - 1))
        if self.cursor < body:
            self.top = 0
        elif self.cursor < self.top:
            self.top = self.cursor
        elif body and self.cursor >= self.top + body:
            self.top = self.cursor - body + 1
        self.top = max(0, min(self.top, max(0, count - body)))
        return range(self.top, min(count, self.top + body))

    def on_focus(self) -> None:
        """Show the cursor."""
        self._paint()

    def on_blur(self) -> None:
        """Hide the cursor while another widget has the keyboard."""
        self._paint()


class ProcessTable(CursorTable):
    """Header plus the rows that fit; the cursor follows a process (pid + start) across ticks."""

    BINDINGS = [Binding("enter", "activate", "attach/fold", show=False)]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows = Rows()
        self.state = TableState()
        self._cursor_key: tuple[int, int] | None = None
        self._empty_note = "waiting for the first sample…"
        # The rows drawn last time and their lines, for the columns and width they had: a
        # quiet process keeps its sample object, so its row is not formatted again.
        self._drawn: dict[tuple[int, int], tuple[ProcessSample | Row, Line]] = {}
        self._drawn_for: tuple[tuple[Column, ...], int] | None = None

    @property
    def selected(self) -> Row | None:
        """The row under the cursor."""
        return self.rows[self.cursor] if 0 <= self.cursor < len(self.rows) else None

    def show(self, rows: Rows, state: TableState, empty_note: str = "") -> None:
        """New rows: keep the cursor on the same process when it is still listed."""
        self.rows, self.state = rows, state
        self._empty_note = empty_note or "no processes match"
        if self._following and self._cursor_key is not None:
            found = rows.find(self._cursor_key)
            if found is not None:
                self.cursor = found
        self._paint()

    def row_count(self) -> int:
        """How many processes are listed."""
        return len(self.rows)

    def action_activate(self) -> None:
        """Tell the app Enter was pressed on a row."""
        if self.selected is not None:
            self.post_message(RowActivated(self.selected))

    def on_click(self, event: object) -> None:
        """Select the clicked row; a click on a column title sorts by it (the mouse is
        optional)."""
        x, y = getattr(event, "x", 0), getattr(event, "y", 0)
        if y >= 1:
            self._set_cursor(self.top + y - 1)
            return
        sort = sort_key_at(self._columns(), x)
        if sort is not None:
            self.post_message(HeaderClicked(sort))

    def _columns(self) -> tuple[Column, ...]:
        return columns_for(self.inner_size.width, keep=sorted_column(self.state))

    def _paint(self) -> None:
        width = self.inner_size.width
        if not width:
            return
        shown = self._visible()
        if self.rows:
            self._cursor_key = self.rows[self.cursor].key
        columns = self._columns()
        lines: list[Line] = [header_line(columns, self.state, width,
                                         self.rows.hidden_kernel_threads)]
        before = self._drawn if self._drawn_for == (columns, width) else {}
        drawn: dict[tuple[int, int], tuple[ProcessSample | Row, Line]] = {}
        cursor = self.cursor if self.has_focus else -1
        for index in shown:
            item = self.rows.item(index)
            key = item.key if isinstance(item, ProcessSample) else item.process.key
            old = before.get(key)
            line = old[1] if old is not None and old[0] == item else row_line(
                self.rows[index], columns, width, False)
            drawn[key] = (item, line)
            lines.append(cursor_line(line, width) if index == cursor else line)
        self._drawn, self._drawn_for = drawn, (columns, width)
        if not self.rows:
            lines.append(((f"  {self._empty_note}", "dim"),))
        self.set_lines(lines)
