"""gputop's screen over the real nvidia-ml-py and the C NVML: GPU rows, a GPU lost mid-run."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import tmux
from tests.nvml_c import build
from tests.nvml_c.build import MIB, FakeNvml

fake_nvml = build.fake_nvml  # the session's C NVML, as a fixture of this module

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

LOST_FROM_TICK = 3


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A real process to stand as a GPU's compute process."""
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait()


def test_screen_shows_every_gpu_and_the_one_lost_mid_run(
    fake_nvml: FakeNvml, tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    scenario = {"devices": [
        {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-a", "util": 87,
         "processes": [{"pid": sleeper.pid, "memory": 4096 * MIB}]},
        {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-b", "lost_from_tick": LOST_FROM_TICK},
        {"name": "NVIDIA GeForce RTX 4090", "uuid": "GPU-c", "util": 12,
         "errors": {"nvmlDeviceGetProcessUtilization": 3}},
    ]}
    env = fake_nvml.env(scenario, tmp_path)
    names = ("GPUTOP_FAKE_NVML_SCENARIO", "GPUTOP_FAKE_NVML_LOG", "LD_LIBRARY_PATH",
             "PYTHONPATH")
    assigned = " ".join(f"{name}={shlex.quote(env[name])}" for name in names)
    with tmux.session(tmp_path, width=160, height=45) as name:
        tmux.spawn(name, f"env TERM=xterm-256color {assigned} {tmux.PYTHON} -m gputop")
        screen = tmux.wait_for(
            name, lambda s: "LOST" in s and "GeForce" in s and f"{sleeper.pid} " in s)
        lines = screen.splitlines()
        rows = [line for line in lines if "A100" in line or "GeForce" in line]
        lost = [line for line in rows if "LOST" in line]
        assert len(lost) == 1 and lost[0].lstrip().startswith("1 LOST"), rows
        assert any(line.lstrip().startswith("0 ") and "87%" in line for line in rows), rows
        assert any(line.lstrip().startswith("2 ") and "12%" in line for line in rows), rows
        (process,) = [line for line in lines if line.lstrip().startswith(f"{sleeper.pid} ")]
        assert "4.0G" in process, process
        assert "Traceback" not in screen and "EXIT=" not in screen
