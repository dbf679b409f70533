"""A ring of another layout (a trainer still running under an older gputop's probe, version 2:
128-byte records) is refused in one line that says so, never read as garbage nor a traceback."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.probe import ring as ring_format
from gputop.probe.reader import RingReader, RingRefused
from gputop.sources.attach import check_attachable
from tests.helpers.probe import ROOT, trainer_env

OLDER = 2
OLDER_RECORD_SIZE = 128


def _ring_of_version(pid: int, version: int, record_size: int) -> bytes:
    """A header-only ring of `pid` as a probe writing `version` leaves it."""
    size = ring_format.HEADER_SIZE + ring_format.SLOTS * record_size
    raw = bytearray(size)
    ticks = ring_format.start_ticks(pid)
    assert ticks is not None
    ring_format.HEADER.pack_into(raw, 0, ring_format.MAGIC, version, ring_format.HEADER_SIZE,
                                 record_size, ring_format.SLOTS, pid, ticks, time.time_ns(),
                                 0, 0, 0)
    return bytes(raw)


@pytest.fixture
def sleeper() -> Iterator[int]:
    """A live process for the ring to belong to."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc.pid
    proc.kill()
    proc.wait()


@pytest.mark.parametrize(("version", "record_size", "words"), [
    (OLDER, OLDER_RECORD_SIZE, "older gputop"),
    (ring_format.VERSION + 1, ring_format.RECORD_SIZE, "newer gputop"),
])
def test_a_ring_of_another_version_is_refused_in_one_line(
    tmp_path: Path, sleeper: int, version: int, record_size: int, words: str
) -> None:
    path = ring_format.ring_path(sleeper, directory=str(tmp_path))
    Path(path).write_bytes(_ring_of_version(sleeper, version, record_size))
    with pytest.raises(RingRefused, match=words):
        RingReader(path, pid=sleeper)
    reason = check_attachable(sleeper, str(tmp_path))
    assert reason is not None and words in reason and f"ring version {version}" in reason
    out = subprocess.run([sys.executable, "-m", "gputop", "--once", "--attach", str(sleeper)],
                         env=trainer_env(tmp_path), cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2, out
    assert out.stderr.strip().splitlines() == [f"gputop: {reason}"]
    assert "Traceback" not in out.stderr + out.stdout
