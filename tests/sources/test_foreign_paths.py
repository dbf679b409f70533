"""Root-run gputop opens nothing another user controls: no FIFO blocks it, no symlink leads it.

The old-torch check reads torch/version.py beside a library named in a process's memory
maps. These tests plant such a library under a directory of a real second user (uid
54321, a forked child that setuid()s) with version.py a FIFO or a symlink to a root-only
file, and check that a sample as root returns and never reads through the link.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import shutil
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.core.model import GpuReport, ProcessSample
from gputop.frames.derive import Derivation
from gputop.sources import procfs
from gputop.sources.processes import ProcProcessSource
from tests.helpers.probe import ROOT

FOREIGN_UID = 54321
OLD_VERSION = b'__version__ = "2.4.0"\n'
HANG_GUARD_S = 30.0  # a sample that blocks never returns; this only ends the wait
PR_SET_DUMPABLE = 4
MAP_FIXED_NOREPLACE = 0x100000
LOW_ADDRESS = 0x10_0000  # below any library and the heap

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a second uid needs root")


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory every uid can enter (pytest's tmp_path is root-only), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="gputop-foreign-"))
    path.chmod(0o755)
    secret = path / "secret.py"
    secret.write_bytes(OLD_VERSION)
    secret.chmod(0o600)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _plant(top: Path, version: str, secret: Path) -> None:
    """torch/lib/libtorch_fake.so and torch/version.py of the kind `version` under `top`."""
    lib = top / "torch" / "lib"
    lib.mkdir(parents=True)
    (lib / "libtorch_fake.so").write_bytes(b"\0" * mmap.PAGESIZE)
    target = top / "torch" / "version.py"
    if version == "fifo":
        os.mkfifo(target, 0o666)
    elif version == "symlink":
        os.symlink(secret, target)
    else:
        target.write_bytes(OLD_VERSION)


def _map_low(fd: int) -> int:
    """Map `fd` at a low address, so it is the first line of /proc/PID/maps."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    address = libc.mmap(LOW_ADDRESS, mmap.PAGESIZE, mmap.PROT_READ,
                        mmap.MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0)
    assert address == LOW_ADDRESS
    return int(address)


def _child(top: Path, version: str, secret: Path, uid: int | None, dumpable: bool,
           low: bool, report: int) -> None:
    """In the forked child: become `uid`, plant, map the library, fork one worker, wait."""
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    if not dumpable:  # the files in /proc/PID then belong to root, whoever runs the process
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    _plant(top, version, secret)
    with open(top / "torch" / "lib" / "libtorch_fake.so", "rb") as f:
        kept = _map_low(f.fileno()) if low else mmap.mmap(f.fileno(), mmap.PAGESIZE,
                                                         prot=mmap.PROT_READ)
    worker = os.fork()  # same comm and argv as its parent: a torch < 2.5 worker candidate
    if worker == 0:
        while True:
            signal.pause()
    os.write(report, f"{worker}\n".encode())
    while kept:
        signal.pause()


def _exec_child(top: Path, version: str, secret: Path, uid: int | None, dumpable: bool,
                low: bool, report: int) -> None:
    """Run `_child` in a fresh interpreter: a fork of pytest would inherit pytest's own
    libtorch mapping (once a test imported torch) and be judged by that torch."""
    os.set_inheritable(report, True)
    args = [str(top), version, str(secret), "" if uid is None else str(uid), str(int(dumpable)),
            str(int(low)), str(report)]
    code = f"import sys; from {__name__} import _child_main; _child_main(sys.argv[1:])"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    os.execve(sys.executable, [sys.executable, "-c", code, *args], env)


def _child_main(argv: list[str]) -> None:
    """The exec'd trainer's entry: `_child` with its arguments back from strings."""
    top, version, secret, uid, dumpable, low, report = argv
    _child(Path(top), version, Path(secret), int(uid) if uid else None, dumpable == "1",
           low == "1", int(report))


@contextlib.contextmanager
def planted_trainer(
    base: Path, version: str, uid: int | None = FOREIGN_UID, dumpable: bool = True,
    low: bool = True,
) -> Iterator[tuple[int, int, Path]]:
    """A process of `uid` (None: ours) whose maps name a torch dir it owns: (trainer, worker, dir).

    `low` maps the library first in /proc/PID/maps, where even a reader of its first page
    finds it (as an attacker would place it); otherwise it lands among the libraries.
    """
    top = base / "evil"
    top.mkdir()
    if uid is not None:
        os.chown(top, uid, uid)
    read_end, write_end = os.pipe()
    trainer = os.fork()
    if trainer == 0:
        try:
            os.close(read_end)
            _exec_child(top, version, base / "secret.py", uid, dumpable, low, write_end)
        finally:
            os._exit(1)
    os.close(write_end)
    worker = 0
    try:
        with os.fdopen(read_end, "rb") as pipe:
            line = pipe.readline()
        assert line, "the planted trainer failed before it was ready"
        worker = int(line)
        yield trainer, worker, top / "torch"
    finally:
        for pid in (worker, trainer):
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        os.waitpid(trainer, 0)


