"""Issue 39, containers seen from the host: every process row carries its container (from
/proc/PID/cgroup: Docker, containerd, Podman, CRI-O, Kubernetes pods) and its PID inside its
PID namespace (NSpid); the filter finds both, the JSON and the recording carry both."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gputop.core.model import GpuReport, ProcessSample
from gputop.recording.replay import Replay
from gputop.recording.writer import RecordWriter, open_record
from gputop.sources.containers import Container, nspid, parse_cgroup
from gputop.sources.processes import ProcProcessSource
from gputop.tui.views.processes import COLUMNS, TableState, row_line, table_rows
from tests.helpers.builders import frame
from tests.helpers.probe import ROOT, UNSHARE, pid_namespace_refusal

ID = "4f2c1e0d9b8a7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d"
POD = "8a1f2b3c-4d5e-6f70-8192-a3b4c5d6e7f8"
POD_ = POD.replace("-", "_")

# /proc/PID/cgroup as each runtime leaves it (cgroup v2, then v1 hybrids)
SHAPES = [
    (f"0::/system.slice/docker-{ID}.scope\n", Container(ID[:12])),
    (f"12:memory:/docker/{ID}\n11:cpu,cpuacct:/docker/{ID}\n0::/\n", Container(ID[:12])),
    (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_}.slice/"
     f"cri-containerd-{ID}.scope\n", Container(ID[:12], POD)),
    (f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{POD_}.slice/"
     f"crio-{ID}.scope\n", Container(ID[:12], POD)),
    (f"0::/kubepods.slice/kubepods-pod{POD_}.slice/cri-containerd-{ID}.scope\n",
     Container(ID[:12], POD)),
    (f"4:memory:/kubepods/burstable/pod{POD}/{ID}\n0::/\n", Container(ID[:12], POD)),
    (f"1:name=systemd:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_}"
     f".slice:cri-containerd:{ID}\n", Container(ID[:12], POD)),
    (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_}.slice\n",
     Container(None, POD)),
    (f"0::/machine.slice/libpod-{ID}.scope/container\n", Container(ID[:12])),
    (f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope\n",
     Container(ID[:12])),
]
NOT_CONTAINERS = [
    "0::/\n",
    "0::/user.slice/user-1000.slice/session-3.scope\n",
    "4:memory:/process_api/f4c53098cdabe5b3b2a0f7943acb0c9f\n0::/\n",  # a sandbox's own
    f"0::/system.slice/crio-conmon-{ID}.scope\n",  # the monitor beside the container
    f"0::/system.slice/docker-{ID[:11]}.scope\n",  # too short to be an id
    f"0::/system.slice/docker-{ID.upper()}.scope\n",
    f"0::/x/{ID}\n",  # a bare id under neither docker nor a pod
    f"0::/system.slice/docker-{ID}.scope\x1b[2J\n",
    f"0::/system.slice/docker-{ID}.scope/\u202e\n",
    "0::/" + "a/" * 3000 + f"docker-{ID}.scope\n",
    "garbage without colons\n",
    "",
]


@pytest.mark.parametrize(("text", "container"), SHAPES)
def test_each_runtimes_cgroup_names_its_container(text: str, container: Container) -> None:
    assert parse_cgroup(text.encode()) == container


@pytest.mark.parametrize("text", NOT_CONTAINERS)
def test_anything_else_is_no_container(text: str) -> None:
    assert parse_cgroup(text.encode("utf-8", "surrogateescape")) is None


def test_hostile_bytes_are_no_container() -> None:
    assert parse_cgroup(f"0::/system.slice/docker-{ID}.scope\xff\n".encode("latin-1")) is None
    assert parse_cgroup(b"0::/docker/" + ID.encode() + b"\0\n") is None
    assert parse_cgroup(os.urandom(4096)) is None


def test_nspid_is_the_innermost_pid_only_in_a_namespace_below_ours() -> None:
    assert nspid(b"Name:\tpython\nNSpid:\t4121\t1\n") == 1
    assert nspid(b"NSpid:\t4121\t77\t9\n") == 9
    assert nspid(b"NSpid:\t4121\n") is None
    assert nspid(b"NSpid:\t4121\tx\n") is None
    assert nspid(b"Pid:\t4121\n") is None


# ---- real processes in real cgroups --------------------------------------------------------

def _writable_hierarchy() -> Path | None:
    """A cgroup hierarchy we may make cgroups in: the unified one, else v1's named systemd."""
    if os.getuid() != 0:
        return None
    for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"),
                 Path("/sys/fs/cgroup/systemd")):
        probe = root / f"gputop-probe-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            probe.mkdir()
        except OSError:
            continue
        made = (probe / "cgroup.procs").exists()  # else a plain directory (a tmpfs above)
        probe.rmdir()
        if made:
            return root
    return None


@contextmanager
def cgroup(path: str) -> Iterator[Path]:
    """The cgroup `path`, made beneath a test parent of a writable hierarchy; removed after
    (its processes ended by then)."""
    root = _writable_hierarchy()
    if root is None:
        pytest.skip("no cgroup hierarchy here lets this test make cgroups")
    parent = root / f"gputop-test-{os.getpid()}-{secrets.token_hex(4)}"
    leaf = parent / path
    leaf.mkdir(parents=True)
    try:
        yield leaf
    finally:
        for directory in sorted((p for p in parent.rglob("*") if p.is_dir()),
                                key=lambda p: len(p.parts), reverse=True):
            directory.rmdir()
        parent.rmdir()


SLEEP = os.path.realpath(shutil.which("sleep") or "/bin/sleep")


