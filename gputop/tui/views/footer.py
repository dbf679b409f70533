"""The key line at the bottom: one pane line, not a widget per binding (that costs startup)."""

from __future__ import annotations

from collections.abc import Sequence

from textual.binding import Binding

from gputop.tui.lines import Line, Span, clip


def footer_line(bindings: Sequence[Binding | tuple[str, ...]], width: int) -> Line:
    """Each shown binding as its key and what it does, cut to the width."""
    spans: list[Span] = []
    for binding in bindings:
        if not isinstance(binding, Binding) or not binding.show:
            continue
        key = binding.key_display or binding.key
        spans += [(f" {key} ", "footer-key"), (f"{binding.description} ", "footer")]
    return clip(tuple(spans), width)
