"""Whose trainers a recording, its report and trace, and /metrics take, and that no secret in a
trainer's argv reaches any of them (issue 36, findings 11 and 12): real trainers under the
probe, one of root's and one of a second, real uid, both started with `--password=hunter2`."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.probe import ROOT, stepping_trainer
from tests.helpers.prometheus import metric_lines, serve, serve_env, wait_until
from tests.helpers.users import OTHER_UID

pytestmark = pytest.mark.slow

SECRET = "hunter2"
SECRET_ARGS = (f"--password={SECRET}", "--token", SECRET, f"https://alice:{SECRET}@host/x")
WAIT_S = 120.0


@dataclass(frozen=True)
class Trainers:
    """Root's trainer and the second uid's, their rings in `ring_dir`."""

    ring_dir: Path
    ours: int
    theirs: int


@pytest.fixture(scope="module")
def trainers() -> Iterator[Trainers]:
    """Both trainers running, rings in a sticky world-writable directory like /dev/shm."""
    if os.getuid() != 0:
        pytest.skip("a second uid's trainer needs root")
    ring_dir = Path(tempfile.mkdtemp(prefix="gputop-whose-", dir="/tmp"))
    ring_dir.chmod(0o1777)
    stop = ring_dir / "stop"
    with _trainer(ring_dir, stop, None) as ours, _trainer(ring_dir, stop, OTHER_UID) as theirs:
        yield Trainers(ring_dir, ours, theirs)
    shutil.rmtree(ring_dir, ignore_errors=True)


@contextmanager
def _trainer(ring_dir: Path, stop: Path, uid: int | None) -> Iterator[int]:
    """The stepping trainer with the secret-bearing argv, as `uid` (None: us) until `stop`."""
    with stepping_trainer(ring_dir, stop, argv=SECRET_ARGS, user=uid, limit_s=600) as started:
        yield started[1]


def gputop(*args: str, ring_dir: Path, user: int | None = None) -> subprocess.CompletedProcess[str]:
    """`gputop ARGS` to its end, rings looked for in `ring_dir`, as `user` (None: as us)."""
    return subprocess.run([sys.executable, "-m", "gputop", *args], cwd=ROOT, text=True,
                          env=serve_env(ring_dir), capture_output=True, timeout=WAIT_S,
                          stdin=subprocess.DEVNULL, user=user, group=user,
                          extra_groups=None if user is None else [])


def query(path: Path, sql: str) -> list[tuple[object, ...]]:
    """The rows of `sql` on the recording at `path`; none while it is not made yet."""
    if not path.exists():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute(sql).fetchall()
    except sqlite3.OperationalError:  # its tables not made yet
        return []
    finally:
        db.close()


def last_tick(path: Path) -> int:
    rows = query(path, "SELECT max(id) FROM frames")
    return rows[0][0] if rows and isinstance(rows[0][0], int) else 0


def trainers_with_steps(path: Path) -> set[object]:
    """The PIDs of the recorded trainers that have steps in the file."""
    return {pid for (pid,) in query(path, "SELECT DISTINCT t.pid FROM trainers t JOIN steps s "
                                          "ON s.trainer = t.id")}


def record_until(path: Path, ring_dir: Path, wanted: set[int], *extra: str) -> None:
    """`gputop record PATH` until the trainers `wanted` have steps in it and two more ticks
    have been written (time for any other probed trainer to be attached too), then SIGTERM."""
    proc = subprocess.Popen([sys.executable, "-m", "gputop", "record", str(path), "--interval",
                             "0.2", "--membw", "off", *extra], cwd=ROOT, env=serve_env(ring_dir),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: wanted <= trainers_with_steps(path), WAIT_S, 0.1,
                   what=f"steps of {wanted} in {path}")
        ticks = last_tick(path)
        wait_until(lambda: last_tick(path) >= ticks + 2, WAIT_S, 0.1, what="two more ticks")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0, err


def assert_no_secret(*paths: Path) -> None:
    """`SECRET` is in none of the files (nor in a recording's write-ahead log)."""
    for path in paths:
        for one in (path, Path(f"{path}-wal")):
            if one.exists():
                assert SECRET.encode() not in one.read_bytes(), f"{SECRET} is in {one}"


@dataclass(frozen=True)
class Written:
    """A default `gputop record` beside both trainers, and the report and trace made of it."""

    recording: Path
    report: Path
    trace: Path


@pytest.fixture(scope="module")
def mine(trainers: Trainers, tmp_path_factory: pytest.TempPathFactory) -> Written:
    where = tmp_path_factory.mktemp("mine")
    written = Written(where / "mine.sqlite", where / "mine.html", where / "mine.json")
    record_until(written.recording, trainers.ring_dir, {trainers.ours})
    for args in (("report", str(written.recording), "-o", str(written.report)),
                 ("export", str(written.recording), "--chrome-trace", str(written.trace))):
        done = gputop(*args, ring_dir=trainers.ring_dir)
        assert done.returncode == 0, done.stderr
    return written


def test_a_recording_takes_only_the_callers_trainers(trainers: Trainers, mine: Written) -> None:
    assert {pid for (pid,) in query(mine.recording, "SELECT pid FROM trainers")} == {
        trainers.ours}
    assert query(mine.recording, "SELECT value FROM meta WHERE key = 'trainers_of'") == [
        ("user:root",)]
    assert "trainers of user:root" in mine.report.read_text()


def test_no_secret_reaches_the_recording_its_report_or_trace(mine: Written) -> None:
    assert_no_secret(mine.recording, mine.report, mine.trace)


def test_all_users_takes_every_users_trainers_and_still_no_secret(
    trainers: Trainers, tmp_path: Path,
) -> None:
    path = tmp_path / "all.sqlite"
    record_until(path, trainers.ring_dir, {trainers.ours, trainers.theirs}, "--all-users")
    pids = {pid for (pid,) in query(path, "SELECT pid FROM trainers")}
    assert pids == {trainers.ours, trainers.theirs}
    assert query(path, "SELECT value FROM meta WHERE key = 'trainers_of'") == [("all-users",)]
    masked = [text for (text,) in query(path, "SELECT text FROM texts")
              if "--password=***" in str(text)]
    assert masked  # the command lines are there, their secrets masked
    report = tmp_path / "all.html"
    assert gputop("report", str(path), "-o", str(report), ring_dir=trainers.ring_dir
                  ).returncode == 0
    assert_no_secret(path, report)


def test_another_users_trainer_is_refused_to_record_without_all_users(
    trainers: Trainers, tmp_path: Path,
) -> None:
    done = gputop("record", str(tmp_path / "r.sqlite"), "--attach", str(trainers.theirs),
                  "--duration", "1", ring_dir=trainers.ring_dir)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--all-users" in done.stderr


def test_all_users_is_refused_to_a_user_who_is_not_root(trainers: Trainers) -> None:
    done = gputop("record", str(trainers.ring_dir / "r.sqlite"), "--all-users", "--duration",
                  "1", ring_dir=trainers.ring_dir, user=OTHER_UID)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "needs root" in done.stderr
    assert not (trainers.ring_dir / "r.sqlite").exists()


def test_metrics_carry_only_the_callers_trainers_and_no_secret(trainers: Trainers) -> None:
    args = ["--listen", "127.0.0.1:0", "--interval", "0.2", "--membw", "off"]
    with serve(args, serve_env(trainers.ring_dir)) as exporter:
        def ours_counted() -> str | None:
            text = exporter.scrape()
            info = metric_lines(text, "gputop_trainer_info", pid=str(trainers.ours))
            label = info[0].split('trainer="', 1)[1].split('"', 1)[0] if info else None
            steps = label and metric_lines(text, "gputop_trainer_steps_total", trainer=label)
            return text if steps else None

        wait_until(ours_counted, WAIT_S, what="our trainer's steps in /metrics")
        # two ticks on: the follower attaches one new trainer per parent and tick
        seen = {_frame_time(exporter.scrape())}

        def two_ticks_on() -> str | None:
            text = exporter.scrape()
            seen.add(_frame_time(text))
            return text if len(seen) >= 3 else None

        text = wait_until(two_ticks_on, WAIT_S, 0.1, what="two more ticks")
    assert f'pid="{trainers.ours}"' in text
    assert f'pid="{trainers.theirs}"' not in text
    assert 'trainers_of="user:root"' in text
    assert SECRET not in text


def _frame_time(text: str) -> float:
    (line,) = metric_lines(text, "gputop_frame_timestamp_seconds")
    return float(line.rsplit(" ", 1)[1])
