"""The estimate rung: a timed copy ("canary") against a calibrated peak, plus PSI and vmstat."""

from __future__ import annotations

import contextlib
import ctypes
import os
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

MiB = 1 << 20
DEFAULT_PERIOD_S = 5.0
CPU_BUDGET = 0.001  # share of one core the canary may use on average
CHUNK_BYTES = 8 * MiB
FOOTPRINT_MIN, FOOTPRINT_MAX = 32 * MiB, 128 * MiB
SMOOTHING = 0.5


class PsiMemory(NamedTuple):
    """/proc/pressure/memory avg10 values in percent."""

    some_avg10: float | None
    full_avg10: float | None


class VmstatRates(NamedTuple):
    """Pages swapped in and major faults per second since the last read."""

    swap_in_per_s: float | None
    major_faults_per_s: float | None


class Calibration(NamedTuple):
    """Idle copy bandwidth: one thread (the canary's reference) and all threads together."""

    single_bytes_per_s: float
    aggregate_bytes_per_s: float
    threads: int
    seconds: float


def parse_psi(text: str) -> PsiMemory:
    """'some avg10=1.00 ...' / 'full avg10=0.50 ...' lines -> avg10 per kind."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        kind, *fields = line.split()
        for item in fields:
            key, _, value = item.partition("=")
            if key == "avg10":
                with contextlib.suppress(ValueError):
                    found[kind] = float(value)
    return PsiMemory(found.get("some"), found.get("full"))


def read_psi(proc_root: Path | str = "/proc") -> PsiMemory:
    """Memory PSI, or Nones where the kernel has PSI off."""
    try:
        return parse_psi((Path(proc_root) / "pressure/memory").read_text())
    except OSError:
        return PsiMemory(None, None)


def parse_vmstat(text: str, keys: tuple[str, ...] = ("pswpin", "pgmajfault")) -> dict[str, int]:
    """The named counters of /proc/vmstat."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in keys:
            with contextlib.suppress(ValueError):
                out[name] = int(value)
    return out