def _wait_for_sleep(proc: subprocess.Popen[bytes]) -> None:
    """Until `proc` has exec'd sleep."""
    while os.readlink(f"/proc/{proc.pid}/exe") != SLEEP:
        assert proc.poll() is None, "it ended before it slept"
        time.sleep(0.01)


@contextmanager
def in_cgroup(path: str) -> Iterator[int]:
    """A real `sleep` in a mount namespace of its own (as every runtime starts a container's
    process) moved into the cgroup `path`; its PID."""
    with cgroup(path) as leaf:
        sleeper = subprocess.Popen(["unshare", "--mount", "sleep", "600"])
        try:
            (leaf / "cgroup.procs").write_text(str(sleeper.pid))
            _wait_for_sleep(sleeper)
            yield sleeper.pid
        finally:
            sleeper.kill()
            sleeper.wait()


def _gputop_json(*args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "gputop", "--once", "--json", "--membw", "off",
                           *args], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _json_row(snapshot: dict[str, Any], pid: int) -> dict[str, Any]:
    rows = [p for p in snapshot["processes"] if p["pid"] == pid]
    assert len(rows) == 1, f"no row for PID {pid}"
    return rows[0]


def _source_row(pid: int) -> ProcessSample:
    source = ProcProcessSource()
    try:
        return next(p for p in source.sample(GpuReport("none")).rows if p.pid == pid)
    finally:
        source.close()


def _shown(row: ProcessSample, needle: str) -> str | None:
    """The table line of `row` when the filter `needle` keeps it, else None."""
    rows = table_rows(frame(processes=[row]), TableState(filter=needle))
    if not len(rows):
        return None
    return "".join(text for text, _ in row_line(rows[0], COLUMNS, 200, False))


@pytest.mark.slow
def test_a_docker_scope_labels_its_process_everywhere(tmp_path: Path) -> None:
    with in_cgroup(f"system.slice/docker-{ID}.scope") as pid:
        snapshot = _gputop_json()
        row = _source_row(pid)
    assert _json_row(snapshot, pid)["container"] == ID[:12]
    assert _json_row(snapshot, pid)["container_pod"] is None
    assert row.container == ID[:12] and row.container_pod is None
    line = _shown(row, ID[:8])
    assert line is not None and f"ctr:{ID[:12]}" in line
    assert _shown(row, "ffffffff") is None
    assert _json_row(snapshot, os.getpid())["container"] is None  # we run in none
    writer = RecordWriter(open_record(str(tmp_path / "r.sqlite")))
    writer.write(frame(processes=[replace(row, cpu_percent=50.0)]))
    writer.db.close()
    replayed = Replay(str(tmp_path / "r.sqlite"))
    assert [(p.pid, p.container) for p in replayed.frame(0).processes] == [(pid, ID[:12])]
    replayed.close()


@pytest.mark.slow
def test_a_kubernetes_pods_container_carries_its_pod(tmp_path: Path) -> None:
    path = (f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_}.slice/"
            f"cri-containerd-{ID}.scope")
    with in_cgroup(path) as pid:
        row = _json_row(_gputop_json(), pid)
    assert (row["container"], row["container_pod"]) == (ID[:12], POD)


def test_a_process_moved_into_a_container_then_execd_is_labelled_after_its_exec(
        tmp_path: Path) -> None:
    """As a runtime starts a container: its process seen first outside, then moved into the
    container's cgroup, then exec'ing the container's command in its own mounts."""
    go = tmp_path / "go"
    script = f"while [ ! -e {go} ]; do sleep 0.01; done; exec unshare --mount sleep 600"
    with cgroup(f"system.slice/docker-{ID}.scope") as leaf:
        starting = subprocess.Popen(["sh", "-c", script])
        source = ProcProcessSource()
        try:
            before = next(p for p in source.sample(GpuReport("none")).rows
                          if p.pid == starting.pid)
            (leaf / "cgroup.procs").write_text(str(starting.pid))
            go.touch()
            _wait_for_sleep(starting)
            after = next(p for p in source.sample(GpuReport("none")).rows
                         if p.pid == starting.pid)
        finally:
            source.close()
            starting.kill()
            starting.wait()
    assert before.container is None
    assert (after.name, after.container) == ("sleep", ID[:12])


# ---- a process in a PID namespace of its own ------------------------------------------------

@pytest.fixture
def unshare() -> None:
    """Skip unless we may make a PID namespace (root, and unshare(1) works here)."""
    refusal = pid_namespace_refusal()
    if refusal is not None:
        pytest.skip(refusal)


@pytest.mark.slow
@pytest.mark.usefixtures("unshare")
def test_a_process_in_its_own_pid_namespace_carries_its_pid_there(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    # Inside, the shell is PID 1; it says so, then waits.
    script = f"echo $$ > {ready}.tmp && mv {ready}.tmp {ready} && exec sleep 600"
    outer = subprocess.Popen([*UNSHARE, "sh", "-c", script])
    try:
        while not ready.exists():
            assert outer.poll() is None, "unshare ended"
        inner = int(ready.read_text())
        children = Path(f"/proc/{outer.pid}/task/{outer.pid}/children").read_text().split()
        host = int(children[0])
        snapshot = _gputop_json()
        row = _source_row(host)
    finally:
        outer.kill()
        outer.wait()
    assert inner == 1 and host != inner
    assert _json_row(snapshot, host)["container_pid"] == inner
    assert row.container_pid == inner
    assert _json_row(snapshot, os.getpid())["container_pid"] is None
    line = _shown(row, str(inner))  # the filter finds it by its PID inside
    assert line is not None and f"nspid:{inner}" in line
