"""Files gputop writes are never turned against whoever runs it (often root): in a directory
another user can write, their links, files and recordings are refused in one line, and what
gputop makes is private (0600) unless asked otherwise (issue 36)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.app.children import open_log
from gputop.recording.writer import RecordError, RecordWriter, open_record
from tests.helpers.builders import frame
from tests.helpers.cli import ROOT, gputop
from tests.helpers.users import OTHER_UID, as_other_user

ROOTS_DATA = b"root's own data, which nobody else may change\n"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second uid")


def _shared(mode: int) -> Iterator[Path]:
    """A new directory under /tmp with `mode`, removed afterwards."""
    where = Path(tempfile.mkdtemp(prefix="gputop-shared-"))
    where.chmod(mode)
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory every user may write in, without the sticky bit."""
    yield from _shared(0o777)


@pytest.fixture
def sticky() -> Iterator[Path]:
    """A directory every user may write in, with the sticky bit (as /tmp)."""
    yield from _shared(0o1777)


@pytest.fixture(params=["not sticky", "sticky"])
def open_to_all(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A directory every user may write in, with and without the sticky bit (as /tmp)."""
    yield from _shared(0o1777 if request.param == "sticky" else 0o777)


def _why_refused(where: Path, reason: str) -> str:
    """What a refusal in `where` says: a non-sticky directory is refused before its entries."""
    return reason if where.stat().st_mode & 0o1000 else "writable by other users and not sticky"


@pytest.fixture
def precious(tmp_path: Path) -> Path:
    """A file of root's, in a directory only root can enter."""
    target = tmp_path / "precious"
    target.write_bytes(ROOTS_DATA)
    return target


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    """This process's (and its children's) umask set to `mask` for the block."""
    before = os.umask(mask)
    try:
        yield
    finally:
        os.umask(before)


def _plant_link(link: Path, target: Path) -> None:
    as_other_user(lambda: os.symlink(target, link))


def _recording(path: Path) -> Path:
    """A recording of one tick at `path`, made by the project's own writer."""
    writer = RecordWriter(open_record(str(path)))
    writer.write(frame())
    writer.db.close()
    return path


def _refused(out: subprocess.CompletedProcess[str], *words: str) -> None:
    """Exit code 2 and one line on stderr holding `words`."""
    assert out.returncode == 2, out
    assert out.stderr.count("\n") == 1, out.stderr
    for word in words:
        assert word in out.stderr, out.stderr


def _untouched(target: Path) -> None:
    assert target.read_bytes() == ROOTS_DATA
    assert target.stat().st_uid == 0


@pytest.mark.parametrize("command", [
    ("record", "{link}", "--demo", "--duration", "1", "--membw", "off"),
    ("--record", "{link}", "--demo"),
], ids=["record", "--record"])
def test_record_does_not_follow_a_link_another_user_planted(
        open_to_all: Path, tmp_path: Path, command: tuple[str, ...]) -> None:
    """Finding 1: the link to root's empty file would have made it a SQLite database."""
    link, empty = open_to_all / "r.sqlite", tmp_path / "empty"
    empty.write_bytes(b"")
    _plant_link(link, empty)
    args = [a.format(link=link) for a in command]
    if command[0] == "--record":  # the live view needs a terminal before it records
        code, err = _with_a_terminal(*args)
        out = subprocess.CompletedProcess(args, code if code is not None else -1, "", err)
    else:
        out = gputop(*args, timeout=30)
    _refused(out, str(link), _why_refused(open_to_all, "symbolic link"))
    assert empty.read_bytes() == b"" and not list(tmp_path.glob("empty?*"))


def test_record_does_not_create_a_file_where_a_planted_link_points(
        open_to_all: Path, tmp_path: Path) -> None:
    """Finding 1: a link to a path that does not exist would have made a file there."""
    link, nowhere = open_to_all / "r.sqlite", tmp_path / "made-by-root"
    _plant_link(link, nowhere)
    _refused(gputop("record", str(link), "--demo", "--duration", "1", "--membw", "off",
                    timeout=30), str(link), _why_refused(open_to_all, "symbolic link"))
    assert not nowhere.exists() and not nowhere.is_symlink()
    assert not list(tmp_path.glob("made-by-root*"))  # nor its -wal, -shm or -journal


def test_record_refuses_a_write_ahead_log_another_user_planted(sticky: Path) -> None:
    """Finding 1: SQLite would replay their -wal file into root's new recording."""
    path = sticky / "r.sqlite"
    as_other_user(lambda: Path(f"{path}-wal").write_bytes(b""))
    _refused(gputop("record", str(path), "--demo", "--duration", "1", "--membw", "off",
                    timeout=30), f"{path}-wal", f"belongs to uid {OTHER_UID}")
    assert not path.exists()


def test_chrome_trace_does_not_follow_a_link_another_user_planted(
        open_to_all: Path, precious: Path, tmp_path: Path) -> None:
    """Finding 2: root's file would have been truncated and overwritten with the trace."""
    recording = _recording(tmp_path / "run.sqlite")
    link = open_to_all / "trace.json"
    _plant_link(link, precious)
    _refused(gputop("export", str(recording), "--chrome-trace", str(link)), str(link),
             _why_refused(open_to_all, "symbolic link"))
    _untouched(precious)


def test_report_refuses_a_directory_where_another_user_can_swap_files(
        shared: Path, tmp_path: Path) -> None:
    """Finding 2's kin: in a non-sticky shared directory the page could be swapped for theirs."""
    recording = _recording(tmp_path / "run.sqlite")
    out = shared / "report.html"
    _refused(gputop("report", str(recording), "-o", str(out)), str(out),
             "writable by other users and not sticky")
    assert not out.exists()


@pytest.mark.parametrize("command", [
    ("report", "{recording}", "-o", "{out}"),
    ("export", "{recording}", "--chrome-trace", "{out}"),
    ("record", "{out}", "--demo", "--duration", "1", "--membw", "off"),
], ids=["report", "chrome-trace", "record"])
def test_a_directory_link_another_user_planted_is_not_followed(
        sticky: Path, precious: Path, tmp_path: Path, command: tuple[str, ...]) -> None:
    """A link in the path's directories (/tmp/theirs -> root's directory) leads nowhere."""
    recording = _recording(tmp_path / "run.sqlite")
    through = sticky / "reports"
    _plant_link(through, precious.parent)
    out = through / precious.name
    args = [a.format(recording=recording, out=out) for a in command]
    _refused(gputop(*args), str(out), "symbolic link", f"uid {OTHER_UID}")
    _untouched(precious)
    made = {p.name for p in precious.parent.iterdir()} - {precious.name}
    assert made <= {"run.sqlite", "run.sqlite-wal", "run.sqlite-shm"}  # the reader's own


def _with_a_terminal(*args: str, timeout: float = 30) -> tuple[int | None, str]:
    """`gputop ARGS` with a pseudo-terminal as stdin and stdout; (exit code, stderr)."""
    controller, terminal = os.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "gputop", *args], stdin=terminal,
                            stdout=terminal, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "GPUTOP_DEBUG": ""})
    os.close(terminal)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:  # the old code ran the TUI instead of refusing
        proc.kill()
        _, err = proc.communicate()
    finally:
        os.close(controller)
    return proc.returncode, err


