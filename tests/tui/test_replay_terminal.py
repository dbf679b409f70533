"""In a real terminal (tmux): `gputop replay` shows the recording and its keys work, q exits
0; `gputop --record` records what the live view showed."""

from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

from gputop.export.record import RecordWriter, open_record
from gputop.tui.views.header import recorded_time
from tests.helpers import tmux
from tests.helpers.tui import frames

REPO = Path(__file__).resolve().parents[2]
GPUTOP = f"env PYTHONPATH={REPO} TERM=xterm GPUTOP_DEBUG= {sys.executable} -m gputop"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


def test_replay_in_a_terminal_steps_jumps_and_quits(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    writer = RecordWriter(open_record(str(path)))
    recorded = frames("data-starved", 12, attach=True, advice=True)
    for frame in recorded:
        writer.write(frame)
    writer.db.close()
    with tmux.session(REPO) as name:
        tmux.spawn(name, f"{GPUTOP} replay {path}")
        tmux.wait_for(name, lambda s: "REPLAY" in s and "tick 1/12" in s and "attached 4242" in s)
        tmux.tmux("send-keys", "-t", name, "p")  # hold it where it is
        tmux.tmux("send-keys", "-t", name, "G")
        tmux.wait_for(name, lambda s: "tick 12/12" in s and recorded_time(recorded[-1].time) in s)
        tmux.tmux("send-keys", "-t", name, "Left")
        tmux.wait_for(name, lambda s: "tick 11/12" in s and "PAUSED" in s)
        tmux.tmux("send-keys", "-t", name, "g")
        tmux.wait_for(name, lambda s: "tick 1/12" in s)
        tmux.tmux("send-keys", "-t", name, "q")
        assert tmux.exit_code(name) == 0


def test_the_live_view_records_what_it_shows(tmp_path: Path) -> None:
    path = tmp_path / "live.sqlite"
    with tmux.session(REPO) as name:
        tmux.spawn(name, f"{GPUTOP} --demo data-starved --membw off --interval 0.2 --record {path}")
        tmux.wait_for(name, lambda s: "attached" in s and "data-bound" in s)
        tmux.tmux("send-keys", "-t", name, "q")
        assert tmux.exit_code(name) == 0
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert db.execute("SELECT count(*) FROM frames").fetchone()[0] >= 2
        assert db.execute("SELECT count(*) FROM steps").fetchone()[0] > 0  # the demo trainer's
        assert db.execute("SELECT DISTINCT json_extract(text, '$.source') FROM gpus JOIN texts "
                          "ON texts.id = (SELECT gpu_id FROM frames WHERE id = gpus.frame)"
                          ).fetchall() == [("simulated",)]
