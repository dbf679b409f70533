"""perf_event_open(2) through ctypes: one counter, optionally sampling into a mapped ring."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import mmap
import os
import platform
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, Protocol

PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_TYPE_HW_CACHE = 3
PERF_COUNT_HW_CACHE_MISSES = 3
PERF_COUNT_SW_CPU_CLOCK = 0
PERF_COUNT_SW_TASK_CLOCK = 1

PERF_SAMPLE_TID = 1 << 1
PERF_SAMPLE_PERIOD = 1 << 8

PERF_FORMAT_TOTAL_TIME_ENABLED = 1 << 0
PERF_FORMAT_TOTAL_TIME_RUNNING = 1 << 1
PERF_FLAG_FD_CLOEXEC = 1 << 3

ATTR_DISABLED = 1 << 0
ATTR_EXCLUDE_KERNEL = 1 << 5
ATTR_EXCLUDE_HV = 1 << 6
ATTR_FREQ = 1 << 10

# _IO('$', n): type '$' (0x24) in bits 8..15, no size, no direction.
PERF_EVENT_IOC_ENABLE = 0x2400
PERF_EVENT_IOC_DISABLE = 0x2401

CAP_SYS_ADMIN = 21
CAP_PERFMON = 38

SYSCALL_NUMBERS = {
    "x86_64": 298, "amd64": 298, "i386": 336, "i686": 336, "armv7l": 364, "s390x": 331,
    "aarch64": 241, "arm64": 241, "riscv64": 241, "loongarch64": 241, "ppc64le": 319,
    "ppc64": 319,
}

DENIED_ERRNOS = frozenset({errno.EACCES, errno.EPERM})


class PerfEventAttr(ctypes.Structure):
    """struct perf_event_attr up to config2 (PERF_ATTR_SIZE_VER1, 72 bytes)."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
        ("wakeup_events", ctypes.c_uint32),
        ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64),
        ("config2", ctypes.c_uint64),
    ]


class CounterValue(NamedTuple):
    """One read: the raw count and how long the event was enabled and actually counting."""

    value: int
    enabled_ns: int
    running_ns: int


@functools.cache
def _libc_syscall() -> Callable[..., int]:
    fn = ctypes.CDLL(None, use_errno=True).syscall
    fn.restype = ctypes.c_long
    return fn


def perf_event_open(
    type_: int,
    config: int,
    *,
    config1: int = 0,
    config2: int = 0,
    pid: int = -1,
    cpu: int = -1,
    exclude_kernel: bool = False,
    sample_freq: int = 0,
    sample_type: int = 0,
) -> int:
    """One disabled counter's fd (sampling about `sample_freq` times a second when given);
    OSError with the kernel's errno."""
    number = SYSCALL_NUMBERS.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"perf_event_open: no syscall number for {platform.machine()}")
    attr = PerfEventAttr()
    attr.type = type_
    attr.size = ctypes.sizeof(PerfEventAttr)
    attr.config = config
    attr.config1 = config1
    attr.config2 = config2
    attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING
    attr.flags = ATTR_DISABLED | (ATTR_EXCLUDE_KERNEL | ATTR_EXCLUDE_HV if exclude_kernel else 0)
    if sample_freq:
        attr.sample_period = sample_freq  # a frequency: the union's other member
        attr.sample_type = sample_type
        attr.flags |= ATTR_FREQ
    fd = _libc_syscall()(
        ctypes.c_long(number),
        ctypes.byref(attr),
        ctypes.c_int(pid),
        ctypes.c_int(cpu),
        ctypes.c_int(-1),
        ctypes.c_ulong(PERF_FLAG_FD_CLOEXEC),
    )
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
        """Start counting."""
        fcntl.ioctl(self.fd, PERF_EVENT_IOC_ENABLE, 0)

    def disable(self) -> None:
        """Stop counting (the total is kept)."""
        fcntl.ioctl(self.fd, PERF_EVENT_IOC_DISABLE, 0)

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
    if enabled > running:
        return value * enabled / running
    return float(value)


def paranoid_level(proc_root: Path | str = "/proc") -> int | None:
    """/proc/sys/kernel/perf_event_paranoid, or None when unreadable."""
    try:
        return int((Path(proc_root) / "sys/kernel/perf_event_paranoid").read_text().strip())
    except (OSError, ValueError):
        return None


def effective_caps(proc_root: Path | str = "/proc") -> int | None:
    """CapEff of this process as a bit mask, or None when unreadable."""
    try:
        for line in (Path(proc_root) / "self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        return None
    return None


def cpu_wide_refusal(proc_root: Path | str = "/proc") -> str | None:
    """Why CPU-wide (uncore, per-CPU core) events are not permitted here, or None if they may be."""
    caps = effective_caps(proc_root)
    if caps is not None and caps & ((1 << CAP_PERFMON) | (1 << CAP_SYS_ADMIN)):
        return None
    level = paranoid_level(proc_root)
    if level is None or level <= 0:
        return None
    return (f"not permitted (perf_event_paranoid={level}; CPU-wide counters need <= 0 "
            "or CAP_PERFMON)")


PERF_RECORD_LOST = 2
PERF_RECORD_SAMPLE = 9
# struct perf_event_mmap_page: data_head, data_tail, data_offset, data_size from byte 1024.
DATA_HEAD_AT = 1024
DATA_TAIL_AT = 1032
DATA_OFFSET_AT = 1040


class Samples(NamedTuple):
    """What one drain of a ring held: events per pid (the sum of sample periods), records lost."""

    periods: dict[int, int]
    lost: int


def parse_samples(data: bytes) -> Samples:
    """Records of a ring opened with PERF_SAMPLE_TID | PERF_SAMPLE_PERIOD; others are skipped."""
    periods: dict[int, int] = {}
    lost = 0
    at = 0
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
        head = struct.unpack_from("=Q", self._map, DATA_HEAD_AT)[0]
        tail = struct.unpack_from("=Q", self._map, DATA_TAIL_AT)[0]
        count = min(head - tail, self._size)
        start = tail % self._size
        first = min(count, self._size - start)
        base = self._offset
        data = self._map[base + start:base + start + first] + self._map[base:base + count - first]
        struct.pack_into("=Q", self._map, DATA_TAIL_AT, head)
        return parse_samples(data)

    def close(self) -> None:
        """Unmap (idempotent)."""
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
