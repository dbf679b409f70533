"""The canary's idle peak kept per machine, so `--once` and a start under load have a reference.

One small JSON file, `$XDG_STATE_HOME/gputop/membw-idle-peak.json` (default
`~/.local/state/gputop/`), keyed by what makes a peak comparable: CPU model and count,
total RAM, the memory-module layout, the boot id and the canary's size. A different key
is a changed machine (or a reboot): the file is ignored and rewritten at the next quiet
calibration. Values only ever go up. The directory is ours (0700, our uid, not a link);
the file is opened without following links, checked to be our regular file, and
replaced atomically (a 0600 temporary file renamed over it).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pwd
import stat
from collections.abc import Mapping
from pathlib import Path

from gputop.sources.membw.canary import Calibration, merge_peaks

FILE_NAME = "membw-idle-peak.json"
VERSION = 1
MAX_BYTES = 64 * 1024
Key = dict[str, str | int]


class StoreRefused(OSError):
    """The state directory or file is not safely ours; the message says why."""


def default_state_dir(env: Mapping[str, str] = os.environ) -> Path | None:
    """$XDG_STATE_HOME/gputop if that is absolute (as the spec asks), else ~/.local/state/gputop."""
    xdg = env.get("XDG_STATE_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg) / "gputop"
    home = env.get("HOME") or _passwd_home()
    return Path(home) / ".local" / "state" / "gputop" if home else None


def _passwd_home() -> str | None:
    try:
        return pwd.getpwuid(os.geteuid()).pw_dir or None
    except KeyError:
        return None


def first_field(text: str, names: tuple[str, ...]) -> str | None:
    """The value of the first 'name : value' line whose name is one of `names`."""
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() in names and value.strip():
            return value.strip()
    return None


def machine_key(proc_root: Path | str, layout: str | None, canary: str) -> Key:
    """What must match for a stored peak to apply here; unreadable parts are 'unknown'."""
    proc = Path(proc_root)

    def read(name: str) -> str:
        try:
            return (proc / name).read_text()
        except OSError:
            return ""

    cpuinfo = read("cpuinfo")
    return {
        "cpu_model": first_field(cpuinfo, ("model name", "Hardware", "cpu model")) or "unknown",
        "cpus": sum(1 for line in cpuinfo.splitlines() if line.startswith("processor")),
        "mem_total": first_field(read("meminfo"), ("MemTotal",)) or "unknown",
        "layout": layout or "unknown",
        "boot_id": read("sys/kernel/random/boot_id").strip() or "unknown",
        "canary": canary,
    }


class PeakStore:
    """Reads and raises the stored idle peak for one machine key."""

    def __init__(self, directory: Path | str, key: Key) -> None:
        self.directory = Path(directory)
        self.key = key

    @property
    def path(self) -> Path:
        """Where the peak is kept."""
        return self.directory / FILE_NAME

    def load(self) -> Calibration | None:
        """The stored peak for this key; None when absent, foreign, unsafe or malformed."""
        try:
            dir_fd = self._open_dir(create=False)
        except OSError:
            return None
        try:
            record = self._read(dir_fd)
        finally:
            os.close(dir_fd)
        return record

    def save(self, calibration: Calibration) -> Calibration:
        """Keep the larger of `calibration` and what is stored; returns what was kept.

        Raises OSError (StoreRefused when the directory or file is not safely ours).
        """
        dir_fd = self._open_dir(create=True)
        try:
            stored = self._read(dir_fd)
            kept = calibration if stored is None else merge_peaks(stored, calibration)
            self._write(dir_fd, kept)
        finally:
            os.close(dir_fd)
        return kept

    def _open_dir(self, create: bool) -> int:
        if create:
            make_private_dirs(self.directory)
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        info = os.fstat(fd)
        problem = None
        if info.st_uid != os.geteuid():
            problem = f"{self.directory} belongs to uid {info.st_uid}, not to us"
        elif info.st_mode & 0o077:
            problem = f"{self.directory} is open to others (mode {info.st_mode & 0o777:o})"
        if problem:
            os.close(fd)
            raise StoreRefused(problem)
        return fd

    def _read(self, dir_fd: int) -> Calibration | None:
        try:
            fd = os.open(FILE_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=dir_fd)
        except OSError:
            return None
        try:
            info = os.fstat(fd)
            if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid()
                    or info.st_size > MAX_BYTES):
                return None
            data = os.read(fd, MAX_BYTES + 1)
        finally:
            os.close(fd)
        return parse_record(data, self.key)

    def _write(self, dir_fd: int, calibration: Calibration) -> None:
        body = json.dumps({
            "version": VERSION,
            "key": self.key,
            "single_bytes_per_s": calibration.single_bytes_per_s,
            "aggregate_bytes_per_s": calibration.aggregate_bytes_per_s,
            "threads": calibration.threads,
        }, indent=1).encode()
        temp = f".{FILE_NAME}.{os.getpid()}.{os.urandom(4).hex()}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(body)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, FILE_NAME, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
            raise


def make_private_dirs(directory: Path) -> None:
    """Create `directory` and any missing parents with mode 0700 (as XDG asks)."""
    missing = [p for p in (directory, *directory.parents) if not p.exists()]
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)


def parse_record(data: bytes, key: Key) -> Calibration | None:
    """A stored record for `key` as a Calibration; None if anything is off."""
    try:
        record = json.loads(data)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("version") != VERSION \
            or record.get("key") != key:
        return None
    single = _positive(record.get("single_bytes_per_s"))
    aggregate = _positive(record.get("aggregate_bytes_per_s"))
    threads = record.get("threads")
    if single is None or aggregate is None or type(threads) is not int or threads < 1:
        return None
    return Calibration(single, aggregate, threads, 0.0)


def _positive(value: object) -> float | None:
    """A finite positive number as a float, else None (JSON bools and NaN are not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None