def _sample_in_thread(fifo: Path | None = None) -> tuple[ProcessSample, ...] | None:
    """One ProcProcessSource sample, or None when it did not return (a FIFO open is released)."""
    result: list[tuple[ProcessSample, ...]] = []
    source = ProcProcessSource()

    def run() -> None:  # roles derived as the sampler derives them
        scan = source.sample(GpuReport(source="none"))
        result.append(Derivation().processes(scan, frozenset(), source)[0])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_GUARD_S)
    blocked = thread.is_alive()
    if blocked and fifo is not None:  # wake the reader stuck in open() so the thread ends
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(HANG_GUARD_S)
    source.close()
    return None if blocked else result[0]


def _role(processes: tuple[ProcessSample, ...], pid: int) -> tuple[str, int | None]:
    row = next(p for p in processes if p.pid == pid)
    return row.role, row.trainer_pid


@needs_root
@pytest.mark.slow
def test_foreign_version_fifo_does_not_block_a_root_sample(base: Path):
    with planted_trainer(base, "fifo") as (_trainer, worker, torch_dir):
        processes = _sample_in_thread(torch_dir / "version.py")
        assert processes is not None, "the sample blocked opening another user's FIFO"
        assert _role(processes, worker) == ("other", None)


@needs_root
@pytest.mark.slow
def test_foreign_version_symlink_is_not_followed(base: Path):
    # The link leads to a root-only file saying 2.4.0: had root read it, the worker would group.
    with planted_trainer(base, "symlink") as (_trainer, worker, _torch):
        processes = _sample_in_thread()
        assert processes is not None
        assert _role(processes, worker) == ("other", None)


@needs_root
@pytest.mark.slow
@pytest.mark.parametrize("dumpable", [True, False], ids=["dumpable", "non-dumpable"])
def test_foreign_trainer_files_are_not_opened_at_all(base: Path, dumpable: bool):
    # Even a plain regular version.py of another user is not opened (see _read_torch_version).
    # A non-dumpable process's /proc/PID files are root's: that must not pass for root's own.
    with planted_trainer(base, "file", dumpable=dumpable) as (_trainer, worker, _torch):
        processes = _sample_in_thread()
        assert processes is not None
        assert _role(processes, worker) == ("other", None)


@pytest.mark.slow
@pytest.mark.parametrize("low", [True, False], ids=["first-in-maps", "among-libraries"])
def test_own_old_torch_trainer_groups_its_workers(base: Path, low: bool):
    # among-libraries: libtorch past the first 4 KiB of maps (one read of a seq file) is found.
    with planted_trainer(base, "file", uid=None, low=low) as (trainer, worker, _torch):
        processes = _sample_in_thread()
        assert processes is not None
        assert _role(processes, worker) == ("worker", trainer)
        assert _role(processes, trainer)[0] == "trainer"


@pytest.mark.slow
@pytest.mark.parametrize("version", ["fifo", "symlink"])
def test_own_trainer_version_must_be_a_regular_file(base: Path, version: str):
    with planted_trainer(base, version, uid=None) as (_trainer, worker, torch_dir):
        processes = _sample_in_thread(torch_dir / "version.py")
        assert processes is not None, "the sample blocked opening a FIFO"
        assert _role(processes, worker) == ("other", None)


def test_read_regular_beneath_refuses_links_and_special_files(tmp_path: Path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "file").write_bytes(b"x" * 10)
    os.mkfifo(tmp_path / "d" / "fifo")
    os.symlink(tmp_path / "d" / "file", tmp_path / "d" / "link")
    os.symlink(tmp_path / "d", tmp_path / "dirlink")
    read = procfs.read_regular_beneath
    assert read(str(tmp_path), "/d/file") == b"x" * 10
    assert read(str(tmp_path), "/d/file", limit=9) is None  # bigger than asked: refused whole
    assert read(str(tmp_path), "/d/fifo") is None
    assert read(str(tmp_path), "/d/link") is None
    assert read(str(tmp_path), "/dirlink/file") is None
    assert read(str(tmp_path), "/d/../d/file") is None
    assert read(str(tmp_path), "/dev/null") is None
    assert read(str(tmp_path), "/d/missing") is None


def test_read_bytes_refuses_fifos_and_symlinks(tmp_path: Path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "file").write_bytes(b"data")
    os.symlink(tmp_path / "file", tmp_path / "link")
    result: list[bytes | None] = []
    thread = threading.Thread(target=lambda: result.append(procfs.read_bytes(str(fifo))),
                              daemon=True)
    thread.start()
    thread.join(HANG_GUARD_S)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(HANG_GUARD_S)
        pytest.fail("read_bytes blocked on a FIFO")
    assert result == [None]
    assert procfs.read_bytes(str(tmp_path / "link")) is None
    assert procfs.read_bytes(str(tmp_path / "file")) == b"data"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.parametrize(
    ("text", "uids"),
    [
        (b"Name:\tx\nUid:\t1000\t1000\t1000\t1000\nGid:\t5\t5\t5\t5\n", (1000, 1000, 1000, 1000)),
        (b"Uid:\t0\t54321\t0\t54321\n", (0, 54321, 0, 54321)),
        (b"Name:\tx\n", None),
        (b"Uid:\tx\t1\n", None),
    ],
)
def test_parse_status_uids(text: bytes, uids: tuple[int, ...] | None):
    assert procfs.parse_status_uids(text) == uids
