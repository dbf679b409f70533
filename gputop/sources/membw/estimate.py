"""The estimate rung: a timed copy ("canary") against a calibrated peak, plus PSI and vmstat."""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, Protocol

from gputop.sources import procfs
from gputop.sources.membw.canary import Calibration, Canary, calibrate, merge_peaks
from gputop.sources.membw.hardware import read_text

DEFAULT_PERIOD_S = 5.0
CPU_BUDGET = 0.001  # share of one core the canary may use on average
CALIBRATION_BUDGET_S = 1.0
SMOOTHING = 0.5
FIRST_COPIES = 3  # the first reading is a median: `--once` gets no second one
RECALIBRATE_AFTER_S = 60.0  # a calibration taken under load is retried this often
KEEP_RISE = 0.02  # a peak that rose by this share is written back

Calibrator = Callable[[Canary, float, threading.Event], Calibration]


class PsiMemory(NamedTuple):
    """/proc/pressure/memory avg10 values in percent."""

    some_avg10: float | None
    full_avg10: float | None


class VmstatRates(NamedTuple):
    """Pages swapped in and major faults per second since the last read."""

    swap_in_per_s: float | None
    major_faults_per_s: float | None


def parse_psi(text: str) -> PsiMemory:
    """'some avg10=1.00 ...' / 'full avg10=0.50 ...' lines -> avg10 per kind."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        kind, *fields = line.split()
        for key, _, value in (item.partition("=") for item in fields):
            if key == "avg10":
                with contextlib.suppress(ValueError):
                    found[kind] = float(value)
    return PsiMemory(found.get("some"), found.get("full"))


def read_psi(proc_root: Path | str = "/proc") -> PsiMemory:
    """Memory PSI, or Nones where the kernel has PSI off."""
    return parse_psi(read_text(Path(proc_root) / "pressure/memory") or "")


def parse_vmstat(text: str, keys: tuple[str, ...] = ("pswpin", "pgmajfault")) -> dict[str, int]:
    """The named counters of /proc/vmstat (found by name: the file has ~170 lines)."""
    return {name: value for name in keys
            if (value := procfs.line_number(text, name + " ")) is not None}


class VmstatReader:
    """Turns /proc/vmstat's pswpin and pgmajfault counters into per-second rates."""

    def __init__(self, proc_root: Path | str = "/proc",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(proc_root) / "vmstat"
        self._file = procfs.KeptFile(str(self.path))
        self._clock = clock
        self._last: tuple[float, dict[str, int]] | None = None

    def read(self) -> VmstatRates:
        """Rates since the last read; Nones on the first read or when a counter went backwards."""
        now = self._clock()
        text = self._file.text()
        if text is None:
            return VmstatRates(None, None)
        values = parse_vmstat(text)
        last, self._last = self._last, (now, values)
        if last is None or now <= last[0]:
            return VmstatRates(None, None)
        rates = [None if (old := last[1].get(k)) is None or (new := values.get(k)) is None
                 or new < old else (new - old) / (now - last[0]) for k in ("pswpin", "pgmajfault")]
        return VmstatRates(*rates)


def next_delay(period_s: float, cost_s: float, budget: float = CPU_BUDGET) -> float:
    """Seconds until the next canary: the period, stretched so its cost stays within budget."""
    return max(period_s, cost_s / budget)


def pressure_of(bandwidth: float, peak: float) -> float:
    """1 - bandwidth/peak, clamped to 0..1."""
    return 0.0 if peak <= 0 else min(1.0, max(0.0, 1.0 - bandwidth / peak))


class Quiet(Protocol):
    """QuietMeter's face (idlepeak.py): start a window, then why it was not quiet (None: it was)."""

    def start(self) -> None: ...
    def verdict(self) -> str | None: ...


class PeakMemory(Protocol):
    """PeakStore's face: the stored idle peak, and keeping a higher one."""

    def load(self) -> Calibration | None: ...
    def save(self, calibration: Calibration) -> Calibration: ...


class CanaryEstimator:
    """Runs the canary when due and keeps a smoothed pressure against a ratcheting idle peak:
    `memory`'s (an earlier quiet run) or a calibration on a thread the first tick starts. One
    `quiet` calls busy is no idle peak: `unsettled` says why until a quiet retry."""

    def __init__(self, canary: Canary, period_s: float = DEFAULT_PERIOD_S,
                 clock: Callable[[], float] = time.monotonic,
                 calibration_budget_s: float = CALIBRATION_BUDGET_S,
                 calibrator: Calibrator = calibrate, quiet: Quiet | None = None,
                 memory: PeakMemory | None = None) -> None:
        self.canary, self.period_s, self._clock = canary, period_s, clock
        self._budget_s, self._calibrator = calibration_budget_s, calibrator
        self._quiet, self._memory = quiet, memory
        self.calibration: Calibration | None = None
        self.failure: str | None = None
        self.unsettled: str | None = None
        self.memory_problem: str | None = None
        self.origin = "measured at start"
        self.bandwidth: float | None = None
        self.pressure: float | None = None
        self.peak = self._kept_peak = self._due = self._retry_at = self._last_cost = 0.0
        self.runs = 0
        self._recent: deque[float] = deque(maxlen=5)
        self._busy = threading.Lock()
        self._stop = threading.Event()
        self.thread: threading.Thread | None = None  # calibration's, once started
        stored = memory.load() if memory is not None else None
        if stored is not None:
            self.calibration, self.peak = stored, stored.single_bytes_per_s
            self._kept_peak = self.peak
            self.origin = "kept from an earlier quiet run"
            self._due = clock()

    @property
    def calibrating(self) -> bool:
        """True until calibration has a result or has failed."""
        return self.calibration is None and self.failure is None

    def start_calibration(self) -> None:
        """Start the calibration thread unless one runs, it is settled, failed or closed."""
        running = self.thread is not None and self.thread.is_alive()
        settled = self.calibration is not None and self.unsettled is None
        if running or settled or self.failure is not None or self._stop.is_set():
            return
        self.thread = threading.Thread(target=self._calibrate_quietly, daemon=True,
                                        name="gputop-membw-calibrate")
        self.thread.start()

    def _calibrate_quietly(self) -> None:
        try:
            self.calibrate()
        except (OSError, ValueError, MemoryError) as exc:
            if not self._stop.is_set():
                self.failure = f"canary unavailable: {exc}"

    def calibrate(self) -> Calibration | None:
        """Measure the idle peak now, on this thread, unless a settled one is there."""
        with self._busy:
            if self._stop.is_set() or (self.calibration is not None and self.unsettled is None):
                return self.calibration
            if self._quiet is not None:
                self._quiet.start()
            result = self._calibrator(self.canary, self._budget_s, self._stop)
            if self._stop.is_set():
                return self.calibration
            self.unsettled = self._quiet.verdict() if self._quiet is not None else None
            before = self.calibration
            self.calibration = result if before is None else merge_peaks(before, result)
            self.peak = max(self.peak, result.single_bytes_per_s)
            if before is None:
                self._due = self._clock()  # the first canary is due at once
            if self.unsettled is not None:
                self._retry_at = self._clock() + RECALIBRATE_AFTER_S
            else:
                if before is not None:
                    self.origin = "measured at a quiet moment"
                self._keep(self.calibration)
            return self.calibration

    def _keep(self, calibration: Calibration) -> None:
        """Store a quiet peak (upward only); a refusal is reported, never raised."""
        if self._memory is None:
            return
        try:
            kept = self._memory.save(calibration._replace(single_bytes_per_s=self.peak))
        except OSError as exc:
            self.memory_problem = f"idle peak not kept: {exc}"
            return
        self.memory_problem = None
        self._kept_peak = self.peak = max(self.peak, kept.single_bytes_per_s)

    def wait_calibrated(self, timeout: float | None = None) -> bool:
        """Wait for the calibration thread; True when a calibration is there."""
        if self.thread is not None:
            self.thread.join(timeout)
        return self.calibration is not None

    def tick(self) -> None:
        """Run one canary if it is due; never waits (the first tick starts calibration)."""
        if self.calibration is None:
            self.start_calibration()
            return
        now = self._clock()
        if self.unsettled is not None and now >= self._retry_at:
            self.start_calibration()
        if now < self._due or not self._busy.acquire(blocking=False):
            return
        try:
            self._measure()
        finally:
            self._busy.release()
        self._due = now + next_delay(self.period_s, self._last_cost)

    def measure(self) -> float:
        """Run one canary now and fold it into the pressure; returns its raw pressure."""
        with self._busy:
            return self._measure()

    def _measure(self) -> float:
        copies = FIRST_COPIES if self.runs == 0 else 1  # --once has only this one reading
        if self._quiet is not None and self.runs == 0:
            self._quiet.start()
        results = [self.canary.copy() for _ in range(copies)]
        bandwidth = statistics.median(b for b, _ in results)
        cost = sum(c for _, c in results)
        self._last_cost, self.bandwidth = cost, bandwidth
        self.runs += 1
        self._recent.append(bandwidth)
        if len(self._recent) == self._recent.maxlen:
            # A canary faster than the calibrated peak means calibration ran under load.
            self.peak = max(self.peak, statistics.median(self._recent))
            self._keep_if_quiet()
        raw = pressure_of(bandwidth, self.peak)
        self.pressure = raw if self.pressure is None else (
            SMOOTHING * raw + (1 - SMOOTHING) * self.pressure)
        return raw

    def _keep_if_quiet(self) -> None:
        """Store a peak that rose by KEEP_RISE over a quiet window since the last canary."""
        quiet = self._quiet
        if quiet is None or self.calibration is None:
            return
        rose = self.peak > self._kept_peak * (1 + KEEP_RISE)
        if rose and self.unsettled is None and quiet.verdict() is None:
            self._keep(self.calibration)
        quiet.start()

    def close(self, timeout: float = 2.0) -> None:
        """Stop and join the calibration thread, then unmap the canary."""
        self._stop.set()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout)
        self.canary.close()

