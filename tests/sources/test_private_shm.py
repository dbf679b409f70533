"""Issue 39: `gputop --attach HOSTPID` attaches to a probed trainer in a container whose
/dev/shm is its own (Docker's default), reading its ring through /proc/PID/root/dev/shm under
the usual checks, and following no symlink the container put on the way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gputop.probe import ring as ring_format
from gputop.sources.rings import private_shm
from tests.helpers import containers
from tests.helpers.containers import PRIVATE_SHM, contained, default_rings_env, stepping_trainer
from tests.helpers.probe import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("namespaces")]
namespaces = containers.namespaces  # skips where no PID namespace can be made


def _waits(stop: Path) -> str:
    """A command that says "up", then waits for `stop` to exist."""
    return f"sh -c 'echo up; while [ ! -e {stop} ]; do sleep 0.05; done'"


def _attach_once(pid: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "gputop", "--once", "--json", "--membw", "off", "--attach",
         str(pid), "--interval", "0.2"], capture_output=True, text=True, timeout=120,
        env=default_rings_env(), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_trainer_with_a_private_dev_shm_is_attached_by_its_host_pid(tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    with contained(PRIVATE_SHM, stepping_trainer(stop), stop) as (_, pid):
        own = os.stat("/dev/shm")
        theirs = os.stat(f"/proc/{pid}/root/dev/shm")
        assert (own.st_dev, own.st_ino) != (theirs.st_dev, theirs.st_ino)
        assert not any(n.startswith(ring_format.NAME_PREFIX) and n.endswith(f"-{pid}.ring")
                       for n in os.listdir("/dev/shm"))
        snapshot = _attach_once(pid)
    attached = snapshot["attach"]
    assert attached is not None and attached["pid"] == pid, snapshot["attach"]
    assert attached["steps"], "no step came through"
    row = next(p for p in snapshot["processes"] if p["pid"] == pid)
    assert row["container_pid"] == 1 and row["has_probe"]


def test_a_link_planted_in_the_containers_dev_shm_is_not_followed(tmp_path: Path) -> None:
    """The container linked its trainer's ring name to a file of the host (resolved from
    here): that name is refused, the trainer's real ring (a second name) is read."""
    stop, planted = tmp_path / "stop", tmp_path / "host-file"
    planted.write_bytes(b"\0" * 65536)
    setup = f"{PRIVATE_SHM} && ln -s {planted} /dev/shm/gputop-0-1.ring"
    with contained(setup, stepping_trainer(stop), stop) as (_, pid):
        snapshot = _attach_once(pid)
    attached = snapshot["attach"]
    assert attached is not None and attached["steps"], snapshot["attach"]
    assert planted.read_bytes() == b"\0" * 65536


def test_a_dev_shm_reached_through_a_symlink_is_not_read(tmp_path: Path) -> None:
    """The container made its /dev/shm a link (resolved from here, it would point at our
    own files): no directory is given for it."""
    stop = tmp_path / "stop"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    setup = f"mount -t tmpfs tmpfs /dev && ln -s {elsewhere} /dev/shm"
    with contained(setup, _waits(stop), stop) as (_, pid):
        assert os.path.islink(f"/proc/{pid}/root/dev/shm")
        assert private_shm(pid) is None
    stop = tmp_path / "stop2"
    with contained(PRIVATE_SHM, _waits(stop), stop) as (_, pid):
        fd = private_shm(pid)
        assert fd is not None
        os.close(fd)
    assert private_shm(os.getpid()) is None  # our own /dev/shm is listed already
