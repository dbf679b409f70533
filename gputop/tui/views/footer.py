"""The key line at the bottom: one pane line, not a widget per binding (that costs startup)."""

from __future__ import annotations

from collections.abc import Sequence

from textual.binding import Binding

from gputop.tui.lines import Line, Span, clip


def footer_line(bindings: Sequence[Binding | tuple[str, ...]], width: int) -> Line:
    """Each shown binding as its key and what it does, the F-keys first in htop's order, cut
    to the width."""
    spans: list[Span] = []
    shown = [b for b in bindings if isinstance(b, Binding) and b.show]
    for binding in sorted(shown, key=_f_key_number):
        key = binding.key_display or binding.key
        spans += [(f" {key} ", "footer-key"), (f"{binding.description} ", "footer")]
    return clip(tuple(spans), width)


def _f_key_number(binding: Binding) -> int:
    """F1..F12 by number, every other key after them (in the order given: sorted is stable)."""
    display = binding.key_display or ""
    return int(display[1:]) if display[:1] == "F" and display[1:].isdigit() else 99
