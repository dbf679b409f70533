"""`gputop run`'s log: a log that cannot be written is named as such; nothing is left behind.

`gputop run` sends the command's output to a log only when it has a terminal, so the end to
end checks run it on a pseudo-terminal; the steps below it are checked directly.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputop.app import children as launch
from gputop.app.options import BadInput
from gputop.app.run import start_probed

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0  # a hang guard: these runs end before any screen is drawn


def _run_on_terminal(*args: str, cwd: Path) -> tuple[int, str]:
    """`python -m gputop run ARGS` with a pseudo-terminal for stdio: (exit code, output)."""
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    try:
        child = subprocess.Popen([sys.executable, "-m", "gputop", "run", *args], cwd=cwd,
                                 env=env, stdin=slave, stdout=slave, stderr=slave,
                                 start_new_session=True)
    finally:
        os.close(slave)
    out = b""
    deadline = time.monotonic() + WAIT_S
    try:
        while time.monotonic() < deadline:
            if not select.select([master], [], [], 1.0)[0]:
                continue
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # EIO: every holder of the terminal closed it
                break
            if not chunk:
                break
            out += chunk
        code = child.wait(timeout=WAIT_S)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=WAIT_S)
        os.close(master)
    return code, out.decode("utf-8", "replace")


@pytest.mark.slow
def test_unwritable_log_is_named_not_the_command(tmp_path: Path):
    log = tmp_path / "missing-dir" / "x.log"
    code, out = _run_on_terminal("--log", str(log), "--", "true", cwd=tmp_path)
    assert code == 2
    assert f"gputop: cannot write the log {log}: No such file or directory" in out
    assert "command not found" not in out


@pytest.mark.slow
@pytest.mark.parametrize("named", [True, False], ids=["--log", "default-name"])
def test_unstartable_command_leaves_no_log_behind(tmp_path: Path, named: bool):
    log_args = ("--log", str(tmp_path / "x.log")) if named else ()
    code, out = _run_on_terminal(*log_args, "--", "gputop-no-such-command", cwd=tmp_path)
    assert code == 2
    assert "gputop: command not found: gputop-no-such-command" in out
    assert list(tmp_path.iterdir()) == []


def test_existing_log_is_kept_whole_when_the_command_cannot_start(tmp_path: Path):
    log = tmp_path / "x.log"
    log.write_bytes(b"earlier run\n")
    with pytest.raises(BadInput, match="command not found: gputop-no-such-command"):
        start_probed(["gputop-no-such-command"], log=str(log))
    assert log.read_bytes() == b"earlier run\n"


def test_a_start_failure_is_not_blamed_on_the_log(tmp_path: Path):
    program = tmp_path / "not-a-program"
    program.write_bytes(b"\x7fELF garbage")
    program.chmod(0o755)
    log = tmp_path / "x.log"
    with pytest.raises(BadInput) as caught:
        start_probed([str(program)], log=str(log))
    assert str(caught.value) == f"cannot start {program}: Exec format error"
    assert not log.exists()


def test_log_directory_missing_is_a_log_error(tmp_path: Path):
    log = tmp_path / "missing-dir" / "x.log"
    with pytest.raises(BadInput) as caught:
        start_probed(["true"], log=str(log))
    assert str(caught.value) == f"cannot write the log {log}: No such file or directory"


def test_a_new_log_never_follows_a_planted_link(tmp_path: Path):
    # The default name (gputop-run-PID.log) is guessable: it must be a file gputop creates.
    target = tmp_path / "target"
    target.write_bytes(b"precious\n")
    planted = tmp_path / "gputop-run-1.log"
    planted.symlink_to(target)
    with pytest.raises(BadInput) as caught:
        start_probed(["true"], log=str(planted), new_log=True)
    assert str(caught.value) == f"cannot write the log {planted}: File exists"
    assert target.read_bytes() == b"precious\n"


def test_open_log_appends_and_says_whether_it_created_the_file(tmp_path: Path):
    path = tmp_path / "x.log"
    created = launch.open_log(str(path))
    os.write(created.fd, b"one\n")
    os.close(created.fd)
    again = launch.open_log(str(path))
    os.write(again.fd, b"two\n")
    launch.discard_log(again)  # not ours to remove: it existed
    assert (created.created, again.created) == (True, False)
    assert path.read_bytes() == b"one\ntwo\n"
