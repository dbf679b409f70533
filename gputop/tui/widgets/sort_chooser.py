"""F6: the sort column chosen from a list, as htop's "Sort by" does."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from gputop.tui.views.processes import SORT_KEYS


class SortChooser(ModalScreen[str | None]):
    """A list of the sortable columns, the current one highlighted; Enter sorts, Esc keeps."""

    BINDINGS = [Binding("escape,f6,q", "dismiss_none", "cancel", show=False)]

    def __init__(self, current: str) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        """The columns by their titles."""
        options = OptionList(*(Option(title, id=key) for key, title in SORT_KEYS.items()),
                             id="sort-box")
        options.border_title = "Sort by"
        yield options

    def on_mount(self) -> None:
        """Start on the column the rows are sorted by now."""
        chooser = self.query_one(OptionList)
        chooser.highlighted = list(SORT_KEYS).index(self.current) if self.current in SORT_KEYS \
            else 0
        chooser.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        """Enter (or a click) on a column: sort by it."""
        self.dismiss(event.option.id)

    def action_dismiss_none(self) -> None:
        """Esc: the sort stays."""
        self.dismiss(None)
