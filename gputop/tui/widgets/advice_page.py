"""`A`: the advice full width and whole, wrapped instead of cut, in a screen that scrolls."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen

from gputop.core.model import Advice
from gputop.tui.views.advice import advice_page_lines
from gputop.tui.widgets.linepane import LinePane


class AdvicePage(ModalScreen[None]):
    """Every piece of advice on screen when `A` was pressed, re-wrapped to the width."""

    BINDINGS = [
        Binding("escape,q,A", "dismiss", "close", show=False),
    ]

    def __init__(self, advice: Sequence[Advice], *, final: bool = False) -> None:
        super().__init__()
        self.advice = tuple(advice)
        self.final = final

    def compose(self) -> ComposeResult:
        """The wrapped advice in a scrollable box as wide as the terminal."""
        with VerticalScroll(id="advice-page-box"):
            yield LinePane(id="advice-page")

    def on_mount(self) -> None:
        """Let the arrow keys scroll it at once; wrap once the box has its width."""
        self.query_one("#advice-page-box", VerticalScroll).focus()
        self.call_after_refresh(self.wrap)

    def on_resize(self) -> None:
        """Wrap the advice to the new width."""
        self.call_after_refresh(self.wrap)

    def wrap(self) -> None:
        """Lines for the box's width (the screen's, less the scroll bar)."""
        pane = self.query_one("#advice-page", LinePane)
        width = pane.size.width or self.size.width - 2
        pane.set_lines(advice_page_lines(self.advice, width, final=self.final))
