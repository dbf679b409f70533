"""perf_event_open(2) through ctypes: counters, sample rings, and the CPU-wide counter meter."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import mmap
import os
import platform
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, Protocol

PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE, PERF_TYPE_HW_CACHE = 0, 1, 3
PERF_COUNT_HW_CACHE_MISSES = 3
PERF_COUNT_SW_CPU_CLOCK, PERF_COUNT_SW_TASK_CLOCK = 0, 1
PERF_SAMPLE_TID, PERF_SAMPLE_PERIOD = 1 << 1, 1 << 8
PERF_RECORD_LOST, PERF_RECORD_SAMPLE = 2, 9
CAP_SYS_ADMIN, CAP_PERFMON = 21, 38
DENIED_ERRNOS = frozenset({errno.EACCES, errno.EPERM})
SYSCALL_NUMBERS = {
    "x86_64": 298, "amd64": 298, "i386": 336, "i686": 336, "armv7l": 364, "s390x": 331,
    "aarch64": 241, "arm64": 241, "riscv64": 241, "loongarch64": 241, "ppc64le": 319,
    "ppc64": 319,
}
# struct perf_event_attr up to config2 (PERF_ATTR_SIZE_VER1): type, size, config,
# sample_period|freq, sample_type, read_format, flags, wakeup_events, bp_type, config1, config2.
ATTR = struct.Struct("=IIQQQQQIIQQ")
READ_TIMES = 1 | 2  # PERF_FORMAT_TOTAL_TIME_ENABLED | _RUNNING
DISABLED, EXCLUDE_KERNEL_AND_HV, FREQ = 1 << 0, 1 << 5 | 1 << 6, 1 << 10
IOC_ENABLE, IOC_DISABLE = 0x2400, 0x2401  # _IO('$', 0), _IO('$', 1)
# struct perf_event_mmap_page: data_head, data_tail, data_offset, data_size from byte 1024.
DATA_HEAD_AT, DATA_TAIL_AT, DATA_OFFSET_AT = 1024, 1032, 1040


class CounterValue(NamedTuple):
    """One read: the raw count and how long the event was enabled and actually counting."""

    value: int
    enabled_ns: int
    running_ns: int


class Samples(NamedTuple):
    """What one drain of a ring held: events per pid (the sum of sample periods), records lost."""

    periods: dict[int, int]
    lost: int


@functools.cache
def _libc_syscall() -> Callable[..., int]:
    fn = ctypes.CDLL(None, use_errno=True).syscall
    fn.restype = ctypes.c_long
    return fn


def perf_event_open(type_: int, config: int, *, config1: int = 0, config2: int = 0,
                    pid: int = -1, cpu: int = -1, exclude_kernel: bool = False,
                    sample_freq: int = 0, sample_type: int = 0) -> int:
    """One disabled counter's fd (sampling about `sample_freq` times a second when given);
    OSError with the kernel's errno."""
    number = SYSCALL_NUMBERS.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"perf_event_open: no syscall number for {platform.machine()}")
    flags = DISABLED | (EXCLUDE_KERNEL_AND_HV if exclude_kernel else 0) | (
        FREQ if sample_freq else 0)
    attr = ctypes.create_string_buffer(ATTR.pack(
        type_, ATTR.size, config, sample_freq, sample_type if sample_freq else 0, READ_TIMES,
        flags, 0, 0, config1, config2), ATTR.size)
    fd = _libc_syscall()(ctypes.c_long(number), ctypes.byref(attr), ctypes.c_int(pid),
                         ctypes.c_int(cpu), ctypes.c_int(-1), ctypes.c_ulong(1 << 3))  # CLOEXEC
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"perf_event_open(type={type_}, config={config:#x}, cpu={cpu}): "
                      f"{os.strerror(err)}")
    return int(fd)


