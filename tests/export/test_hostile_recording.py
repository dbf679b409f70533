"""Issue 36, findings 6 and 7: a recording someone hands you is hostile input, like a ring.

Every reader (replay, report, Chrome trace, `record` appending) either works or refuses a
corrupt, type-confused or nested-to-death file in one line; no string from the file
reaches the model, the page or the trace with a character that steers a terminal."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gputop.export.chrome_trace import chrome_trace
from gputop.export.report.data import report_data
from gputop.recording.reader import Recording
from gputop.recording.replay import Replay
from tests.helpers.hostile_recording import (
    PWN,
    SHOWN,
    assert_printable,
    read_everything,
    steering,
    strings_in,
    write_recording,
)
from tests.helpers.probe import ROOT

COMMANDS = (("replay", "{file}"), ("report", "{file}", "-o", "{out}.html"),
            ("export", "{file}", "--chrome-trace", "{out}.json"), ("record", "{file}",
            "--duration", "1s", "--membw", "off", "--interval", "0.2"))
EXAMPLES = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
DEEP = 200_000
SQL_VALUES = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1),
                       st.floats(allow_nan=True, allow_infinity=True),
                       st.text(max_size=20), st.binary(max_size=40))
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real recording of three ticks, written by the recorder's writer."""
    return write_recording(tmp_path_factory.mktemp("real") / "run.sqlite")


def _copy(recording: Path, into: Path) -> Path:
    """A copy of `recording` in a directory of its own under `into`."""
    into.mkdir(exist_ok=True)
    path = Path(tempfile.mkdtemp(dir=into)) / "run.sqlite"
    shutil.copyfile(recording, path)
    return path


