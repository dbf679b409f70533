"""Advice pane lines: most severe first, the evidence on one line and the action on the next."""

from __future__ import annotations

from collections.abc import Sequence

from gputop.model import Advice
from gputop.tui.lines import Line, clip

_RANK = {"critical": 0, "warn": 1, "info": 2}
_MARK = {"critical": ("✖ ", "crit"), "warn": ("▲ ", "warn"), "info": ("● ", "accent")}


def advice_lines(advice: Sequence[Advice], width: int, max_lines: int) -> list[Line]:
    """Two lines per item, most severe first; a count of what did not fit."""
    ordered = sorted(advice, key=lambda item: _RANK.get(item.severity, 3))
    lines: list[Line] = []
    for shown, item in enumerate(ordered):
        if len(lines) + 2 > max_lines:
            if len(lines) < max_lines:
                lines.append(clip(((f"  … {len(ordered) - shown} more", "dim"),), width))
            break
        mark, style = _MARK.get(item.severity, ("● ", "dim"))
        lines.append(clip(((mark, style), (item.title, style), (": ", "dim"),
                           (item.evidence, "plain")), width))
        lines.append(clip((("  → ", "dim"), (item.action, "accent")), width))
    return lines
