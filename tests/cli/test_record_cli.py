"""`gputop record`, `--record` and `gputop replay` on the command line: headless recording
(no Textual), one-line bad input, a clean stop on SIGTERM with what was recorded."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from gputop.recording.writer import RecordWriter, open_record
from tests.helpers.builders import frame
from tests.helpers.cli import gputop

pytestmark = pytest.mark.slow  # every test runs the real `python -m gputop`
UI_LIBS = {"textual", "rich"}


def _frames(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT count(*) FROM frames").fetchone()[0])


def _steps(path: Path) -> int:
    """Steps in the file: probed trainers of other users of this machine get recorded too."""
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT count(*) FROM steps").fetchone()[0])


def _files(tmp: Path) -> None:
    """A foreign SQLite file, an empty recording and one with ticks, in `tmp`."""
    with sqlite3.connect(tmp / "other.sqlite") as db:
        db.execute("CREATE TABLE precious (x)")
    open_record(str(tmp / "empty.sqlite")).close()
    writer = RecordWriter(open_record(str(tmp / "ok.sqlite")))
    writer.write(frame())
    writer.db.close()


@pytest.mark.parametrize(("args", "expect"), [
    (("record", "{tmp}"), "cannot record to {tmp}: it is a directory"),
    (("record", "{tmp}/other.sqlite"), "{tmp}/other.sqlite is a SQLite file but not a gputop "
                                       "recording; not touching it"),
    (("record", "{tmp}/r.sqlite", "--keep", "0"), "duration must be positive, got 0"),
    (("record", "{tmp}/r.sqlite", "--keep", "soon"), "not a duration: 'soon'"),
    (("record", "{tmp}/r.sqlite", "--max-size", "5"), "size must be at least 1M, got 5"),
    (("record", "{tmp}/r.sqlite", "--gpus", "2"), "--gpus sets the number of simulated GPUs"),
    (("--max-size", "10M"), "--max-size and --keep go with --record FILE"),
    (("--once", "--record", "{tmp}/r.sqlite"), "--record, --max-size and --keep go with the "
                                               "live view, not --once"),
    (("--record", "{tmp}"), "cannot record to {tmp}: it is a directory"),
    (("replay", "{tmp}/missing.sqlite"), "no recording at {tmp}/missing.sqlite"),
    (("replay", "{tmp}"), "{tmp} is not a file"),
    (("replay", "{tmp}/other.sqlite"), "{tmp}/other.sqlite is not a gputop recording"),
    (("replay", "{tmp}/empty.sqlite"), "{tmp}/empty.sqlite holds no ticks yet"),
    (("replay", "{tmp}/ok.sqlite", "--speed", "3"), "speed must be one of 0.25, 0.5, 1, 2"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: tuple[str, ...],
                                          expect: str) -> None:
    _files(tmp_path)
    out = gputop(*(a.format(tmp=tmp_path) for a in args))
    assert out.returncode == 2, out
    assert out.stderr.count("\n") == 1
    assert expect.format(tmp=tmp_path) in out.stderr


def test_record_runs_headless_without_textual(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    code = (f"import sys\nfrom gputop.app.cli import main\n"
            f"rc = main(['record', {str(path)!r}, '--interval', '0.2', '--duration', '1', "
            f"'--membw', 'off'])\nprint('rc', rc)\nprint('\\n'.join(sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    lines = out.stdout.split()
    assert "rc" in lines and lines[lines.index("rc") + 1] == "0", out.stderr
    assert not {m for m in lines if m.split(".")[0] in UI_LIBS}
    assert _frames(path) >= 2
    assert f"gputop: recording to {path} every 0.2 s (Ctrl-C stops)" in out.stderr
    assert f"ticks and {_steps(path)} steps to {path}" in out.stderr


def test_sigterm_ends_the_recording_with_what_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "gputop", "record", str(path), "--interval",
                             "0.1", "--membw", "off"], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "GPUTOP_DEBUG": ""})
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith(f"gputop: recording to {path}")
    for _ in range(600):
        if path.exists() and _frames(path) >= 3:
            break
        assert proc.poll() is None
        subprocess.run(["sleep", "0.1"], check=True)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    last = proc.stderr.read().strip()
    held = _frames(path)
    assert last == f"gputop: recorded {held} ticks and {_steps(path)} steps to {path}"
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0