class VmstatReader:
    """Turns /proc/vmstat's pswpin and pgmajfault counters into per-second rates."""

    def __init__(
        self, proc_root: Path | str = "/proc", clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = Path(proc_root) / "vmstat"
        self._clock = clock
        self._last: tuple[float, dict[str, int]] | None = None

    def read(self) -> VmstatRates:
        """Rates since the last read; Nones on the first read or when a counter went backwards."""
        now = self._clock()
        try:
            values = parse_vmstat(self.path.read_text())
        except OSError:
            return VmstatRates(None, None)
        last, self._last = self._last, (now, values)
        if last is None or now <= last[0]:
            return VmstatRates(None, None)

        def rate(key: str) -> float | None:
            old, new = last[1].get(key), values.get(key)
            if old is None or new is None or new < old:
                return None
            return (new - old) / (now - last[0])

        return VmstatRates(rate("pswpin"), rate("pgmajfault"))


def llc_bytes(sys_root: Path | str = "/sys") -> int | None:
    """Size of cpu0's last-level (highest-level data or unified) cache."""
    best: tuple[int, int] | None = None
    for index in (Path(sys_root) / "devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = parse_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and (best is None or level > best[0]):
            best = (level, size)
    return best[1] if best else None


def parse_size(text: str) -> int:
    """'32768K' / '8M' / '512' -> bytes."""
    text = text.strip().upper()
    factor = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * factor


def footprint_for(llc: int | None) -> int:
    """Four times the LLC, so a chunk is never still cached when its turn comes again."""
    if llc is None:
        return FOOTPRINT_MAX
    return max(FOOTPRINT_MIN, min(FOOTPRINT_MAX, 4 * llc))


class Canary:
    """Two resident buffers; each copy moves the next chunk, rotating through the footprint."""

    def __init__(self, footprint_bytes: int, chunk_bytes: int = CHUNK_BYTES) -> None:
        half = max(chunk_bytes, footprint_bytes // 2 // chunk_bytes * chunk_bytes)
        self.chunk = chunk_bytes
        self.chunks = half // chunk_bytes
        self.footprint = 2 * half
        # Filled, not zeroed: every page is faulted in now, not during a timed copy.
        # The addresses stay valid because the bytearrays are never resized before close().
        self._src = bytearray(b"\x5a") * half
        self._dst = bytearray(b"\xa5") * half
        self._src_addr = ctypes.addressof(ctypes.c_char.from_buffer(self._src))
        self._dst_addr = ctypes.addressof(ctypes.c_char.from_buffer(self._dst))
        self.closed = False
        self._next = 0
        self._lock = threading.Lock()

    def _take(self, count: int = 1) -> int:
        with self._lock:
            index = self._next
            self._next = (self._next + count) % self.chunks
            return index

    def copy_chunk(self, index: int) -> float:
        """Copy chunk `index`; bytes per CPU-second of this thread (preemption is not counted)."""
        if self.closed:
            raise ValueError("canary is closed")
        offset = (index % self.chunks) * self.chunk
        start = time.thread_time_ns()
        ctypes.memmove(self._dst_addr + offset, self._src_addr + offset, self.chunk)
        spent = time.thread_time_ns() - start
        return self.chunk / (max(spent, 1) / 1e9)

    def copy(self) -> tuple[float, float]:
        """One canary: (bytes/s, CPU seconds it cost)."""
        start = time.thread_time()
        bandwidth = self.copy_chunk(self._take())
        return bandwidth, time.thread_time() - start

    def close(self) -> None:
        """Give the buffers back."""
        self.closed = True
        self._src = self._dst = bytearray()

    def parallel(self, threads: int) -> float:
        """`threads` chunks copied at once; aggregate bytes per wall second."""
        first = self._take(threads)
        workers = [
            threading.Thread(target=self.copy_chunk, args=(first + i,)) for i in range(threads)
        ]
        start = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        return threads * self.chunk / max(time.perf_counter() - start, 1e-9)


def calibrate(canary: Canary, budget_s: float = 1.0, threads: int | None = None) -> Calibration:
    """Idle bandwidth within `budget_s`: robust best single copy, then the best parallel round."""
    started = time.perf_counter()
    deadline = started + budget_s
    threads = max(1, min(threads or os.cpu_count() or 1, canary.chunks, 8))
    for _ in range(2):  # warm the path (TLB, page tables) before timing
        canary.copy()
    singles: list[float] = []
    while len(singles) < 12 and time.perf_counter() < started + budget_s * 0.4:
        singles.append(canary.copy()[0])
    single = sorted(singles)[-2] if len(singles) > 1 else singles[0] if singles else 0.0
    aggregate = single
    while threads > 1 and time.perf_counter() < deadline - budget_s * 0.1:
        aggregate = max(aggregate, canary.parallel(threads))
    return Calibration(single, aggregate, threads, time.perf_counter() - started)


def next_delay(period_s: float, cost_s: float, budget: float = CPU_BUDGET) -> float:
    """Seconds until the next canary: the period, stretched so its cost stays within budget."""
    return max(period_s, cost_s / budget)


def pressure_of(bandwidth: float, peak: float) -> float:
    """1 - bandwidth/peak, clamped to 0..1."""
    if peak <= 0:
        return 0.0
    return min(1.0, max(0.0, 1.0 - bandwidth / peak))


class CanaryEstimator:
    """Runs the canary when due and keeps a smoothed pressure against a ratcheting idle peak."""

    def __init__(
        self,
        canary: Canary,
        period_s: float = DEFAULT_PERIOD_S,
        clock: Callable[[], float] = time.monotonic,
        calibration_budget_s: float = 1.0,
    ) -> None:
        self.canary = canary
        self.period_s = period_s
        self._clock = clock
        self._budget_s = calibration_budget_s
        self.calibration: Calibration | None = None
        self.peak = 0.0
        self.bandwidth: float | None = None
        self.pressure: float | None = None
        self.cpu_seconds = 0.0
        self.runs = 0
        self._recent: deque[float] = deque(maxlen=5)
        self._due = 0.0
        self._last_cost = 0.0

    def calibrate(self) -> Calibration:
        """Measure the idle peak now (once; later calls return the first result)."""
        if self.calibration is None:
            self.calibration = calibrate(self.canary, self._budget_s)
            self.peak = self.calibration.single_bytes_per_s
            self._due = self._clock() + self.period_s
        return self.calibration

    def tick(self) -> None:
        """Run one canary if it is due (calibrating first on the very first tick)."""
        if self.calibration is None:
            self.calibrate()
            return
        now = self._clock()
        if now < self._due:
            return
        self.measure()
        self._due = now + next_delay(self.period_s, self._last_cost)

    def measure(self) -> float:
        """Run one canary now and fold it into the pressure; returns its raw pressure."""
        bandwidth, cost = self.canary.copy()
        self._last_cost = cost
        self.cpu_seconds += cost
        self.runs += 1
        self.bandwidth = bandwidth
        self._recent.append(bandwidth)
        if len(self._recent) == self._recent.maxlen:
            # A canary faster than the calibrated peak means calibration ran under load.
            self.peak = max(self.peak, statistics.median(self._recent))
        raw = pressure_of(bandwidth, self.peak)
        self.pressure = raw if self.pressure is None else (
            SMOOTHING * raw + (1 - SMOOTHING) * self.pressure
        )
        return raw
