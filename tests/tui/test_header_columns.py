"""The process table's column titles stay over their columns whichever column is sorted:
the sort arrow fits inside the column ("GPU ME▼"), never pushing the titles after it."""

from __future__ import annotations

import pytest

from gputop.tui.views.processes import COLUMNS, SORT_KEYS, TableState, columns_for, header_line


@pytest.mark.parametrize("sort", sorted(SORT_KEYS))
def test_every_title_starts_where_its_column_does(sort: str) -> None:
    width = 160
    columns = columns_for(width, keep=SORT_KEYS[sort])
    text = "".join(part for part, _ in header_line(columns, TableState(sort=sort), width))
    left = 0
    for column in columns:
        cell = text[left:left + column.width]
        assert cell.strip().rstrip("▼▲") in column.name, (sort, column.name, cell)
        left += column.width + 1
    assert text[left:].startswith("COMMAND"), text
    assert len(COLUMNS) >= len(columns)