def test_run_log_does_not_follow_a_link_another_user_planted(
        shared: Path, precious: Path) -> None:
    """Finding 3: the command's output would have been appended to root's file."""
    link = shared / "run.log"
    _plant_link(link, precious)
    code, err = _with_a_terminal("run", "--log", str(link), "--", "sh", "-c", "echo planted")
    assert (code, err.count("\n")) == (2, 1), err
    assert str(link) in err and "symbolic link" in err
    _untouched(precious)


def _trojan_recording(path: Path) -> None:
    """As the other user: a real recording of theirs with a trigger on new ticks, at `path`."""
    own = path.parent / "mine"

    def make() -> None:
        own.mkdir(mode=0o700)
        made = _recording(own / "r.sqlite")
        with contextlib.closing(sqlite3.connect(made)) as db:
            db.executescript("CREATE TABLE marker (frame); CREATE TRIGGER spy AFTER INSERT "
                             "ON frames BEGIN INSERT INTO marker VALUES (new.id); END;")
        os.rename(made, path)

    as_other_user(make)


def _rows(path: Path, query: str) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return int(db.execute(query).fetchone()[0])


def test_root_does_not_record_into_another_users_recording(open_to_all: Path) -> None:
    """Finding 4: their trigger ran as root, and they could read all root recorded."""
    path = open_to_all / "r.sqlite"
    _trojan_recording(path)
    _refused(gputop("record", str(path), "--demo", "--duration", "1", "--membw", "off",
                    timeout=30), str(path),
             _why_refused(open_to_all, f"belongs to uid {OTHER_UID}"))
    assert _rows(path, "SELECT count(*) FROM marker") == 0
    assert _rows(path, "SELECT count(*) FROM frames") == 1


