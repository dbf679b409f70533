"""In a real terminal (tmux): `gputop replay` shows the recording and its keys work, q exits
0; `gputop --record` records what the live view showed, and the replay shows it again."""

from __future__ import annotations

import re
import shutil
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from gputop.recording.writer import MEASURED, RecordWriter, open_record
from gputop.tui.views.header import recorded_time
from tests.helpers import tmux
from tests.helpers.recording import one, wait_for
from tests.helpers.tui import frames

REPO = Path(__file__).resolve().parents[2]
GPUTOP = f"env PYTHONPATH={REPO} TERM=xterm GPUTOP_DEBUG= {sys.executable} -m gputop"
HEIGHT = 50  # the panes get the same rows with and without the replay's banner line
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


def test_replay_in_a_terminal_steps_jumps_and_quits(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    writer = RecordWriter(open_record(str(path)))
    # Long enough (a tick a second at 1x) that it cannot play through before the keys come,
    # on a machine slow to start it.
    recorded = frames("data-starved", 240, attach=True, advice=True)
    for frame in recorded:
        writer.write(frame)
    writer.db.close()
    with tmux.session(REPO) as name:
        tmux.spawn(name, f"{GPUTOP} replay {path}")
        tmux.wait_for(name, lambda s: "REPLAY" in s and "/240" in s and "attached 4242" in s)
        tmux.tmux("send-keys", "-t", name, "p")  # hold it where it is
        tmux.tmux("send-keys", "-t", name, "G")
        tmux.wait_for(name, lambda s: "tick 240/240" in s
                      and recorded_time(recorded[-1].time) in s)
        tmux.tmux("send-keys", "-t", name, "Left")
        tmux.wait_for(name, lambda s: "tick 239/240" in s and "PAUSED" in s)
        tmux.tmux("send-keys", "-t", name, "g")
        tmux.wait_for(name, lambda s: "tick 1/240" in s)
        tmux.tmux("send-keys", "-t", name, "q")
        assert tmux.exit_code(name) == 0


def _content(screen: str) -> list[str]:
    """A screen without its footer, right-trimmed."""
    return [line.rstrip() for line in screen.splitlines()[:-1]]


def _above_table(lines: list[str]) -> list[str]:
    """The lines down to the process table's column header, which is included, without the
    count of kernel threads hidden: a recording keeps the busiest and largest processes, not
    the machine's idle kernel threads (docs/recording.md)."""
    header = next(i for i, line in enumerate(lines) if "PID USER" in line)
    return [*lines[:header], re.sub(r"\s*\d+ kernel threads hidden \(K\)", "", lines[header])]


def _without_evidence(lines: list[str], titles: list[str]) -> list[str]:
    """`lines` with each advice's numbers blanked (its evidence cut off, the measurements its
    action quotes): a recording refreshes those once a minute (docs/recording.md), the
    rest of what an advice says at every change."""
    cut = []
    for line in lines:
        title = next((t for t in titles if f"{t}: " in line), None)
        if title:
            line = line[:line.index(f"{title}: ") + len(title)]
        elif line.lstrip().startswith("→"):
            line = MEASURED.sub("#", line)
        cut.append(line)
    return cut


def _group(lines: list[str], pid: int) -> list[str]:
    """The process table's rows of trainer `pid` and its workers."""
    first = next(i for i, line in enumerate(lines) if line.split()[:1] == [str(pid)])
    rows = [lines[first]]
    for line in lines[first + 1:]:
        if "├─" not in line and "└─" not in line:
            break
        rows.append(line)
    return rows


def _held_screen(name: str) -> str:
    """The screen once it stopped changing (a tick in flight when p was pressed lands)."""
    before = tmux.screen(name)
    for _ in range(40):
        time.sleep(1.0)  # longer than a tick: a frame still on its way has arrived
        now = tmux.screen(name)
        if now == before:
            return now
        before = now
    raise AssertionError(f"the paused screen kept changing:\n{now}")


def test_the_replay_shows_what_the_live_view_showed(tmp_path: Path) -> None:
    """`gputop --record` over the demo, paused after 30 ticks; `gputop replay` of the file,
    played to its newest tick, shows the same panes: same Frame, same lines."""
    path = tmp_path / "live.sqlite"
    with tmux.session(REPO, height=HEIGHT) as name:
        tmux.spawn(name, f"{GPUTOP} --demo data-starved --membw off --interval 0.5 "
                   f"--record {path}")
        tmux.wait_for(name, lambda s: "attached" in s and "data-bound" in s)
        wait_for(lambda: bool(one(path, "SELECT 1 FROM frames WHERE id >= 30")), "30 ticks")
        tmux.tmux("send-keys", "-t", name, "p")
        tmux.wait_for(name, lambda s: "PAUSED" in s)
        live = _content(_held_screen(name))
        tmux.tmux("send-keys", "-t", name, "q")
        assert tmux.exit_code(name) == 0
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        ticks = db.execute("SELECT count(*) FROM frames").fetchone()[0]
        assert db.execute("SELECT count(*) FROM steps").fetchone()[0] > 0  # the demo trainer's
        assert db.execute("SELECT DISTINCT json_extract(text, '$.source') FROM gpus JOIN texts "
                          "ON texts.id = (SELECT gpu_id FROM frames WHERE id = gpus.frame)"
                          ).fetchall() == [("simulated",)]
        (trainer,), = db.execute("SELECT DISTINCT pid FROM trainers").fetchall()
        titles = [title for (title,) in db.execute("SELECT DISTINCT title FROM advice")]
    live[0] = live[0].replace("PAUSED ", "", 1)
    with tmux.session(REPO, height=HEIGHT) as name:
        tmux.spawn(name, f"{GPUTOP} replay {path}")  # plays every tick, as the live view did
        shown = tmux.wait_for(name, lambda s: f"tick {ticks}/{ticks}" in s, timeout_s=120)
        replayed = _content(shown)
        assert "REPLAY" in replayed[1]
        del replayed[1]  # the banner: the recorded time, tick and speed
        # the advice shown at the newest tick: any recorded title (a loaded machine can
        # start the demo trainer cpu-starved, so the first title need not be the last)
        assert titles and any(t in line for t in titles if t for line in replayed)
        assert (_without_evidence(_above_table(replayed), titles)
                == _without_evidence(_above_table(live), titles))
        assert _group(replayed, trainer) == _group(live, trainer)
        tmux.tmux("send-keys", "-t", name, "Left")
        tmux.wait_for(name, lambda s: f"tick {ticks - 1}/{ticks}" in s)
        tmux.tmux("send-keys", "-t", name, "q")
        assert tmux.exit_code(name) == 0
