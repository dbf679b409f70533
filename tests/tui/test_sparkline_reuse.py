"""A GPU row's sparkline is drawn every frame from a history one value longer: each value's
cell is worked out once, not each frame, and the sparkline is what it was drawn as before."""

from __future__ import annotations

from collections import deque

import pytest

from gputop.tui import cells


class _Percent(float):
    """A history value that counts how often it is scaled to its sparkline cell."""

    divisions = 0

    def __truediv__(self, other: float) -> float:
        _Percent.divisions += 1
        return float(self) / other


def test_a_sparkline_works_out_each_value_once_not_each_frame() -> None:
    history: deque[float | None] = deque(maxlen=300)
    history.extend(_Percent(v % 101) for v in range(300))
    cells.sparkline(history, 60)
    _Percent.divisions = 0
    history.append(_Percent(50.0))  # a value drawn last frame: its cell is known
    cells.sparkline(history, 60)
    assert _Percent.divisions == 0


@pytest.mark.parametrize("top", [100.0, 8.0, 0.0, -1.0])
def test_a_sparkline_draws_each_value_as_it_did(top: float) -> None:
    values = [None, 0, 0.0, -3.0, 1e-9, 6.25, 12.5, 50, 99.4, 100, 100.5, 1e9,
              float("nan"), float("inf"), -float("inf"), True, *(v / 7 for v in range(800))]
    for width in (0, 1, 5, 60, 900):
        assert cells.sparkline(values, width, top) == _sparkline_from_scratch(values, width, top)
        assert cells.sparkline(iter(values), width, top) == cells.sparkline(values, width, top)


def _sparkline_from_scratch(values: list[float | None], width: int, top: float) -> str:
    """The sparkline as it was drawn before its cells were kept."""
    recent = values[-width:] if width > 0 else []
    drawn = []
    for value in recent:
        if value is None:
            drawn.append(" ")
            continue
        level = 0 if top <= 0 else round(max(0.0, min(1.0, value / top)) * 8)
        drawn.append(" ▁▂▃▄▅▆▇█"[max(1, level)])
    return "".join(drawn).rjust(width)
