"""Raw /proc parsing: pure functions on file contents, plus tiny readers that never raise."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Container, Mapping
from typing import NamedTuple

CLOCK_TICKS: int = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_SIZE: int = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_LOOK_FLAGS = os.O_PATH | os.O_CLOEXEC
_CHUNK = 1 << 16


class ProcStat(NamedTuple):
    """The fields of /proc/PID/stat gputop uses (times in clock ticks, rss in pages)."""

    pid: int
    comm: str
    state: str
    ppid: int
    utime: int
    stime: int
    num_threads: int
    starttime: int
    rss_pages: int
    flags: int = 0  # the kernel's per-task flags (PF_*)


PF_KTHREAD = 0x00200000  # a kernel thread: set by the kernel alone, no user can fake it


class CpuTimes(NamedTuple):
    """One `cpu` line of /proc/stat, reduced to busy and total clock ticks."""

    busy: int
    total: int


class MemInfo(NamedTuple):
    """/proc/meminfo in bytes."""

    total: int
    available: int
    swap_total: int
    swap_free: int


def parse_stat(data: bytes) -> ProcStat | None:
    """Parse /proc/PID/stat; comm runs from the first '(' to the LAST ')' (it may hold both)."""
    head, sep, tail = data.rpartition(b")")
    left = head.find(b"(")
    if not sep or left < 0:
        return None
    fields = tail.split()
    if len(fields) < 22:
        return None
    try:
        return ProcStat(
            pid=int(head[:left]),
            comm=head[left + 1 :].decode("utf-8", "replace"),
            state=fields[0].decode("ascii", "replace"),
            ppid=int(fields[1]),
            utime=int(fields[11]),
            stime=int(fields[12]),
            num_threads=int(fields[17]),
            starttime=int(fields[19]),
            rss_pages=int(fields[21]),
            flags=int(fields[6]),
        )
    except ValueError:
        return None


BLKIO_FIELD = 39  # delayacct_blkio_ticks, field 42 of /proc/PID/stat, counted after ')'


def parse_blkio_ticks(data: bytes) -> int | None:
    """Clock ticks /proc/PID/stat says the process waited for block I/O (delay accounting)."""
    fields = data.rpartition(b")")[2].split()
    if len(fields) <= BLKIO_FIELD or not fields[BLKIO_FIELD].isdigit():
        return None
    return int(fields[BLKIO_FIELD])


MAJFLT_FIELD = 9  # majflt, field 12 of /proc/PID/stat, counted after ')'


def parse_majflt(data: bytes) -> int | None:
    """Major page faults /proc/PID/stat says the process took (pages read in from storage or
    swap for it), its own and not its children's."""
    fields = data.rpartition(b")")[2].split()
    if len(fields) <= MAJFLT_FIELD or not fields[MAJFLT_FIELD].isdigit():
        return None
    return int(fields[MAJFLT_FIELD])


EXIT_SIGNAL_FIELD = 35  # exit_signal, field 38 of /proc/PID/stat, counted after ')'


def is_thread(data: bytes) -> bool:
    """Whether /proc/N/stat text is a thread's, not a process's: /proc/TID of a thread is
    readable though /proc does not list it, and a thread's exit_signal is -1."""
    fields = data.rpartition(b")")[2].split()
    return len(fields) > EXIT_SIGNAL_FIELD and fields[EXIT_SIGNAL_FIELD] == b"-1"


class SchedStat(NamedTuple):
    """/proc/PID/schedstat of one thread: time on a CPU and time runnable but waiting for one."""

    run_ns: int
    wait_ns: int


def parse_schedstat(data: bytes) -> SchedStat | None:
    """'run_ns wait_ns timeslices'; None for anything else."""
    fields = data.split()
    if len(fields) < 2 or not (fields[0].isdigit() and fields[1].isdigit()):
        return None
    return SchedStat(int(fields[0]), int(fields[1]))


def parse_io_read_bytes(data: bytes) -> int | None:
    """The read_bytes line of /proc/PID/io: bytes the process made storage read for it."""
    for line in data.splitlines():
        key, _, value = line.partition(b":")
        if key == b"read_bytes":
            value = value.strip()
            return int(value) if value.isdigit() else None
    return None


def delay_accounting_on(proc_root: str = "/proc") -> bool:
    """Whether the kernel counts block-I/O waits per task (kernel.task_delayacct=1)."""
    return (read_bytes(f"{proc_root}/sys/kernel/task_delayacct", 64) or b"").strip() == b"1"