def _cells(path: Path) -> list[tuple[str, str]]:
    """(table, column) of every column of every table in the file."""
    with sqlite3.connect(path) as db:
        tables = [name for (name,) in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return [(table, column) for table in tables
                for (_, column, *_) in db.execute(f"PRAGMA table_info({table})")]


def _edit(path: Path, sql: str, *args: object) -> bool:
    """Run one change on the file; False when SQLite's constraints refuse it."""
    try:
        with sqlite3.connect(path) as db:
            db.execute(sql, args)
    except sqlite3.IntegrityError:
        return False
    except sqlite3.OperationalError as exc:
        if "mismatch" in str(exc):
            return False
        raise
    return True


def _nested(depth: int, opener: str = "[", closer: str = "]") -> str:
    return opener * depth + closer * depth


def _cli(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gputop", *argv], cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)


def _assert_refused_in_one_line(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("gputop: "), result.stderr
    assert "internal error" not in result.stderr and not steering(result.stderr[:-1])


# ---- finding 6: the three files the issue found, each refused in one line ----------------


def test_random_bytes_over_pages_are_one_line(recording: Path, tmp_path: Path) -> None:
    path = _copy(recording, tmp_path)
    data = bytearray(path.read_bytes())
    page = 4096
    for start in range(page, len(data), 2 * page):  # every other page after the first
        data[start:start + page] = bytes((i * 167 + 13) % 256 for i in range(page))
    path.write_bytes(bytes(data))
    outcomes = read_everything(path)
    assert all(o.startswith(f"cannot read {path}") or o.startswith("cannot record to")
               for o in outcomes), outcomes


def test_a_text_that_is_an_integer_is_one_line(recording: Path, tmp_path: Path) -> None:
    path = _copy(recording, tmp_path)
    assert _edit(path, "UPDATE texts SET text = 5")
    outcomes = read_everything(path)
    assert outcomes[:3] == [f"cannot read {path}: text 1 is an integer, not an object"] * 3


def test_json_nested_200000_deep_is_one_line(recording: Path, tmp_path: Path) -> None:
    path = _copy(recording, tmp_path)
    assert _edit(path, "UPDATE texts SET text = ?", _nested(DEEP))
    outcomes = read_everything(path)
    assert outcomes[:3] == [f"cannot read {path}: texts.text nests deeper than 32"] * 3


@pytest.mark.parametrize("command", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_the_cli_refuses_a_type_confused_recording_in_one_line(
        recording: Path, tmp_path: Path, command: tuple[str, ...]) -> None:
    path = _copy(recording, tmp_path)
    assert _edit(path, "UPDATE texts SET text = ?", _nested(DEEP, '{"a":', "}"))
    assert _edit(path, "UPDATE frames SET interval_ms = 'soon'")
    _assert_refused_in_one_line(_cli(*(a.format(file=path, out=tmp_path / "out")
                                       for a in command)))


# ---- finding 6: hypothesis mutates real recordings -----------------------------------------


@EXAMPLES
@given(offset=st.integers(0, 1 << 20), junk=st.binary(min_size=1, max_size=512))
def test_bytes_over_the_file_are_read_or_refused(recording: Path, tmp_path: Path, offset: int,
                                                 junk: bytes) -> None:
    path = _copy(recording, tmp_path / "bytes")
    data = bytearray(path.read_bytes())
    at = offset % len(data)
    data[at:at + len(junk)] = junk[:len(data) - at]
    path.write_bytes(bytes(data))
    read_everything(path)


@EXAMPLES
@given(pick=st.integers(0, 1 << 16), value=SQL_VALUES)
def test_a_value_of_any_type_in_any_column_is_read_or_refused(
        recording: Path, tmp_path: Path, pick: int, value: object) -> None:
    path = _copy(recording, tmp_path / "cells")
    cells = _cells(path)
    table, column = cells[pick % len(cells)]
    if _edit(path, f"UPDATE {table} SET {column} = ?", value):
        read_everything(path)


@EXAMPLES
@given(pick=st.integers(0, 1 << 16), key_pick=st.integers(0, 64), value=JSON_VALUES)
def test_any_json_in_any_text_is_read_or_refused(recording: Path, tmp_path: Path, pick: int,
                                                 key_pick: int, value: object) -> None:
    path = _copy(recording, tmp_path / "json")
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT id, text FROM texts ORDER BY id").fetchall()
    text_id, text = rows[pick % len(rows)]
    old = json.loads(text)
    if isinstance(old, dict) and old and key_pick % 2:
        old[sorted(old)[key_pick % len(old)]] = value  # one field of the right object
    elif isinstance(old, list) and old and key_pick % 2:
        old[key_pick % len(old)] = value
    else:
        old = value
    assert _edit(path, "UPDATE texts SET text = ? WHERE id = ?", json.dumps(old), text_id)
    read_everything(path)


@EXAMPLES
@given(pick=st.integers(0, 1 << 16), depth=st.sampled_from([33, 1000, DEEP]),
       brackets=st.sampled_from([("[", "]"), ('{"a":', "}")]))
def test_deep_json_in_any_text_is_refused(recording: Path, tmp_path: Path, pick: int,
                                          depth: int, brackets: tuple[str, str]) -> None:
    path = _copy(recording, tmp_path / "deep")
    with sqlite3.connect(path) as db:
        ids = [i for (i,) in db.execute("SELECT id FROM texts ORDER BY id")]
    assert _edit(path, "UPDATE texts SET text = ? WHERE id = ?", _nested(depth, *brackets),
                 ids[pick % len(ids)])
    read_everything(path)


@EXAMPLES
@given(pick=st.integers(0, 1 << 16))
def test_a_dropped_table_or_view_is_read_or_refused(recording: Path, tmp_path: Path,
                                                    pick: int) -> None:
    path = _copy(recording, tmp_path / "dropped")
    with sqlite3.connect(path) as db:
        found = db.execute("SELECT type, name FROM sqlite_master WHERE type IN ('table', "
                           "'view') ORDER BY name").fetchall()
    kind, name = found[pick % len(found)]
    assert _edit(path, f"DROP {kind} {name}")
    read_everything(path)


# ---- the path itself: a FIFO never blocks a reader -----------------------------------------


@pytest.mark.parametrize("command", COMMANDS, ids=[c[0] for c in COMMANDS])
@pytest.mark.parametrize("where", ["file", "wal"])
def test_a_fifo_is_one_line_not_a_hang(recording: Path, tmp_path: Path,
                                       command: tuple[str, ...], where: str) -> None:
    """A FIFO as the recording, or beside it as its write-ahead log, is refused at once (the
    subprocess's timeout is the guard: a reader blocked on the FIFO never returns)."""
    path = tmp_path / "run.sqlite"
    if where == "file":
        os.mkfifo(path)
    else:
        shutil.copyfile(recording, path)
        os.mkfifo(f"{path}-wal")
    _assert_refused_in_one_line(_cli(*(a.format(file=path, out=tmp_path / "out")
                                       for a in command), timeout=30))


# ---- finding 7: strings from a recording reach the model, page and trace escaped ----------


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recording whose every free-text string starts with an escape sequence, in the
    `texts` JSON and in the text columns (process_info, advice, memory_consumers, gaps,
    meta)."""
    path = write_recording(tmp_path_factory.mktemp("hostile") / "run.sqlite", PWN)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE gaps SET reason = ? || reason", (PWN,))
        db.execute("UPDATE meta SET value = ? || value WHERE key = 'gputop_version'", (PWN,))
    return path


def _shown_escaped(strings: list[str], *expected: str) -> None:
    assert not [s for s in strings if steering(s)]
    for text in expected:
        assert any(s.startswith(SHOWN + text) for s in strings), (text, strings[:20])


def test_replay_shows_a_recordings_strings_escaped(hostile: Path) -> None:
    replay = Replay(str(hostile))
    try:
        frames = [replay.frame(i) for i in range(len(replay))]
    finally:
        replay.close()
    for frame in frames:
        assert_printable(frame)
    frame = frames[-1]
    _shown_escaped(strings_in(frame), "trainbox", "Simulated", "note", "550", "alice",
                   "cuda:0", "key", "value", "ring gone", "estimate", "hog", "unbalanced",
                   "one DIMM", "GPUs wait", "idle 60%", "add workers", "OSError: gone")
    assert frame.host.hostname == SHOWN + "trainbox"
    assert all(p.name.startswith(SHOWN) for p in frame.processes)
    assert all(a.title.startswith(SHOWN) for a in frame.advice)


def test_the_report_shows_a_recordings_strings_escaped(hostile: Path) -> None:
    with Recording(str(hostile)) as recording:
        data = report_data(recording)
    _shown_escaped(strings_in(data), "trainbox", "Simulated", "cuda:0", "key", "GPUs wait",
                   "add workers", "estimate")
    assert data["meta"]["gputop_version"].startswith(SHOWN)
    assert data["host"]["hostname"] == SHOWN + "trainbox"


def test_the_chrome_trace_shows_a_recordings_strings_escaped(hostile: Path) -> None:
    trace = json.loads(json.dumps(chrome_trace(str(hostile))))
    _shown_escaped(strings_in(trace), "trainbox")
