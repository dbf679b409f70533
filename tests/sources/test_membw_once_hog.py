"""Issue 14's test: a memory hog started before `gputop --once` never leaves the reading unchanged.

With `sysbench memory` (1 thread, 64 MiB blocks) running first, `gputop --once --json`
reports a pressure clearly above the idle reading taken before the hog, or null with a
reason. The kept idle peak lives in a state directory of the test's own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.membw import sysbench_hog

pytestmark = [pytest.mark.slow, pytest.mark.alone]

CLEARLY = 0.1  # pressure is 0..1; the old estimate moved by 0.01-0.17 either way


def once(state: Path) -> dict[str, Any]:
    """`gputop --once --json --interval 1` with its own state dir; its memory_bandwidth."""
    env = dict(os.environ, XDG_STATE_HOME=str(state))
    done = subprocess.run([sys.executable, "-m", "gputop", "--once", "--json", "--interval", "1"],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    membw = json.loads(done.stdout)["memory_bandwidth"]
    assert membw is not None  # default --membw auto
    return membw



def test_once_under_a_hog_started_first_reads_higher_or_null_with_a_reason(
    tmp_path: Path,
) -> None:
    if shutil.which("sysbench") is None:
        pytest.skip("sysbench not installed (apt-get install -y sysbench)")
    idle = once(tmp_path)
    with sysbench_hog("64M"):
        loaded = once(tmp_path)
    detail = f"idle {idle['pressure']} ({idle['note']}); hog {loaded['pressure']} " \
             f"({loaded['note']})"
    print(detail)
    if loaded["pressure"] is None:
        assert loaded["note"], detail  # null always comes with its reason
        assert loaded["confidence"] in ("unavailable", "uncalibrated", "calibrating"), detail
        return
    assert loaded["relative_to"], detail  # a number says what it is relative to
    assert idle["pressure"] is not None, detail
    assert loaded["pressure"] > idle["pressure"] + CLEARLY, detail
