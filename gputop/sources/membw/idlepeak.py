"""The canary's idle peak: whether a calibration ran on a quiet machine (low load per core and
memory PSI, and little CPU used by others over the window: a hog started seconds ago), and
keeping quiet peaks, upward only and keyed by what makes them comparable, in a private
$XDG_STATE_HOME/gputop (read without following links, replaced through a temporary file)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import pwd
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from gputop.core.safe_files import WriteRefused, open_own, replacing_in
from gputop.sources.membw.canary import Calibration, merge_peaks
from gputop.sources.membw.estimate import read_psi

QUIET_LOAD_PER_CPU = 0.3
QUIET_OTHERS_CPU_SHARE = 0.2
QUIET_PSI_SOME = 1.0  # percent
BUSY_FIELDS = (0, 1, 2, 5, 6)  # user nice system irq softirq (guest is inside user)
FILE_NAME = "membw-idle-peak.json"
VERSION = 1
MAX_BYTES = 64 * 1024
Key = dict[str, str | int]


def cpu_mark(proc_root: Path, own: Callable[[], float], clock: Callable[[], float]
             ) -> tuple[float, float, float] | None:
    """(wall clock, all CPUs' busy seconds since boot from /proc/stat, our own CPU seconds)."""
    try:
        with open(proc_root / "stat") as stat:
            fields = stat.readline().split()
        if fields[0] != "cpu":
            return None
        busy = sum(int(fields[1 + i]) for i in BUSY_FIELDS) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return clock(), busy, own()


def own_cpu_s() -> float:
    """CPU seconds of this process, all threads."""
    times = os.times()
    return times.user + times.system


class QuietMeter:
    """Says why the machine was not quiet since `start()`, or None when it was."""

    def __init__(self, proc_root: Path | str = "/proc", cpus: int | None = None,
                 own: Callable[[], float] = own_cpu_s,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.proc_root = Path(proc_root)
        self.cpus = cpus or os.cpu_count() or 1
        self._own, self._clock = own, clock
        self._mark: tuple[float, float, float] | None = None

    def start(self) -> None:
        """Begin a window."""
        self._mark = cpu_mark(self.proc_root, self._own, self._clock)

    def verdict(self) -> str | None:
        """None if the window since start() was quiet, else the reasons, '; '-joined."""
        try:
            load: float | None = float(
                (self.proc_root / "loadavg").read_text().split()[0]) / self.cpus
        except (OSError, ValueError, IndexError):
            load = None
        now, mark = cpu_mark(self.proc_root, self._own, self._clock), self._mark
        others = None  # the share of all CPUs other processes used over the window
        if now is not None and mark is not None and now[0] > mark[0]:
            used = (now[1] - mark[1]) - (now[2] - mark[2])
            others = max(0.0, used) / ((now[0] - mark[0]) * self.cpus)
        checks = (  # (value, limit, why when unknown, why when over)
            (load, QUIET_LOAD_PER_CPU, "load average unknown", "load {:.2f} per core"),
            (read_psi(self.proc_root).some_avg10, QUIET_PSI_SOME, "", "memory PSI {:.1f} %"),
            (others, QUIET_OTHERS_CPU_SHARE, "CPU use unknown",
             "other processes used {:.0%} of the CPUs"))
        reasons = [unknown if value is None else over.format(value)
                   for value, limit, unknown, over in checks if value is None or value > limit]
        return "; ".join(filter(None, reasons)) or None


class StoreRefused(OSError):
    """The state directory or file is not safely ours; the message says why."""


def default_state_dir(env: Mapping[str, str] = os.environ) -> Path | None:
    """$XDG_STATE_HOME/gputop if that is absolute (as the spec asks), else ~/.local/state/gputop."""
    xdg = env.get("XDG_STATE_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg) / "gputop"
    home = env.get("HOME")
    if not home:
        try:
            home = pwd.getpwuid(os.geteuid()).pw_dir or None
        except KeyError:
            home = None
    return Path(home) / ".local" / "state" / "gputop" if home else None


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
        self.directory, self.key = Path(directory), key
        self.path = self.directory / FILE_NAME

    def load(self) -> Calibration | None:
        """The stored peak for this key; None when absent, foreign, unsafe or malformed."""
        try:
            dir_fd = self._open_dir(create=False)
        except OSError:
            return None
        try:
            return self._read(dir_fd)
        finally:
            os.close(dir_fd)

    def save(self, calibration: Calibration) -> Calibration:
        """Keep the larger of `calibration` and what is stored; returns what was kept.
        Raises OSError (StoreRefused when the directory or file is not safely ours)."""
        dir_fd = self._open_dir(create=True)
        try:
            stored = self._read(dir_fd)
            kept = calibration if stored is None else merge_peaks(stored, calibration)
            body = json.dumps({"version": VERSION, "key": self.key, **{
                f: getattr(kept, f) for f in ("single_bytes_per_s", "aggregate_bytes_per_s",
                                              "threads")}}, indent=1).encode()
            with replacing_in(dir_fd, FILE_NAME) as out:
                out.write(body)
        except WriteRefused as exc:
            raise StoreRefused(f"{self.path}: {exc}") from None
        finally:
            os.close(dir_fd)
        return kept

    def _open_dir(self, create: bool) -> int:
        """The directory (made 0700 with its missing parents, as XDG asks, when `create`),
        opened without following a link; StoreRefused unless it is ours and private."""
        if create:
            for path in reversed([p for p in (self.directory, *self.directory.parents)
                                  if not p.exists()]):
                with contextlib.suppress(FileExistsError):
                    path.mkdir(mode=0o700)
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
            fd = open_own(FILE_NAME, os.O_RDONLY, dir_fd=dir_fd)
        except WriteRefused:
            return None
        try:
            data = os.read(fd, MAX_BYTES + 1) if os.fstat(fd).st_size <= MAX_BYTES else b""
        finally:
            os.close(fd)
        return parse_record(data, self.key)


def parse_record(data: bytes, key: Key) -> Calibration | None:
    """A stored record for `key` as a Calibration; None if anything is off."""
    try:
        record = json.loads(data)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("version") != VERSION \
            or record.get("key") != key:
        return None
    single, aggregate = (record.get(f) for f in ("single_bytes_per_s", "aggregate_bytes_per_s"))
    threads = record.get("threads")
    if not all(not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
               and v > 0 for v in (single, aggregate)) \
            or type(threads) is not int or threads < 1:
        return None
    return Calibration(float(single), float(aggregate), threads, 0.0)  # type: ignore[arg-type]
