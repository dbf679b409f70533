"""GPU names in a real terminal (tmux): whole at 200x50, cut with '…' at 80x24."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

from gputop.sources.simulated import NAME
from tests.helpers import tmux

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]
COMMAND = (f"env PYTHONPATH={shlex.quote(str(REPO))} TERM=xterm-256color "
           f"{shlex.quote(tmux.PYTHON)} -m gputop --demo idle --membw off")


def _gpu_rows(screen: str) -> list[str]:
    return [line for line in screen.splitlines() if " mem " in line and "/79.6G" in line]


def test_gpu_names_whole_at_200_columns_and_cut_at_80() -> None:
    with tmux.session(REPO, 200, 50) as name:
        tmux.spawn(name, COMMAND)
        wide = tmux.wait_for(name, lambda s: len(_gpu_rows(s)) == 4 and "COMMAND" in s,
                             timeout_s=120)
        assert all(f" {NAME} " in row for row in _gpu_rows(wide)), wide

        tmux.tmux("resize-window", "-t", name, "-x", "80", "-y", "24")

        def narrow(screen: str) -> bool:  # redrawn for 80 columns: each row ends at its power
            rows = _gpu_rows(screen)
            return bool(rows) and all(row.rstrip().endswith("W") for row in rows)

        rows = _gpu_rows(tmux.wait_for(name, narrow))
        assert all(NAME not in row and "Simulat" in row and "…" in row for row in rows), rows
        tmux.tmux("send-keys", "-t", name, "q")
        assert tmux.exit_code(name) == 0
