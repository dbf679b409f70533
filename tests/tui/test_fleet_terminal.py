"""`gputop --fleet URL` in a real terminal (tmux): a Prometheus that does not answer is one
line on the screen, and q still quits with code 0."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.helpers import tmux
from tests.helpers.prometheus import free_port

REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


def test_an_unreachable_prometheus_is_one_line_on_the_screen() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with tmux.session(REPO, 120, 24) as name:
        tmux.spawn(name, f"env TERM=xterm-256color PYTHONPATH={REPO} {sys.executable} -m gputop "
                         f"--fleet {url}")
        shown = tmux.wait_for(name, lambda s: "cannot query" in s)
        assert sum("cannot query" in line for line in shown.splitlines()) == 1
        tmux.tmux("send-keys", "-t", name, "q")
        assert tmux.exit_code(name) == 0
