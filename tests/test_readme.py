"""The README stays a newcomer's page (reference material lives in docs/), and every relative
link in it and in docs/ leads to a file in the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_readme_is_short() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= README_MAX_LINES


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_leads_to_a_file(page: Path) -> None:
    targets = [t for t in LINK.findall(page.read_text()) if "://" not in t]
    missing = [t for t in targets if not (page.parent / t).exists()]
    assert not missing, missing


def test_the_quick_start_is_three_commands_on_a_gpu_server() -> None:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Quick start")
    block = text[text.index("```sh", start):text.index("```\n", text.index("```sh", start) + 5)]
    commands = [line.split("#")[0].strip() for line in block.splitlines()[1:] if line.strip()]
    assert commands == ["pipx install .", "gputop", "gputop run -- python train.py"]


def test_the_legend_explains_every_mark_the_screen_draws() -> None:
    """The severity marks, the phase labels, the trainer chip and the row marks the TUI
    draws each appear in the README's "Reading the screen"."""
    from gputop.tui.views.advice import SEVERITY_MARK
    from gputop.tui.views.steps import _LABELS

    text = (ROOT / "README.md").read_text()
    legend = text[text.index("## Reading the screen"):text.index("## Containers")]
    marks = [mark.strip() for mark, _ in SEVERITY_MARK.values()]
    marks += [f"█{label}" for phase, label in _LABELS.items() if phase != "other"]
    marks += ["▾", "▸", "◆", "├─", "pin:off]", "kernel threads hidden (K)", "ctr:", "nspid:",
              "LOST", "n/a", "STALLED", "evaluating", "saving", "step in progress",
              "host-bound", "data-bound", "compute-bound", "cpu-starved"]
    missing = [mark for mark in marks if mark not in legend]
    assert not missing, missing


def _table_rows(text: str, columns: int) -> dict[str, list[str]]:
    """A markdown table's rows of `columns` cells, by the first cell holding a `code` id
    (README) or by the first cell (docs)."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == columns:
            rows[cells[1].strip("`") if columns == 4 else cells[0]] = cells
    return rows


def test_the_readmes_truth_rows_are_the_full_tables() -> None:
    """Each README row of the truth table quotes docs/advice.md's row of the same trainer."""
    readme = _table_rows((ROOT / "README.md").read_text(), 4)
    full = _table_rows((ROOT / "docs" / "advice.md").read_text(), 10)
    quoted = {k: v for k, v in readme.items() if k in full}
    assert len(quoted) >= 10, sorted(readme)
    for trainer, (_, _, timers, gputop) in quoted.items():
        row = full[trainer]
        assert timers.startswith(f"{row[1]} {row[2]}"), (trainer, timers, row)
        assert gputop.startswith(f"{row[5]} {row[6]}"), (trainer, gputop, row)
        for function, share in ((row[3], row[4]), (row[7], row[8])):
            if function != "—":
                assert f"{function.strip('`').split(' (')[0]} {share}" in timers + gputop