def parse_cmdline(data: bytes) -> tuple[str, ...]:
    """Split /proc/PID/cmdline on NULs; empty for kernel threads and zombies."""
    if not data:
        return ()
    # A process that rewrote its argv (setproctitle) often joins arguments with spaces.
    parts = data[:-1].split(b"\0") if data.endswith(b"\0") else data.split(b" ")
    return tuple(p.decode("utf-8", "replace") for p in parts)


def parse_cpu_lines(text: str) -> tuple[CpuTimes | None, tuple[CpuTimes, ...]]:
    """The aggregate and per-core `cpu` lines of /proc/stat (guest time is already in user)."""
    total: CpuTimes | None = None
    per_cpu: list[CpuTimes] = []
    for line in text.splitlines():
        if not line.startswith("cpu"):
            continue
        name, *values = line.split()
        try:
            ticks = list(map(int, values[:8]))
        except ValueError:
            continue
        if len(ticks) < 4:
            continue
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
        all_ticks = sum(ticks)  # once a line: this runs for every core every tick
        times = CpuTimes(all_ticks - idle, all_ticks)
        if name == "cpu":
            total = times
        else:
            per_cpu.append(times)
    return total, tuple(per_cpu)


def cpu_percent_between(before: CpuTimes, after: CpuTimes) -> float:
    """Busy share of the ticks between two readings, 0..100; 0 when no tick passed."""
    total = after.total - before.total
    if total <= 0:
        return 0.0
    busy = after.busy - before.busy
    return max(0.0, min(100.0, 100.0 * busy / total))


def parse_meminfo(text: str) -> MemInfo | None:
    """MemTotal, MemAvailable (estimated on old kernels), SwapTotal, SwapFree, in bytes."""
    total = line_number(text, "MemTotal:")
    if total is None:
        return None
    available = line_number(text, "MemAvailable:")
    if available is None:
        available = sum(line_number(text, key) or 0 for key in ("MemFree:", "Buffers:", "Cached:"))
    return MemInfo(
        total=total * 1024,
        available=available * 1024,
        swap_total=(line_number(text, "SwapTotal:") or 0) * 1024,
        swap_free=(line_number(text, "SwapFree:") or 0) * 1024,
    )


def line_number(text: str, key: str) -> int | None:
    """The number that follows `key` on the first line of `text` that starts with it
    (meminfo's "MemTotal:", vmstat's "pswpin "), found without splitting every line."""
    at = 0 if text.startswith(key) else text.find("\n" + key) + 1
    if at == 0 and not text.startswith(key):
        return None
    start = at + len(key)
    end = text.find("\n", start)
    value = text[start:] if end < 0 else text[start:end]
    fields = value.split()
    return int(fields[0]) if fields and fields[0].isdigit() else None


def parse_loadavg(text: str) -> tuple[tuple[float, float, float], int | None]:
    """Load averages and the last PID the kernel allocated (its final field)."""
    fields = text.split()
    try:
        load = (float(fields[0]), float(fields[1]), float(fields[2]))
    except (IndexError, ValueError):
        return (0.0, 0.0, 0.0), None
    last = fields[4] if len(fields) > 4 else ""
    return load, int(last) if last.isdigit() else None


def parse_uptime(text: str) -> float | None:
    """Seconds since boot, the first field of /proc/uptime."""
    try:
        return float(text.split()[0])
    except (IndexError, ValueError):
        return None


