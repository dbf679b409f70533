"""`make screenshots` shoots real runs: the demo's real trainer on simulated GPUs (labelled
so), its PID in the process table and the step pane, one worker count in both panes, and
no path of this checkout on screen."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SIZES = ("80x24", "160x48")
CELL_WIDTH = 12.2  # Textual's SVG: one terminal column, in SVG units
TEXT = re.compile(r'<text class="[^"]*" x="([\d.]+)" y="([\d.]+)"[^>]*>(.*?)</text>')

# real demo trainers, timed as they run: beside other tests the host's load changes what
# the shots show (a cpu-starved verdict, its advice taking the table's rows)
pytestmark = pytest.mark.alone


def screen_lines(svg: str) -> list[str]:
    """The terminal's lines as the SVG draws them (its text runs, placed by column; its
    no-break spaces as spaces)."""
    rows: dict[float, list[tuple[float, str]]] = defaultdict(list)
    for x, y, text in TEXT.findall(svg):
        rows[float(y)].append((float(x), html.unescape(text).replace("\xa0", " ")))
    lines = []
    for y in sorted(rows):
        line = ""
        for x, text in sorted(rows[y]):
            line = line.ljust(round(x / CELL_WIDTH)) + text
        lines.append(line)
    return lines


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The screenshots of one quick run of the script, and the scenarios it shot."""
    out = tmp_path_factory.mktemp("screenshots")
    done = subprocess.run([sys.executable, "scripts/screenshots.py", "--quick", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    scenarios = sorted({Path(line).name.rsplit("-", 1)[0] for line in done.stdout.split()})
    return out, scenarios


@pytest.mark.slow
def test_every_scenario_at_every_size(shots: tuple[Path, list[str]]) -> None:
    out, scenarios = shots
    assert {"data-starved", "compute-bound"} <= set(scenarios)
    for scenario in scenarios:
        for size in SIZES:
            assert (out / f"{scenario}-{size}.svg").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_real_trainer_consistent_between_panes(shots: tuple[Path, list[str]], size: str) -> None:
    out, scenarios = shots
    for scenario in scenarios:
        svg = (out / f"{scenario}-{size}.svg").read_text(encoding="utf-8")
        assert str(ROOT) not in svg, f"{scenario}-{size} shows this checkout's path"
        lines = screen_lines(svg)
        screen = "\n".join(lines)
        assert "SIMULATED GPUs" in screen
        attached = re.search(r"^attached (\d+)", screen, re.M)
        assert attached, f"{scenario}-{size}: no step pane header"
        pid = attached.group(1)
        # its PID and its chip (at 80 columns a wide chip leaves no room for the command)
        row = re.search(rf"^ *{pid} .*\[(\d+)w ", screen, re.M)
        assert row, f"{scenario}-{size}: trainer {pid} is not a row of the process table"
        settings = re.search(r"\bworkers (\d+|n/a)  ", screen)
        if size == "160x48":  # the step pane has room for the trainer's settings
            assert settings, f"{scenario}-{size}: no settings line"
        if settings:  # n/a: no DataLoader, so no workers
            workers = "0" if settings.group(1) == "n/a" else settings.group(1)
            assert workers == row.group(1), f"{scenario}-{size}: worker counts differ"


def test_screen_lines_reads_textual_svg() -> None:
    svg = ('<text class="r1" x="0" y="20" textLength="24.4">ab</text>'
           '<text class="r2" x="36.6" y="20" textLength="12.2">c&#160;</text>'
           '<text class="r1" x="0" y="44.4" textLength="12.2">d</text>')
    assert screen_lines(svg) == ["ab c ", "d"]
