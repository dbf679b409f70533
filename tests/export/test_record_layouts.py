"""One on-disk layout: a recording of an earlier or a later gputop (another `PRAGMA
user_version`) is refused by every reader and by `record` in one line, exit code 2; the
the queries docs/recording.md shows answer on the layout this gputop writes."""

from __future__ import annotations

import contextlib
import re
import sqlite3
from pathlib import Path

import pytest

from gputop.recording.schema import USER_VERSION
from gputop.recording.writer import RecordWriter, open_record
from tests.helpers.cli import gputop
from tests.helpers.hostile_recording import read_everything, write_recording
from tests.helpers.probe import ROOT
from tests.helpers.tui import recordable_frames

OTHER_LAYOUTS = {"an earlier": USER_VERSION - 1, "a later": USER_VERSION + 1}


def _of_layout(path: Path, layout: int) -> Path:
    """A real recording at `path`, marked as of `layout`."""
    write_recording(path)
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute(f"PRAGMA user_version={layout}")
    return path


@pytest.mark.parametrize("when", OTHER_LAYOUTS)
def test_a_recording_of_another_layout_is_refused_by_every_reader(tmp_path: Path,
                                                                   when: str) -> None:
    layout = OTHER_LAYOUTS[when]
    path = _of_layout(tmp_path / "run.sqlite", layout)
    refusal = f"{path} is a recording of {when} gputop (layout {layout}, not {USER_VERSION})"
    assert read_everything(path) == [refusal] * 3 + [f"{refusal}; record to a new file"]


@pytest.mark.parametrize("command", [("replay",), ("report", "-o", "r.html"),
                                     ("export", "--chrome-trace", "r.json")],
                         ids=lambda command: command[0])
def test_the_cli_refuses_another_layout_in_one_line(tmp_path: Path,
                                                    command: tuple[str, ...]) -> None:
    path = _of_layout(tmp_path / "run.sqlite", USER_VERSION - 1)
    name, *rest = command
    out = gputop(name, str(path), *(str(tmp_path / a) if "." in a else a for a in rest))
    assert out.returncode == 2, out.stderr
    assert out.stderr == f"gputop: {path} is a recording of an earlier gputop (layout " \
                         f"{USER_VERSION - 1}, not {USER_VERSION})\n"


def _documented_queries() -> list[str]:
    """The SQL of each `sqlite3 run.sqlite "..."` in docs/recording.md's first part."""
    page = (ROOT / "docs" / "recording.md").read_text()
    section = page.split("\n## ", 1)[0]
    return [" ".join(sql.split()) for sql in re.findall(r'sqlite3 run\.sqlite "([^"]+)"',
                                                        section)]


def test_the_documented_queries_answer(tmp_path: Path) -> None:
    queries = _documented_queries()
    assert len(queries) >= 3
    path = tmp_path / "run.sqlite"
    writer = RecordWriter(open_record(str(path)))
    for frame in recordable_frames(6):
        writer.write(frame)
    writer.db.close()
    with sqlite3.connect(path) as db:
        for sql in queries:
            assert db.execute(sql).fetchall(), sql
