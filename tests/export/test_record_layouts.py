"""Recordings of layouts 2 and 3 (users made them before layout 3 packed a tick's processes,
and before layout 4 packed a tick's steps and attached trainers): replay, report and export
read them as before; the README's queries run on every layout; an older file is never
appended to.

The fixtures hold `recordable_frames(6)` as those layouts stored them, with the advice words
today's rules write (a change of wording is made in them too: they test the layout, not the
words).
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from gputop.export.chrome_trace import chrome_trace
from gputop.export.report.data import open_recording, report_data
from gputop.recording.reader import Recording
from gputop.recording.schema import LAYOUTS_READ, USER_VERSION
from gputop.recording.writer import RecordError, RecordWriter, open_record
from tests.helpers.probe import ROOT
from tests.helpers.tui import drawn_lines, recordable_frames

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TICKS = 6  # the fixtures': recordable_frames(6)
OLDER = [layout for layout in LAYOUTS_READ if layout != USER_VERSION]


def _older(tmp_path: Path, layout: int) -> Path:
    """The checked-in recording of `layout`, as a file."""
    path = tmp_path / f"layout{layout}.sqlite"
    db = sqlite3.connect(path)
    db.executescript((FIXTURES / f"layout{layout}.sql").read_text())
    db.close()
    return path


def _current(tmp_path: Path) -> Path:
    """The fixtures' frames recorded by this gputop."""
    path = tmp_path / "current.sqlite"
    writer = RecordWriter(open_record(str(path)))
    for frame in recordable_frames(TICKS):
        writer.write(frame)
    writer.db.close()
    return path


def test_the_older_layouts_have_fixtures() -> None:
    assert OLDER == [2, 3]


@pytest.mark.parametrize("layout", OLDER)
def test_an_older_recording_replays_what_it_recorded(tmp_path: Path, layout: int) -> None:
    """Each tick of the old file draws the lines the same tick recorded now draws, with the
    same processes, trainers, steps and advice."""
    old, new = Recording(str(_older(tmp_path, layout))), Recording(str(_current(tmp_path)))
    assert (old.layout, new.layout, len(old), len(new)) == (layout, USER_VERSION, TICKS, TICKS)
    for index in range(TICKS):
        before, now = old.frame(index), new.frame(index)
        kept = {p.pid for p in now.processes}
        assert kept and {p.pid for p in before.processes} == kept
        assert drawn_lines(before, kept) == drawn_lines(now, kept)
        assert sorted(before.processes, key=lambda p: p.pid) == sorted(
            now.processes, key=lambda p: p.pid)
        assert (before.trainers, before.attached, before.advice) == (
            now.trainers, now.attached, now.advice)
    assert old.trend(TICKS - 1, TICKS) == new.trend(TICKS - 1, TICKS)


@pytest.mark.parametrize("layout", OLDER)
def test_an_older_recording_makes_the_same_report_and_trace(tmp_path: Path, layout: int) -> None:
    old, new = _older(tmp_path, layout), _current(tmp_path)
    pages = []
    for path in (old, new):
        db = open_recording(str(path))
        data = report_data(db, str(path))
        db.close()
        pages.append({key: value for key, value in data.items() if key not in ("file", "meta")})
    assert pages[0] == pages[1] and pages[0]["gpus"] and pages[0]["trainers"]
    assert chrome_trace(str(old))["traceEvents"] == chrome_trace(str(new))["traceEvents"]


def _readme_queries() -> list[str]:
    """The SQL of each `sqlite3 run.sqlite "..."` in the README's Recording section."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Recording", 1)[1].split("\n## ", 1)[0]
    return [" ".join(sql.split()) for sql in re.findall(r'sqlite3 run\.sqlite "([^"]+)"',
                                                        section)]


@pytest.mark.parametrize("layout", LAYOUTS_READ)
def test_the_readme_queries_answer_on_every_layout(tmp_path: Path, layout: int) -> None:
    queries = _readme_queries()
    assert len(queries) >= 3
    path = _current(tmp_path) if layout == USER_VERSION else _older(tmp_path, layout)
    with sqlite3.connect(path) as db:
        for sql in queries:
            assert db.execute(sql).fetchall(), sql


@pytest.mark.parametrize("layout", OLDER)
def test_an_older_recording_is_not_appended_to(tmp_path: Path, layout: int) -> None:
    path = _older(tmp_path, layout)
    with pytest.raises(RecordError, match=rf"layout {layout}, not {USER_VERSION}\).*record to "
                       "a new file"):
        open_record(str(path))