@pytest.mark.parametrize("planted", [
    "CREATE TRIGGER spy AFTER INSERT ON frames BEGIN DELETE FROM meta; END",
    "CREATE VIEW extra AS SELECT 1",
    "CREATE TABLE extra (x)",
    "CREATE INDEX extra ON frames (time)",
])
def test_a_recording_holding_what_gputop_did_not_create_is_refused(
        tmp_path: Path, planted: str) -> None:
    """Finding 4: even in a file of ours, only gputop's own schema is appended to."""
    path = _recording(tmp_path / "r.sqlite")
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute(planted)
    with pytest.raises(RecordError, match="gputop did not create"):
        open_record(str(path))


def test_a_recording_with_a_second_link_is_refused(tmp_path: Path) -> None:
    """Finding 4: a file with another name elsewhere is not only ours to write."""
    path = _recording(tmp_path / "r.sqlite")
    os.link(path, tmp_path / "elsewhere")
    with pytest.raises(RecordError, match="2 hard links"):
        open_record(str(path))


def test_a_recording_of_a_later_layout_says_later(tmp_path: Path) -> None:
    path = _recording(tmp_path / "newer.sqlite")
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA user_version=99")
    _refused(gputop("record", str(path), "--demo", "--duration", "1", "--membw", "off"),
             "recording of a later gputop (layout 99")


def _modes(where: Path, *mode: str) -> dict[str, int]:
    """The modes of a recording, its report, its chrome trace and a run log made in `where`."""
    recording = where / "r.sqlite"
    made = gputop("record", str(recording), "--demo", "--duration", "1", "--membw", "off",
                  *mode, timeout=60)
    assert made.returncode == 0, made.stderr
    for command in (("report", str(recording), "-o", str(where / "r.html"), *mode),
                    ("export", str(recording), "--chrome-trace", str(where / "r.json"), *mode)):
        out = gputop(*command)
        assert out.returncode == 0, out.stderr
    asked = int(mode[1], 8) if mode else 0o600
    os.close(open_log(str(where / "run.log"), mode=asked).fd)
    return {name: (where / name).stat().st_mode & 0o777
            for name in ("r.sqlite", "r.html", "r.json", "run.log")}


def test_files_gputop_writes_are_private_at_the_usual_umask(tmp_path: Path) -> None:
    """Finding 5: they hold other users' command lines."""
    with umask(0o022):
        assert set(_modes(tmp_path).values()) == {0o600}


def test_a_mode_asked_for_is_used(tmp_path: Path) -> None:
    with umask(0o022):
        assert set(_modes(tmp_path, "--mode", "0644").values()) == {0o644}


def test_a_stricter_umask_wins_over_the_mode_asked_for(tmp_path: Path) -> None:
    with umask(0o077):
        assert set(_modes(tmp_path, "--mode", "0644").values()) == {0o600}


def test_a_recordings_write_ahead_files_are_private(tmp_path: Path) -> None:
    """Finding 5: the -wal and -shm hold what the recording holds."""
    path = tmp_path / "r.sqlite"
    with umask(0o022):
        db = open_record(str(path))
    try:
        RecordWriter(db).write(frame())
        modes = {side: Path(f"{path}{side}").stat().st_mode & 0o777 for side in ("-wal", "-shm")}
    finally:
        db.close()
    assert modes == {"-wal": 0o600, "-shm": 0o600}


def test_a_report_replacing_a_readable_one_is_private(tmp_path: Path) -> None:
    recording = _recording(tmp_path / "run.sqlite")
    out = tmp_path / "r.html"
    out.write_text("an older report")
    out.chmod(0o644)
    with umask(0o022):
        assert gputop("report", str(recording), "-o", str(out)).returncode == 0
    assert out.stat().st_mode & 0o777 == 0o600


BAD_MODE = ("--mode", "rw-r--r--")


@pytest.mark.parametrize("command", [
    ("record", "{tmp}/r.sqlite", *BAD_MODE), ("--record", "{tmp}/r.sqlite", *BAD_MODE),
    ("report", "{tmp}/r.sqlite", "-o", "{tmp}/r.html", *BAD_MODE),
    ("export", "{tmp}/r.sqlite", "--chrome-trace", "{tmp}/r.json", *BAD_MODE),
    ("run", *BAD_MODE, "--log", "{tmp}/run.log", "--", "true"),
], ids=["record", "--record", "report", "export", "run"])
def test_a_mode_that_is_not_octal_is_one_line(tmp_path: Path, command: tuple[str, ...]) -> None:
    out = gputop(*(a.format(tmp=tmp_path) for a in command))
    _refused(out, "not a file mode: 'rw-r--r--'")
