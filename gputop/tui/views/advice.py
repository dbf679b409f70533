"""Advice pane lines: most severe first, the evidence on one line and the action on the next."""

from __future__ import annotations

from collections.abc import Sequence

from gputop.model import Advice
from gputop.tui.lines import Line, clip

_RANK = {"critical": 0, "warn": 1, "info": 2}
_MARK = {"critical": ("✖ ", "crit"), "warn": ("▲ ", "warn"), "info": ("● ", "accent")}


FINAL_NOTE = "final advice: the trainer has exited (d clears it, Enter attaches another)"


def advice_lines(
    advice: Sequence[Advice], width: int, max_lines: int, *, final: bool = False
) -> list[Line]:
    """Two lines per item, most severe first; a count of what did not fit. `final`: the
    trainer has exited and this is what it was last told, said on a first line."""
    ordered = sorted(advice, key=lambda item: _RANK.get(item.severity, 3))
    lines: list[Line] = [clip(((FINAL_NOTE, "dim"),), width)] if final and max_lines else []
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
