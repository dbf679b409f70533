"""A real full disk (a small tmpfs): `gputop record` stops with one line and exit 1, and the
file holds every tick it says it recorded."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.recording.writer import open_record
from tests.helpers.probe import ROOT

pytestmark = pytest.mark.slow
ROOM_BYTES = 192 << 10  # free space left once the file exists (its -shm takes 32 KiB)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs, unmounted afterwards (needs root, as CI and this machine run tests)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)],
                             capture_output=True, text=True, timeout=30)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True, timeout=30)


def test_a_full_disk_stops_the_recording_with_one_line(small_disk: Path) -> None:
    path = small_disk / "run.sqlite"
    open_record(str(path)).close()
    stat = os.statvfs(small_disk)
    (small_disk / "filler").write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - ROOM_BYTES))
    out = subprocess.run(
        [sys.executable, "-m", "gputop", "record", str(path), "--interval", "0.1", "--membw",
         "off", "--duration", "600"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "GPUTOP_DEBUG": ""})
    assert out.returncode == 1, out.stderr
    first, last = out.stderr.strip().splitlines()
    assert first.startswith(f"gputop: recording to {path}")
    assert last.startswith("gputop: recording stopped: database or disk is full "
                           f"({path}); ")
    recorded = int(last.split("; ")[1].split()[0])
    (small_disk / "filler").unlink()  # room for SQLite to fold the log back in on open
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert db.execute("SELECT count(*) FROM frames").fetchone() == (recorded,)
    assert recorded >= 1
