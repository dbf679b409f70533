"""Issue 39, containers seen from inside, end to end: `gputop --once` over the C NVML
(tests/nvml_c) reporting a GPU process by a PID gputop's /proc does not show. The PID is
matched where proven (gputop in PID and mount namespaces of its own, one process there
holding the GPU's /dev/nvidia0), else one honest line names the host PIDs."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import tmux
from tests.helpers.probe import ROOT, UNSHARE, pid_namespace_refusal
from tests.nvml_c import build
from tests.nvml_c.build import MIB, FakeNvml

fake_nvml = build.fake_nvml  # the session's C NVML, as a fixture of this module

pytestmark = pytest.mark.slow

HONEST = "GPU processes run outside this container's PID namespace (NVML reports host PIDs"


def absent_pids(count: int) -> list[int]:
    """PIDs no process here can have: above the kernel's pid_max."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    return [pid_max + 1 + i for i in range(count)]


def once(env: dict[str, str], *argv: str, nodes: tuple[int, ...] = (), held: int = 0) -> str:
    """`gputop --once` and `argv`'s output; with `nodes`, in PID and mount namespaces of its
    own (a container) with a /dev of its own holding /dev/nvidiaN for each N of `nodes`, of
    which one process there keeps /dev/nvidia`held` open."""
    command = [sys.executable, "-m", "gputop", "--once", *argv]
    if nodes:
        made = " && ".join(f"mknod /dev/nvidia{n} c 1 3" for n in nodes)
        script = (f"mount -t tmpfs tmpfs /dev && {made} && "
                  "mknod -m 666 /dev/null c 1 3 || exit 1; "
                  f"(exec 3</dev/nvidia{held}; exec sleep 600) & "
                  # until the holder has it open, then gputop
                  f"while ! ls -l /proc/$!/fd 2>/dev/null | grep -q /dev/nvidia{held}; do "
                  "sleep 0.01; done; exec \"$@\"")
        command = [*UNSHARE, "--mount", "sh", "-c", script, "sh", *command]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout


def scenario(*pids: int) -> dict[str, Any]:
    return {"devices": [{"processes": [{"pid": pid, "memory": (i + 1) * 100 * MIB}
                                       for i, pid in enumerate(pids)]}]}


def test_host_pids_not_here_get_the_honest_line(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    pids = absent_pids(2)
    env = fake_nvml.env(scenario(*pids), tmp_path)
    text = once(env)
    assert text.count(HONEST) == 1
    assert (f"{HONEST} {pids[0]}, {pids[1]}): start the container with --pid=host or run "
            "gputop on the host") in text
    document = json.loads(once(env, "--json"))
    assert document["foreign_gpu_pids"] == [
        {"host_pid": pid, "gpu_index": 0, "pid": None, "how": None} for pid in pids]
    # memory is still shown per host PID
    assert [(p["pid"], p["memory_used_bytes"]) for p in document["gpus"][0]["processes"]] == [
        (pids[0], 100 * MIB), (pids[1], 200 * MIB)]


def test_visible_gpu_processes_are_not_foreign(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    env = fake_nvml.env(scenario(1), tmp_path)  # PID 1 is seen from every namespace
    assert HONEST not in once(env)
    assert json.loads(once(env, "--json"))["foreign_gpu_pids"] == []


@pytest.fixture
def unshare() -> None:
    refusal = pid_namespace_refusal()
    if refusal is not None:
        pytest.skip(refusal)


@pytest.mark.usefixtures("unshare")
def test_the_one_holder_of_the_gpu_inside_a_container_is_matched(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    (host,) = absent_pids(1)
    env = fake_nvml.env(scenario(host), tmp_path)
    document = json.loads(once(env, "--json", nodes=(0,)))
    (found,) = document["foreign_gpu_pids"]
    assert (found["host_pid"], found["gpu_index"]) == (host, 0)
    holder = next(p for p in document["processes"] if p["pid"] == found["pid"])
    assert holder["name"] == "sleep"
    assert found["how"] == ("the only process here holding /dev/nvidia0, the GPU's only "
                            "compute process")
    text = once(env, nodes=(0,))
    assert HONEST not in text
    assert "matched: PID " in text and f"here is host PID {host} — the only process here" in text


@pytest.mark.usefixtures("unshare")
def test_nvml_minor_numbers_tell_which_node_is_which_gpu(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    first, second = absent_pids(2)
    env = fake_nvml.env({"devices": [
        {"minor_number": 3, "processes": [{"pid": first, "memory": 100 * MIB}]},
        {"minor_number": 5, "processes": [{"pid": second, "memory": 200 * MIB}]},
    ]}, tmp_path)
    document = json.loads(once(env, "--json", nodes=(3, 5), held=5))
    unmatched, matched = document["foreign_gpu_pids"]
    assert unmatched == {"host_pid": first, "gpu_index": 0, "pid": None, "how": None}
    assert (matched["host_pid"], matched["gpu_index"]) == (second, 1)
    assert "/dev/nvidia5" in matched["how"]
    holder = next(p for p in document["processes"] if p["pid"] == matched["pid"])
    assert holder["name"] == "sleep"
    text = once(env, nodes=(3, 5), held=5)
    assert f"{HONEST} {first}): start the container" in text
    assert f"here is host PID {second} — the only process here holding /dev/nvidia5" in text


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_screen_shows_the_honest_line_whole(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    pids = absent_pids(2)
    env = fake_nvml.env(scenario(*pids), tmp_path)
    names = ("GPUTOP_FAKE_NVML_SCENARIO", "GPUTOP_FAKE_NVML_LOG", "LD_LIBRARY_PATH",
             "PYTHONPATH")
    assigned = " ".join(f"{name}={shlex.quote(env[name])}" for name in names)
    with tmux.session(tmp_path, width=100, height=40) as name:
        tmux.spawn(name, f"env TERM=xterm-256color {assigned} {tmux.PYTHON} -m gputop")
        screen = tmux.wait_for(name, lambda s: "--pid=host" in s)
    said = " ".join(line.strip() for line in screen.splitlines()
                    if line.strip() and any(word in line for word in (
                        "outside this", "NVML reports", "--pid=host")))
    assert f"{HONEST} {pids[0]}, {pids[1]}): start the container with --pid=host" in said
    assert "Traceback" not in screen
