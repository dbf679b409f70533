"""Issue 39, the host's screen: `gputop --attach HOSTPID` in a real terminal (tmux) over the C
NVML, for a probed trainer in a container with a /dev/shm of its own that NVML reports under
its host PID: the trainer's row carries its PID inside the container and its GPU memory, and
its steps come through."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from gputop.probe.ring import ENV_DIR
from tests.helpers import containers, tmux
from tests.helpers.containers import PRIVATE_SHM, contained, stepping_trainer
from tests.nvml_c import build
from tests.nvml_c.build import LOG_ENV, MIB, SCENARIO_ENV, FakeNvml

fake_nvml = build.fake_nvml  # the session's C NVML, as a fixture of this module
namespaces = containers.namespaces  # skips where no PID namespace can be made

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("namespaces"),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

GPU_MEMORY = 6 * 1024 * MIB
GPU_MEMORY_SHOWN = "6.0G"
STEP_LINE = re.compile(r"#\d+\s*▕")  # a step's number, then its bar


def test_the_host_screen_attaches_a_contained_trainer_by_its_host_pid(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    stop = tmp_path / "stop"
    with contained(PRIVATE_SHM, stepping_trainer(stop), stop) as (_, pid):
        scenario = {"devices": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-h",
                                 "processes": [{"pid": pid, "memory": GPU_MEMORY}]}]}
        env = fake_nvml.env(scenario, tmp_path / "nvml")
        assigned = " ".join(f"{name}={shlex.quote(env[name])}" for name in (
            SCENARIO_ENV, LOG_ENV, "LD_LIBRARY_PATH", "PYTHONPATH"))
        with tmux.session(tmp_path, width=200, height=50) as name:
            # Rings where the probe puts them unasked: /dev/shm, which is not the trainer's.
            tmux.spawn(name, f"env -u {ENV_DIR} TERM=xterm-256color {assigned} "
                             f"{tmux.PYTHON} -m gputop --membw off --attach {pid}")
            tmux.wait_for(name, lambda s: "GPU MEM" in s)
            tmux.tmux("send-keys", "-t", name, "g")  # by GPU memory: its row first on a busy box
            screen = tmux.wait_for(name, lambda s: "GPU ME▼" in s and _steps_shown(s, pid) and (
                _row(s, pid) is not None))
    row = _row(screen, pid)
    assert row is not None
    # Its own PID namespace without a container's cgroup: no "ctr:", its PID in there.
    assert "nspid:1 " in row, row
    assert row.split()[2:4] == ["0", GPU_MEMORY_SHOWN], row  # its GPU, its memory there
    # (the pane's own command line, in its process row, has "EXIT=" in it)
    assert not any(line.startswith(("Traceback", "EXIT=")) for line in screen.splitlines())


def _steps_shown(screen: str, pid: int) -> bool:
    """The step pane is attached to `pid` and shows a step."""
    return f"attached {pid}" in screen and STEP_LINE.search(screen) is not None


def _row(screen: str, pid: int) -> str | None:
    """The process row of `pid`, if on screen."""
    return next((line for line in screen.splitlines() if line.split()[:1] == [str(pid)]), None)
