"""Installed as users install it: the wheel in a fresh venv with runtime dependencies only,
and the probe in a second environment that has no gputop, reached through `gputop probe-path`."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.app.demo_trainer import STDLIB_NOTE
from tests.helpers import tmux

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
TEST_TOOLS = {"pytest", "mypy", "ruff", "numpy", "hypothesis", "torch", "hatchling"}

TRAINER = """
import importlib.util, os, sys, time
from gputop import probe
assert importlib.util.find_spec("textual") is None, "gputop's environment leaked in"
print(os.getpid(), flush=True)
for step in probe.watch(range(10**6), batch_size=8):
    with probe.phase("forward"):
        time.sleep(0.01)
    with probe.phase("backward"):
        sum(range(20000))
    with probe.phase("optimizer"):
        sum(range(5000))
"""


def _clean_env() -> dict[str, str]:
    """Our environment without PYTHONPATH: the installed gputop, not this checkout, answers."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def _run(*command: str | Path, timeout: float = 300, cwd: Path | None = None) -> str:
    """`command`'s output, run in `cwd` with the clean environment; it must succeed."""
    done = subprocess.run([str(part) for part in command], capture_output=True, text=True,
                          timeout=timeout, env=_clean_env(), cwd=cwd)
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return str(done.stdout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv holding the wheel built from this checkout and its runtime dependencies."""
    if importlib.util.find_spec("hatchling") is None:
        pytest.skip("hatchling (the build backend, in requirements/test.lock) is not installed")
    root = tmp_path_factory.mktemp("wheel")
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "-w", root / "dist", REPO)
    (wheel,) = (root / "dist").glob("gputop-*.whl")
    _run(sys.executable, "-m", "venv", root / "venv")
    _run(root / "venv" / "bin" / "python", "-m", "pip", "install", "--quiet",
         "--disable-pip-version-check", "-c", REPO / "requirements" / "runtime.lock", wheel,
         timeout=600)
    yield root / "venv"


def test_the_wheel_brings_runtime_dependencies_only(installed: Path) -> None:
    listed = _run(installed / "bin" / "python", "-m", "pip", "list", "--format=freeze")
    names = {line.split("==")[0].lower() for line in listed.splitlines()}
    assert {"gputop", "textual", "psutil", "nvidia-ml-py"} <= names, names
    assert not names & TEST_TOOLS, names & TEST_TOOLS


def test_the_installed_gputop_prints_a_snapshot(installed: Path, tmp_path: Path) -> None:
    out = _run(installed / "bin" / "gputop", "--once", "--json", "--membw", "off", cwd=tmp_path)
    snapshot = json.loads(out)
    assert snapshot["schema"] == "gputop.snapshot/1"
    assert snapshot["processes"]


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_installed_demo_runs_the_stdlib_trainer_in_a_terminal(installed: Path,
                                                                  tmp_path: Path) -> None:
    """No torch in this venv: the demo labels its standard-library trainer and times it."""
    with tmux.session(tmp_path) as name:
        tmux.spawn(name, f"env -u PYTHONPATH TERM=xterm-256color {installed}/bin/gputop --demo")
        tmux.wait_for(name, lambda s: "SIMULATED GPUs" in s and STDLIB_NOTE in s
                      and "of step time" in s and "pt_data_worker" in s)
        tmux.tmux("send-keys", "-t", name, "q")
        assert tmux.exit_code(name) == 0, tmux.screen(name)


def test_probe_path_runs_the_probe_in_an_environment_without_gputop(installed: Path,
                                                                     tmp_path: Path) -> None:
    """`PYTHONPATH=$(gputop probe-path) python -m gputop.probe train.py` in a bare venv; the
    installed gputop attaches to it and shows its steps."""
    plain = tmp_path / "plain"
    _run(sys.executable, "-m", "venv", "--without-pip", plain)
    python = plain / "bin" / "python"
    bare = subprocess.run([python, "-c", "import gputop"], capture_output=True, cwd=tmp_path,
                          env=_clean_env(), timeout=60)
    assert bare.returncode != 0, "the plain venv must not have gputop"
    probe_dir = _run(installed / "bin" / "gputop", "probe-path").strip()
    (tmp_path / "train.py").write_text(TRAINER)
    trainer = subprocess.Popen([python, "-m", "gputop.probe", "train.py"], cwd=tmp_path,
                               env={**_clean_env(), "PYTHONPATH": probe_dir},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert trainer.stdout is not None
        pid = int(trainer.stdout.readline())
        steps = _attached_steps(installed, pid)
        assert steps and all(step["forward_ns"] for step in steps), steps[-3:]
    finally:
        trainer.kill()
        trainer.wait(30)


def _attached_steps(installed: Path, pid: int, tries: int = 20) -> list[dict[str, object]]:
    """The steps `gputop --attach PID --once --json` shows, once it shows some."""
    for _ in range(tries):
        done = subprocess.run([installed / "bin" / "gputop", "--attach", str(pid), "--once",
                               "--json", "--membw", "off", "--interval", "0.5"],
                              capture_output=True, text=True, env=_clean_env(), timeout=120)
        if done.returncode == 0:
            attach = json.loads(done.stdout)["attach"]
            if attach and attach["steps"]:
                return list(attach["steps"])
        time.sleep(0.5)
    raise AssertionError(f"no steps seen; last answer: {done.stdout[-500:]} {done.stderr[-500:]}")


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_demo_installs_runtime_dependencies_only(tmp_path: Path) -> None:
    """`make demo`'s environment: gputop and what it runs on, none of the test tools."""
    venv = tmp_path / "venv"
    _run("make", "--no-print-directory", "-C", REPO, f"VENV={venv}", f"{venv}/.runtime-stamp",
         timeout=600)
    listed = _run(venv / "bin" / "python", "-m", "pip", "list", "--format=freeze")
    names = {line.split("==")[0].lower() for line in listed.splitlines()}
    assert {"gputop", "textual"} <= names, names
    assert not names & TEST_TOOLS, names & TEST_TOOLS
    assert (venv / "bin" / "gputop").exists()
