"""The live view lays out its first frame at the terminal's size, whatever the environment's
COLUMNS and LINES say: Textual takes its size from them until the driver's first resize
arrives, and a frame drawn meanwhile was drawn at their size (the fleet's title cut at
COLUMNS in a wider tmux window)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers import tmux

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

# A bare app on gputop's driver that writes down the size it has when mounted, then exits.
SIZE_AT_MOUNT = """
import sys
from textual.app import App
from gputop.tui.driver import QuietLinuxDriver

class SizeAtMount(App[None]):
    def on_mount(self) -> None:
        with open(sys.argv[1], "w") as out:
            out.write(f"{self.size.width}x{self.size.height}")
        self.exit()

SizeAtMount(driver_class=QuietLinuxDriver).run()
"""


def test_the_first_layout_takes_the_terminals_size_not_columns_and_lines(
        tmp_path: Path) -> None:
    script, seen = tmp_path / "size_at_mount.py", tmp_path / "size"
    script.write_text(SIZE_AT_MOUNT)
    with tmux.session(tmux.REPO, 140, 30) as name:
        tmux.spawn(name, f"env COLUMNS=80 LINES=24 PYTHONPATH={tmux.REPO} {tmux.PYTHON} "
                         f"{script} {seen}")
        assert tmux.exit_code(name) == 0
    assert seen.read_text() == "140x30"
