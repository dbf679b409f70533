"""Advice pane lines: most severe first, the evidence on one line and the action on the next."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from gputop.core.model import Advice
from gputop.tui.lines import Line, clip

SEVERITY_RANK = {"critical": 0, "warn": 1, "info": 2}
SEVERITY_MARK = {"critical": ("✖ ", "crit"), "warn": ("▲ ", "warn"), "info": ("● ", "accent")}


FINAL_NOTE = "final advice: the trainer has exited (d clears it, Enter attaches another)"


def advice_lines(
    advice: Sequence[Advice], width: int, max_lines: int, *, final: bool = False
) -> list[Line]:
    """Two lines per item, most severe first; a count of what did not fit. `final`: the
    trainer has exited and this is what it was last told, said on a first line."""
    ordered = sorted(advice, key=lambda item: SEVERITY_RANK.get(item.severity, 3))
    lines: list[Line] = [clip(((FINAL_NOTE, "dim"),), width)] if final and max_lines else []
    for shown, item in enumerate(ordered):
        if len(lines) + 2 > max_lines:
            if len(lines) < max_lines:
                lines.append(clip(((f"  … {len(ordered) - shown} more (A shows all)", "dim"),),
                                  width))
            break
        mark, style = SEVERITY_MARK.get(item.severity, ("● ", "dim"))
        lines.append(clip(((mark, style), (item.title, style), (": ", "dim"),
                           (item.evidence, "plain")), width))
        lines.append(clip((("  → ", "dim"), (item.action, "accent")), width))
    return lines


def advice_page_lines(advice: Sequence[Advice], width: int, *, final: bool = False) -> list[Line]:
    """Every item whole, wrapped to `width`: what `A` shows when the pane cuts the text."""
    ordered = sorted(advice, key=lambda item: SEVERITY_RANK.get(item.severity, 3))
    lines = _heading(len(ordered), width)
    if final:
        lines += _wrapped(FINAL_NOTE, "", "dim", width)
    for item in ordered:
        mark, style = SEVERITY_MARK.get(item.severity, ("● ", "dim"))
        lines.append(())
        lines += _wrapped(item.title, mark, style, width)
        lines += _wrapped(item.evidence, "  ", "plain", width)
        lines += _wrapped(item.action, "  → ", "accent", width)
    return lines


def _heading(count: int, width: int) -> list[Line]:
    return (_wrapped(f"advice: {count} item{'s' * (count != 1)}", "", "title", width)
            + _wrapped("↑ ↓ PgUp PgDn scroll; Esc or A closes", "", "dim", width))


def _wrapped(text: str, lead: str, style: str, width: int) -> list[Line]:
    """`text` wrapped under `lead` (the first line) and its indent (the rest), nothing cut."""
    room = max(8, width - len(lead))
    rows = textwrap.wrap(text, room, break_on_hyphens=False) or [""]
    pad = " " * len(lead)
    return [clip(((lead if i == 0 else pad, "dim"), (row, style)), width)
            for i, row in enumerate(rows)]
