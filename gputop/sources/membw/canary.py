"""The canary: a timed copy through a cache-cold resident buffer, and the idle-peak calibration."""

from __future__ import annotations

import ctypes
import mmap
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import NamedTuple

MiB = 1 << 20
CHUNK_BYTES = 8 * MiB
CHUNKS_PER_HALF = 4
LLC_MULTIPLE = 2
CANARY_BUDGET = 16 * MiB  # resident bytes; the app's own budget leaves this much
ROUNDS = 12


class Calibration(NamedTuple):
    """Idle copy bandwidth: one thread (the canary's reference) and all threads together."""

    single_bytes_per_s: float
    aggregate_bytes_per_s: float
    threads: int
    seconds: float


def merge_peaks(old: Calibration, new: Calibration) -> Calibration:
    """The higher single and aggregate bandwidths of two calibrations."""
    return Calibration(
        max(old.single_bytes_per_s, new.single_bytes_per_s),
        max(old.aggregate_bytes_per_s, new.aggregate_bytes_per_s),
        new.threads if new.aggregate_bytes_per_s >= old.aggregate_bytes_per_s else old.threads,
        new.seconds,
    )


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


def getconf_llc_bytes() -> int | None:
    """`getconf LEVEL3_CACHE_SIZE` (glibc asks the CPU), for kernels without cache sysfs."""
    try:
        done = subprocess.run(
            ["getconf", "LEVEL3_CACHE_SIZE"], capture_output=True, text=True, timeout=2,
            check=False,
        )
        size = int(done.stdout.strip())
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return size if size > 0 else None


def parse_size(text: str) -> int:
    """'32768K' / '8M' / '512' -> bytes."""
    text = text.strip().upper()
    factor = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * factor


class CanaryPlan(NamedTuple):
    """The canary's buffer for this cache, or None and why it cannot be honest here."""

    footprint: int | None
    chunk: int
    reason: str


def plan_canary(llc: int | None, budget: int = CANARY_BUDGET) -> CanaryPlan:
    """A buffer of LLC_MULTIPLE x the LLC (so a copy leaves the cache) if it fits the budget."""
    if llc is None:
        return CanaryPlan(None, 0, "canary off: the LLC size is unknown, so a copy could "
                                   "not be shown to leave the cache")
    need = LLC_MULTIPLE * -(-llc // (2 * MiB)) * (2 * MiB)  # whole 2 MiB steps, rounded up
    limits = f"{mib(need)} ({LLC_MULTIPLE}x the {mib(llc)} LLC)"
    if need > budget:
        return CanaryPlan(None, 0, f"canary off: it would need {limits}, over its "
                                   f"{mib(budget)} budget")
    chunk = min(CHUNK_BYTES, need // 2 // CHUNKS_PER_HALF)
    return CanaryPlan(need, chunk, f"canary buffer {limits}")


def mib(size: int) -> str:
    """Bytes as '480 MiB' / '1.5 MiB'."""
    return f"{size / MiB:.4g} MiB"


class Canary:
    """Two halves of one anonymous mapping; each copy moves the next chunk, rotating through.

    Sized at twice the last-level cache (a smaller buffer would time the cache), and kept
    resident: fresh pages come from the kernel still cached and hide a memory hog. It is
    mapped and filled on first use, on the calibration thread, never when opened.
    """

    def __init__(self, footprint_bytes: int, chunk_bytes: int = CHUNK_BYTES) -> None:
        half = max(1, -(-footprint_bytes // 2 // chunk_bytes)) * chunk_bytes  # never below
        self.chunk = chunk_bytes
        self.chunks = half // chunk_bytes
        self.footprint = 2 * half
        self.closed = False
        self._map: mmap.mmap | None = None
        self._view: ctypes.c_char | None = None
        self._src = self._dst = 0
        self._next = 0
        self._lock = threading.Lock()

    def _ensure_map(self) -> None:
        if self.closed:
            raise ValueError("canary is closed")
        if self._map is None:
            # Private: Python's default for anonymous maps is MAP_SHARED, i.e. shmem pages.
            self._map = mmap.mmap(-1, self.footprint, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            self._view = ctypes.c_char.from_buffer(self._map)
            self._src = ctypes.addressof(self._view)
            self._dst = self._src + self.footprint // 2
            # Filled, not left zero: every page is faulted in now, not in a timed copy.
            # ctypes.memset lets go of the GIL, so the UI thread is not held up meanwhile.
            ctypes.memset(self._src, 0x5A, self.footprint // 2)
            ctypes.memset(self._dst, 0xA5, self.footprint // 2)

    def _take(self, count: int = 1) -> int:
        index = self._next
        self._next = (self._next + count) % self.chunks
        return index

    def copy_chunk(self, index: int) -> float:
        """Copy chunk `index`; bytes per CPU-second of this thread (preemption not counted)."""
        offset = (index % self.chunks) * self.chunk
        start = time.thread_time_ns()
        ctypes.memmove(self._dst + offset, self._src + offset, self.chunk)
        spent = time.thread_time_ns() - start
        return self.chunk / (max(spent, 1) / 1e9)

    def copy(self) -> tuple[float, float]:
        """One canary: (bytes/s, CPU seconds it cost)."""
        with self._lock:
            self._ensure_map()
            start = time.thread_time()
            bandwidth = self.copy_chunk(self._take())
            return bandwidth, time.thread_time() - start

    def parallel(self, threads: int) -> float:
        """`threads` chunks copied at once; aggregate bytes per wall second."""
        threads = max(1, min(threads, self.chunks))
        with self._lock:
            self._ensure_map()
            first = self._take(threads)
            workers = [
                threading.Thread(target=self.copy_chunk, args=(first + i,), daemon=True)
                for i in range(threads)
            ]
            start = time.perf_counter()
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            return threads * self.chunk / max(time.perf_counter() - start, 1e-9)

    def close(self) -> None:
        """Unmap (waits for a copy in progress, so no thread copies into freed memory)."""
        with self._lock:
            self.closed = True
            self._view = None
            if self._map is not None:
                self._map.close()
                self._map = None
            self._src = self._dst = 0


def calibrate(canary: Canary, budget_s: float = 1.0, stop: threading.Event | None = None,
              threads: int | None = None) -> Calibration:
    """Idle bandwidth within `budget_s` (sooner if `stop` is set): best single copy, best round."""
    started = time.perf_counter()
    deadline = started + budget_s
    threads = max(1, min(threads or os.cpu_count() or 1, canary.chunks, 8))

    def stopped() -> bool:
        return stop is not None and stop.is_set()

    def going(until: float) -> bool:
        return time.perf_counter() < until and not stopped()

    for _ in range(2):  # warm the path (TLB, page tables) before timing
        canary.copy()
    singles: list[float] = []
    # One copy is timed even when the warm-up outlasted the budget (a loaded box), unless
    # asked to stop: a calibration of nothing would say nothing.
    while len(singles) < ROUNDS and (going(started + budget_s * 0.4)
                                     or not (singles or stopped())):
        singles.append(canary.copy()[0])
    single = sorted(singles)[-2] if len(singles) > 1 else singles[0] if singles else 0.0
    aggregate, rounds = single, 0
    while threads > 1 and rounds < ROUNDS and going(deadline - budget_s * 0.1):
        aggregate = max(aggregate, canary.parallel(threads))
        rounds += 1
    return Calibration(single, aggregate, threads, time.perf_counter() - started)
