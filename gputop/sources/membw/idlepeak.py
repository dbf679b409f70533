"""The canary's idle peak: whether a calibration ran on a quiet machine, and keeping quiet ones.

Quiet means a low load average per core, low memory PSI and, over the window itself, little
CPU used by other processes: that last catches a hog started seconds ago, which the load
average has not yet seen (and PSI rises with reclaim stalls, not with bandwidth).

Quiet peaks are kept in `$XDG_STATE_HOME/gputop/membw-idle-peak.json` (default
`~/.local/state/gputop/`), keyed by what makes a peak comparable (CPU, RAM, module layout,
boot id, canary size), only ever upward, so `--once` and a start under load have a
reference. The directory must be ours and private; the file is read without following
links and replaced through a temporary file.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pwd
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

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


class CpuMark(NamedTuple):
    """A point in time: wall clock, all CPUs' busy seconds, and our own CPU seconds."""

    wall_s: float
    busy_s: float
    own_s: float


def read_busy_s(proc_root: Path | str = "/proc") -> float | None:
    """Seconds all CPUs spent busy since boot (the 'cpu' line of /proc/stat)."""
    try:
        with open(Path(proc_root) / "stat") as stat:
            fields = stat.readline().split()
        if fields[0] != "cpu":
            return None
        return sum(int(fields[1 + i]) for i in BUSY_FIELDS) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def own_cpu_s() -> float:
    """CPU seconds of this process, all threads."""
    times = os.times()
    return times.user + times.system


class QuietMeter:
    """Says why the machine was not quiet since `start()`, or None when it was."""

    def __init__(
        self,
        proc_root: Path | str = "/proc",
        cpus: int | None = None,
        own: Callable[[], float] = own_cpu_s,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.proc_root = Path(proc_root)
        self.cpus = cpus or os.cpu_count() or 1
        self._own = own
        self._clock = clock
        self._mark: CpuMark | None = None

    def _now(self) -> CpuMark | None:
        busy = read_busy_s(self.proc_root)
        return None if busy is None else CpuMark(self._clock(), busy, self._own())

    def start(self) -> None:
        """Begin a window."""
        self._mark = self._now()

    def verdict(self) -> str | None:
        """None if the window since start() was quiet, else the reasons, '; '-joined."""
        reasons = []
        try:
            load: float | None = float(
                (self.proc_root / "loadavg").read_text().split()[0]) / self.cpus
        except (OSError, ValueError, IndexError):
            load = None
        if load is None or load > QUIET_LOAD_PER_CPU:
            reasons.append("load average unknown" if load is None
                           else f"load {load:.2f} per core")
        psi = read_psi(self.proc_root).some_avg10
        if psi is not None and psi > QUIET_PSI_SOME:
            reasons.append(f"memory PSI {psi:.1f} %")
        others = self._others_share()
        if others is None or others > QUIET_OTHERS_CPU_SHARE:
            reasons.append("CPU use unknown" if others is None
                           else f"other processes used {others:.0%} of the CPUs")
        return "; ".join(reasons) or None

    def _others_share(self) -> float | None:
        """Share of all CPUs that other processes used over the window."""
        now, mark = self._now(), self._mark
        if now is None or mark is None or now.wall_s <= mark.wall_s:
            return None
        others = (now.busy_s - mark.busy_s) - (now.own_s - mark.own_s)
        return max(0.0, others) / ((now.wall_s - mark.wall_s) * self.cpus)


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
            return self._read(dir_fd)
        finally:
            os.close(dir_fd)

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
            fd = open_own(FILE_NAME, os.O_RDONLY, dir_fd=dir_fd)
        except WriteRefused:
            return None
        try:
            if os.fstat(fd).st_size > MAX_BYTES:
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
        try:
            with replacing_in(dir_fd, FILE_NAME) as out:
                out.write(body)
        except WriteRefused as exc:
            raise StoreRefused(f"{self.path}: {exc}") from None


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
