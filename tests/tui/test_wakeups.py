"""A live gputop left alone wakes two threads a tick, in a real terminal (tmux): the sampler
and the app's own. The terminal's input thread sleeps until a key comes, and frames are
written by the app's thread, not handed to a writer thread. On a 1 Hz monitor each woken
thread costs more than the work it wakes for (its caches went cold in the second between).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests.helpers import tmux

REPO = Path(__file__).resolve().parents[2]
WATCH_S = 4.0  # four ticks at the default interval

pytestmark = [
    pytest.mark.alone,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


def test_a_tick_wakes_the_sampler_and_the_app_only(session: str) -> None:
    python = tmux.PYTHON
    tmux.spawn(session, f"env TERM=xterm-256color PYTHONPATH={REPO} {python} -m gputop")
    tmux.wait_for(session, lambda s: "%CPU" in s and "PID" in s)
    pid = tmux.pane_process(session, b"-m\0gputop")  # not the shell that started it
    time.sleep(2.0)  # past start-up: the deferred sources are in
    before = _switches(pid)
    time.sleep(WATCH_S)
    after = _switches(pid)
    woke = {tid for tid, count in after.items() if count > before.get(tid, 0)}
    assert pid in woke, "the app's thread drew no frame"
    assert len(woke) == 2, (
        f"{len(woke)} of {len(after)} threads woke in {WATCH_S:g} s (expected the app's and "
        f"the sampler's): {sorted(woke)}")
    assert "EXIT=" not in tmux.screen(session)


def _switches(pid: int) -> dict[int, int]:
    """Each thread's voluntary context switches so far: one per time it slept and woke."""
    counts = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        status = (task / "status").read_text()
        line = next(li for li in status.splitlines() if li.startswith("voluntary_ctxt_switches"))
        counts[int(task.name)] = int(line.split()[1])
    return counts