def read_bytes(path: str, limit: int = 1 << 20, dir_fd: int | None = None) -> bytes | None:
    """A whole regular file up to `limit` bytes, or None: vanished, unreadable or not regular.

    For paths gputop chose (/proc, /sys). A final symlink is not followed and a FIFO does
    not block the open; read until EOF, since /proc's seq files give a page per read.
    """
    try:
        fd = os.open(path, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return _read_up_to(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_regular_beneath(
    root: str, path: str, limit: int = 1 << 20, dir_fd: int | None = None
) -> bytes | None:
    """The regular file at absolute `path` seen from directory `root`, or None.

    For paths someone else named: each component is looked up alone without following a
    symlink ("." and ".." refused), and the file is opened for reading only after an
    O_PATH look (no side effect, even on a device) found it regular and at most `limit`.
    """
    names = path.strip("/").split("/")
    if any(name in ("", ".", "..") for name in names):
        return None
    found = _open_path_beneath(root, names, dir_fd)
    if found is None:
        return None
    try:
        seen = os.fstat(found)
        if not stat.S_ISREG(seen.st_mode) or seen.st_size > limit:
            return None
        fd = os.open(f"/proc/self/fd/{found}", _READ_FLAGS & ~os.O_NOFOLLOW)  # the inode seen
    except OSError:
        return None
    finally:
        os.close(found)
    try:
        return _read_up_to(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def _open_path_beneath(root: str, names: list[str], dir_fd: int | None) -> int | None:
    """An O_PATH fd of root/names[0]/..., no component a symlink, or None."""
    try:
        fd = os.open(root, _LOOK_FLAGS | os.O_DIRECTORY, dir_fd=dir_fd)
    except OSError:
        return None
    last = len(names) - 1
    for i, name in enumerate(names):
        flags = _LOOK_FLAGS | os.O_NOFOLLOW | (os.O_DIRECTORY if i < last else 0)
        try:
            inner: int | None = os.open(name, flags, dir_fd=fd)
        except OSError:
            inner = None
        finally:
            os.close(fd)
        if inner is None:
            return None
        fd = inner
    return fd


def _read_up_to(fd: int, limit: int) -> bytes:
    """Everything `fd` gives until EOF, at most `limit` bytes."""
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, _CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class KeptFile:
    """A small file read every tick through an fd kept open (pread from the start): one
    syscall a read instead of open, fstat, two reads and close. Reopened after a failure."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def read(self, limit: int = 1 << 20) -> bytes | None:
        """The whole file now (up to `limit` bytes), or None: missing, unreadable, not regular."""
        fd = self._fd
        if fd is None:
            fd = self._fd = _open_regular(self.path)
            if fd is None:
                return None
        try:
            return _pread_up_to(fd, limit)
        except OSError:
            self.close()
            return None

    def text(self) -> str | None:
        """The file decoded (replacing what is not UTF-8), or None."""
        data = self.read()
        return None if data is None else data.decode("utf-8", "replace")

    def close(self) -> None:
        """Close the kept fd (the next read opens the file again)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        self.close()


def _open_regular(path: str) -> int | None:
    """An fd of the regular file at `path` (no final symlink followed), or None."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _pread_up_to(fd: int, limit: int) -> bytes:
    """The file behind `fd` from its start, at most `limit` bytes (one pread when it fits)."""
    data = os.pread(fd, min(limit, _CHUNK), 0)
    if len(data) < _CHUNK or len(data) >= limit:
        return data
    chunks = [data]
    offset = len(data)
    while offset < limit:
        chunk = os.pread(fd, min(limit - offset, _CHUNK), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def read_text(path: str) -> str | None:
    """A whole small text file, or None."""
    data = read_bytes(path)
    return None if data is None else data.decode("utf-8", "replace")


def parse_status_uids(data: bytes) -> tuple[int, ...] | None:
    """Real, effective, saved and filesystem uid from the `Uid:` line of /proc/PID/status."""
    for line in data.splitlines():
        if line.startswith(b"Uid:"):
            fields = line.split()[1:]
            if len(fields) != 4 or not all(f.isdigit() for f in fields):
                return None
            return tuple(int(f) for f in fields)
    return None


def list_pids(proc_root: str = "/proc") -> list[int]:
    """Every thread-group id /proc lists (threads are not listed at the top level)."""
    try:
        names = os.listdir(proc_root)
    except OSError:
        return []
    return [int(n) for n in names if n.isdigit()]


class StatReader:
    """Reads /proc/PID/<name> through fds kept open between ticks (pread), up to a cap."""

    def __init__(
        self, proc_root: str = "/proc", max_fds: int | None = None, name: str = "stat"
    ) -> None:
        self.proc_root = proc_root
        self.name = name
        self.max_fds = default_fd_cap() if max_fds is None else max_fds
        self._fds: dict[int, int] = {}

    def read(self, pid: int) -> bytes | None:
        """The file's current text, or None once `pid` is gone (its fd is then closed)."""
        fd = self._fds.get(pid)
        if fd is not None:
            try:
                return os.pread(fd, 1024, 0)
            except OSError:
                self.forget(pid)  # gone; a new process may hold the pid now
        path = f"{self.proc_root}/{pid}/{self.name}"
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            data = os.pread(fd, 1024, 0)
        except OSError:
            os.close(fd)
            return None
        if len(self._fds) < self.max_fds:
            self._fds[pid] = fd
        else:
            os.close(fd)
        return data

    def adopt(self, pid: int, fd: int) -> None:
        """Keep `fd`, open on `pid`'s file elsewhere (a first look), as if `read` had opened it."""
        if pid in self._fds or len(self._fds) >= self.max_fds:
            os.close(fd)
        else:
            self._fds[pid] = fd

    def forget(self, pid: int) -> None:
        """Close the fd of a process that vanished or was replaced."""
        fd = self._fds.pop(pid, None)
        if fd is not None:
            os.close(fd)

    def keep_only(self, pids: Container[int]) -> None:
        """Close fds of every pid not in `pids`."""
        for pid in [p for p in self._fds if p not in pids]:
            self.forget(pid)

    @property
    def open_fds(self) -> int:
        """How many stat fds are held now."""
        return len(self._fds)

    @property
    def fds(self) -> Mapping[int, int]:
        """The fds held now, by pid: a caller's loop over thousands of processes preads them
        itself, and calls `read` for the rest (or when a pread fails)."""
        return self._fds

    def close(self) -> None:
        """Close every fd."""
        for pid in list(self._fds):
            self.forget(pid)


def default_fd_cap(ceiling: int = 4096, share: int = 4) -> int:
    """A quarter of the soft RLIMIT_NOFILE (the rest stays for the program), at most `ceiling`."""
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 0
    if soft == resource.RLIM_INFINITY:
        return ceiling
    return max(0, min(ceiling, soft // share))


CPUCLOCK_SCHED = 2  # the kernel's CPU clock that counts run time in ns (not ticks)


def cpu_clock_id(pid: int) -> int:
    """The id of process `pid`'s CPU-time clock, as clock_getcpuclockid(3) makes it (the
    kernel's MAKE_PROCESS_CPUCLOCK): its threads' run time summed, in ns. The kernel answers
    it for any process, with one system call and no file: no text made, no fd kept."""
    return ((~pid) << 3) | CPUCLOCK_SCHED


def cpu_clocks_answer(proc_root: str = "/proc") -> bool:
    """Whether processes' CPU clocks can tell whether the processes under `proc_root` ran:
    it is this process's own /proc (the PIDs it shows are the ones the clocks take) and this
    process's clock reads as its CPU time does."""
    pid = os.getpid()
    try:
        if os.readlink(f"{proc_root}/self") != str(pid):
            return False
        mine = time.clock_gettime_ns(cpu_clock_id(pid))
    except (OSError, ValueError, OverflowError):
        return False
    return abs(time.clock_gettime_ns(time.CLOCK_PROCESS_CPUTIME_ID) - mine) < 1_000_000_000


def schedstat_counts(proc_root: str = "/proc") -> bool:
    """Whether /proc/PID/schedstat counts run time here (kernels without it print zeros)."""
    data = read_bytes(f"{proc_root}/self/schedstat") or b""
    first = data.split(b" ", 1)[0]
    return first.isdigit() and int(first) > 0


class ThreadCountWatch:
    """How many threads the kernel holds (loadavg's "running/total"): grown by exactly the
    PIDs allocated since the last look, no process or thread ended meanwhile."""

    def __init__(self, proc_root: str = "/proc") -> None:
        try:
            self._fd: int | None = os.open(f"{proc_root}/loadavg", os.O_RDONLY)
        except OSError:
            self._fd = None

    def read(self) -> int | None:
        """The number of threads now, or None when loadavg cannot be read or parsed."""
        if self._fd is None:
            return None
        try:
            fields = os.pread(self._fd, 128, 0).split()
        except OSError:
            return None
        total = fields[3].partition(b"/")[2] if len(fields) > 3 else b""
        return int(total) if total.isdigit() else None

    def close(self) -> None:
        """Close the watched file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class LastPidWatch:
    """The last PID the kernel allocated: unchanged means no process (or thread) was born."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self._fd: int | None = None
        self._from_loadavg = False
        for path, loadavg in ((f"{proc_root}/sys/kernel/ns_last_pid", False),
                              (f"{proc_root}/loadavg", True)):
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.pread(fd, 64, 0)
            except OSError:
                os.close(fd)
                continue
            self._fd, self._from_loadavg = fd, loadavg
            break

    def read(self) -> int | None:
        """The last allocated PID, or None when neither file can be read."""
        if self._fd is None:
            return None
        try:
            text = os.pread(self._fd, 128, 0).decode("ascii", "replace")
        except OSError:
            return None
        if self._from_loadavg:
            return parse_loadavg(text)[1]
        text = text.strip()
        return int(text) if text.isdigit() else None

    def close(self) -> None:
        """Close the watched file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