class PerfCounter:
    """One open perf event; read() gives the running total, never reset behind the caller."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def open(cls, type_: int, config: int, **options: Any) -> PerfCounter:
        """Open a counter (disabled until enable()); `options` are perf_event_open()'s."""
        return cls(perf_event_open(type_, config, **options))

    def enable(self) -> None:
        fcntl.ioctl(self.fd, IOC_ENABLE, 0)

    def disable(self) -> None:
        fcntl.ioctl(self.fd, IOC_DISABLE, 0)

    def read(self) -> CounterValue:
        """The count so far, with enabled and running times for multiplexing."""
        raw = os.read(self.fd, 24)
        if len(raw) != 24:
            raise OSError(errno.EIO, f"perf read returned {len(raw)} bytes")
        return CounterValue(*struct.unpack("=QQQ", raw))

    def close(self) -> None:
        """Release the fd (idempotent)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> PerfCounter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def scaled_delta(before: CounterValue, after: CounterValue) -> float | None:
    """Count between two reads, scaled up when the kernel multiplexed the event; None if unseen."""
    value = after.value - before.value
    enabled = after.enabled_ns - before.enabled_ns
    running = after.running_ns - before.running_ns
    if value < 0 or running <= 0:
        return None
    return value * enabled / running if enabled > running else float(value)


def paranoid_level(proc_root: Path | str = "/proc") -> int | None:
    """/proc/sys/kernel/perf_event_paranoid, or None when unreadable."""
    try:
        return int((Path(proc_root) / "sys/kernel/perf_event_paranoid").read_text().strip())
    except (OSError, ValueError):
        return None


def cpu_wide_refusal(proc_root: Path | str = "/proc") -> str | None:
    """Why CPU-wide (uncore, per-CPU core) events are not permitted here, or None if they may be."""
    try:
        status = (Path(proc_root) / "self/status").read_text()
        caps = next(int(line.split()[1], 16) for line in status.splitlines()
                    if line.startswith("CapEff:"))
    except (OSError, ValueError, IndexError, StopIteration):
        caps = 0
    level = paranoid_level(proc_root)
    if caps & ((1 << CAP_PERFMON) | (1 << CAP_SYS_ADMIN)) or level is None or level <= 0:
        return None
    return (f"not permitted (perf_event_paranoid={level}; CPU-wide counters need <= 0 "
            "or CAP_PERFMON)")


def parse_samples(data: bytes) -> Samples:
    """Records of a ring opened with PERF_SAMPLE_TID | PERF_SAMPLE_PERIOD; others are skipped."""
    periods: dict[int, int] = {}
    lost = at = 0
    while at + 8 <= len(data):
        kind, _misc, size = struct.unpack_from("=IHH", data, at)
        if size < 8 or at + size > len(data):
            break  # a torn or foreign record: stop rather than misread what follows
        if kind == PERF_RECORD_SAMPLE and size >= 24:
            pid, _tid, period = struct.unpack_from("=IIQ", data, at + 8)
            periods[pid] = periods.get(pid, 0) + period
        elif kind == PERF_RECORD_LOST and size >= 24:
            lost += struct.unpack_from("=Q", data, at + 16)[0]
        at += size
    return Samples(periods, lost)


class SampleRing:
    """A sampling counter's ring (mapped writable: the kernel counts unread records as lost
    rather than overwrite them); drain() reads the new records and frees them."""

    def __init__(self, fd: int, data_pages: int = 2) -> None:
        page = mmap.PAGESIZE
        self._map = mmap.mmap(fd, (1 + data_pages) * page, mmap.MAP_SHARED,
                              mmap.PROT_READ | mmap.PROT_WRITE)
        offset, size = struct.unpack_from("=QQ", self._map, DATA_OFFSET_AT)
        self._offset: int = offset if size else page  # kernels before 4.1 leave both zero
        self._size: int = size or data_pages * page

    def drain(self) -> Samples:
        """Every record since the last drain (x86 orders the loads; a lag only delays one)."""
        head, tail = (struct.unpack_from("=Q", self._map, at)[0]
                      for at in (DATA_HEAD_AT, DATA_TAIL_AT))
        count = min(head - tail, self._size)
        start = tail % self._size
        first = min(count, self._size - start)
        base = self._offset
        data = self._map[base + start:base + start + first] + self._map[base:base + count - first]
        struct.pack_into("=Q", self._map, DATA_TAIL_AT, head)
        return parse_samples(data)

    def close(self) -> None:
        if not self._map.closed:
            self._map.close()


class Counter(Protocol):
    """What the meters use of an open counter (PerfCounter's)."""

    fd: int

    def enable(self) -> None: ...
    def read(self) -> CounterValue: ...
    def close(self) -> None: ...


class Ring(Protocol):
    """What the meters use of a sample ring (SampleRing's)."""

    def drain(self) -> Samples: ...
    def close(self) -> None: ...


Opener = Callable[..., Counter]
RingFactory = Callable[[int], Ring]


class PerfLayer(Protocol):
    """A stand-in for the kernel (tests): open a counter, map its sample ring."""

    def open(self, type_: int, config: int, **kwargs: Any) -> Counter: ...
    def ring(self, fd: int) -> Ring: ...


class Opened(NamedTuple):
    """One open counter, its ring (when sampling), which side it counts and its bytes a count."""

    counter: Counter
    ring: Ring | None
    direction: str
    bytes_per_count: float


def open_all(specs: list[tuple[int, int, dict[str, Any], str, float]], opener: Opener,
             ring: RingFactory | None = None) -> list[Opened]:
    """Open, map (when `ring`) and enable each (type, config, options, direction, bytes a
    count); all or nothing."""
    opened: list[Opened] = []
    try:
        for type_, config, options, direction, per_count in specs:
            counter = opener(type_, config, **options)
            opened.append(Opened(counter, None, direction, per_count))
            if ring is not None:
                opened[-1] = opened[-1]._replace(ring=ring(counter.fd))
            counter.enable()
    except (OSError, ValueError):
        close_all(opened)
        raise
    return opened


def close_all(opened: list[Opened]) -> None:
    """Unmap every ring and close every counter."""
    for counter, ring, _, _ in opened:
        if ring is not None:
            ring.close()
        counter.close()


class CpuCounters:
    """CPU-wide counters read together: bytes by side since the last read, and samples."""

    def __init__(self, source: str, detail: str, opened: list[Opened],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source, self.detail = source, detail
        self._counters = opened
        self._clock = clock
        self._last: list[CounterValue] | None = None
        self._last_time = 0.0

    def delta(self) -> tuple[dict[str, float], int, list[Samples], float] | None:
        """(bytes by side, counters unseen, drained samples, seconds); None on the first read."""
        now = self._clock()
        values = [o.counter.read() for o in self._counters]
        drained = [o.ring.drain() for o in self._counters if o.ring is not None]
        last, last_time = self._last, self._last_time
        self._last, self._last_time = values, now
        if last is None or now <= last_time:
            return None
        sums = {"read": 0.0, "write": 0.0, "total": 0.0}
        unseen = 0
        for opened, before, after in zip(self._counters, last, values, strict=True):
            delta = scaled_delta(before, after)
            if delta is None:
                unseen += 1
            else:
                sums[opened.direction] += delta * opened.bytes_per_count
        return sums, unseen, drained, now - last_time

    def close(self) -> None:
        """Unmap every ring and close every counter."""
        close_all(self._counters)
        self._counters = []

