"""Owns the sources and turns one tick of them into one immutable Frame, on its own thread.

A source that raises never stops the tick: its part of the Frame is its last good one (or
empty), the Frame carries the error in one line, and the source is tried again after a
back-off that doubles with each failure in a row.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar

from gputop.core import debuglog
from gputop.core.model import (
    Advice,
    AttachState,
    Frame,
    GpuReport,
    HostSample,
    InputStraggler,
    ProcessSample,
    SourceError,
    SourceName,
    ThreadSample,
    TrainerGroup,
)
from gputop.frames.derive import Derivation, trainer_cpu
from gputop.frames.foreign import ForeignWatch
from gputop.frames.ticker import PausableTicks, Ticker
from gputop.sources.base import (
    AttachSource,
    GpuSource,
    HostSource,
    MemoryBandwidthSource,
    ProcessSource,
)
from gputop.sources.threads import ThreadReader

Advisor = Callable[[Frame], tuple[Advice, ...]]
FrameCallback = Callable[[Frame], None]
T = TypeVar("T")
# A tick's rows, trainer groups, and the rows with where each PID's row is in them
_Rows = tuple[tuple[ProcessSample, ...], tuple[TrainerGroup, ...],
              tuple[tuple[ProcessSample, ...], Mapping[int, int]] | None]



class FrameSink(Protocol):
    """Takes each Frame the sampler thread delivers (a recorder) without blocking it."""

    def submit(self, frame: Frame) -> SourceError | None:
        """Take `frame`; the sink's own error to show in this frame, if it has one."""
        ...


FIRST_GAP_S = 0.1  # the first %CPU covers this long: ten clock ticks, enough to sort by
MAX_BACKOFF_S = 30.0


@dataclass(frozen=True)
class DeferredSources:
    """Sources a live view adds after its first paint (they cost ~50 ms to import)."""

    membw: MemoryBandwidthSource | None = None
    attach: AttachSource | None = None
    advisor: Advisor | None = None


class _Guard(Generic[T]):
    """One source's failures in a row: the back-off, the last good value and the error."""

    def __init__(self, name: SourceName) -> None:
        self.name: SourceName = name
        self.failures = 0
        self.retry_at = 0.0
        self.last: T | None = None
        self.last_good: float | None = None
        self.error: SourceError | None = None

    def run(self, call: Callable[[], T], fallback: T, now: float, interval_s: float) -> T:
        """`call()`, or after a failure (and while backing off) the last good value."""
        if self.failures and now < self.retry_at:
            return self._stale(fallback, now)
        try:
            value = call()
        except Exception as exc:  # any source bug: the rest of the tick goes on
            self.failures += 1
            backoff = min(MAX_BACKOFF_S, interval_s * 2 ** (self.failures - 1))
            self.retry_at = now + backoff
            message = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            self.error = SourceError(self.name, message, self.failures, backoff, self.last_good)
            debuglog.log_exception(f"source {self.name} failed", exc)
            return self._stale(fallback, now)
        self.failures, self.error = 0, None
        self.last, self.last_good = value, now
        return value

    def _stale(self, fallback: T, now: float) -> T:
        if self.error is not None:
            self.error = replace(self.error, retry_in_s=max(0.0, self.retry_at - now))
        return fallback if self.last is None else self.last


class Sampler(PausableTicks):
    """Samples every source once per tick; the next tick is scheduled after the last one ends."""

    def __init__(
        self,
        gpu: GpuSource,
        host: HostSource,
        processes: ProcessSource,
        membw: MemoryBandwidthSource | None = None,
        attach: AttachSource | None = None,
        advisor: Advisor | None = None,
        interval_s: float = 1.0,
        looked_at: float | None = None,
    ) -> None:
        """`looked_at`: when `look_early` took a first look at `host` and `processes` (the
        monotonic clock): the first frame then needs no priming sample."""
        self.gpu = gpu
        self.host = host
        self.processes = processes
        self.membw = membw
        self.attach_source = attach
        self.advisor = advisor
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._ticker = Ticker("gputop-sampler")
        self._paused = False
        self._last_sample_time: float | None = None
        self._looked_at = looked_at
        self._deferred: Callable[[], DeferredSources] | None = None
        self._attach_requests: deque[tuple[bool, int]] = deque()  # (attach, pid); else detach
        self._derive = Derivation()
        self._foreign = ForeignWatch()
        self._last_frame: Frame | None = None
        self._failed_ticks = 0
        self._sinks: list[FrameSink] = []
        self._guards = {name: _Guard[object](name) for name in (
            "gpu", "host", "processes", "membw", "attach", "advice", "threads")}
        self._thread_pids: frozenset[int] = frozenset()  # whose threads to read (H)
        self._thread_reader: ThreadReader | None = None
        self._no_host = _unknown_host()  # the host's stand-in, made once, not every tick

    def sample(self) -> Frame:
        """Sample every source now into one Frame; rates cover the time since the last call."""
        with self._lock:
            started = time.perf_counter()
            now = time.time()
            interval = (
                self.interval_s
                if self._last_sample_time is None
                else max(1e-3, now - self._last_sample_time)
            )
            self._last_sample_time = now
            self._take_attach_requests()
            gpu = self._guarded("gpu", self.gpu.sample, _NO_GPU, now)
            host = self._guarded("host", self.host.sample, self._no_host, now)
            attach = self._guarded("attach", self._sample_attach, _NOT_ATTACHED, now)
            no_rows: _Rows = ((), (), None)
            processes, trainers, index = self._guarded(
                "processes", lambda: self._sample_processes(gpu, attach[0]), no_rows, now)
            raw = attach  # derived once the trainers' CPU is known (a quiet one may compute)
            attach = self._guarded(
                "attach", lambda: self._derived(raw, processes, trainers, index), raw, now)
            membw = (self._guarded("membw", self.membw.sample, None, now)
                     if self.membw is not None else None)
            foreign = self._foreign.found(gpu, processes, None if index is None else index[1],
                                          time.monotonic())
            threads = self._sample_threads(now)

            def frame(**late: Any) -> Frame:
                """The tick's Frame, built directly (replace() would cost more than this)."""
                return Frame(time=now, interval_s=interval, host=host, gpu=gpu,
                             processes=processes, trainers=trainers, memory_bandwidth=membw,
                             attached=attach[1], straggler=attach[2], process_index=index,
                             foreign_gpu_pids=foreign, threads=threads, **late)

            advice: tuple[Advice, ...] = ()
            if self.advisor is not None:
                advisor, measured = self.advisor, frame()  # what the advice is drawn from
                advice = self._guarded("advice", lambda: advisor(measured), (), now)
            errors = tuple(g.error for g in self._guards.values() if g.error is not None)
            return frame(advice=advice, errors=errors, sample_cost_s=time.perf_counter() - started)

    def _guarded(self, name: SourceName, call: Callable[[], T], fallback: T, now: float) -> T:
        guard: _Guard[T] = self._guards[name]  # type: ignore[assignment]
        return guard.run(call, fallback, now, self.interval_s)

    def _sample_attach(
        self,
    ) -> tuple[frozenset[int], tuple[AttachState, ...], InputStraggler | None]:
        """Which PIDs run the probe, and the attached trainers as their rings say (not derived)."""
        source = self.attach_source
        if source is None:
            return _NOT_ATTACHED
        probe_pids = source.probe_pids()
        source.remove_dead_rings()
        return probe_pids, source.sample(), None  # derived in `_derived`, after the processes

    def _derived(
        self, attach: tuple[frozenset[int], tuple[AttachState, ...], InputStraggler | None],
        rows: tuple[ProcessSample, ...], trainers: tuple[TrainerGroup, ...],
        index: tuple[tuple[ProcessSample, ...], Mapping[int, int]] | None,
    ) -> tuple[frozenset[int], tuple[AttachState, ...], InputStraggler | None]:
        """The attached trainers derived: steps classified, windows summarized, each one's
        state judged with its CPU this tick (and its workers'); and the straggler."""
        states = attach[1]
        cpu = trainer_cpu([s.pid for s in states], rows, None if index is None else index[1],
                          trainers) if states else None
        derived, straggler = self._derive.attached(states, time.monotonic_ns(), cpu)
        return attach[0], derived, straggler

    def _sample_processes(self, gpu: GpuReport, probe_pids: frozenset[int]) -> _Rows:
        """The rows with their roles, the trainer groups, and where each PID's row is (the
        GPU holders' with how long they used no CPU)."""
        scan = self.processes.sample(gpu)
        rows, trainers = self._derive.processes(scan, probe_pids, self.processes)
        rows = self._derive.holders_idle(rows, gpu, scan.positions, trainers, time.monotonic())
        return rows, trainers, None if scan.positions is None else (rows, scan.positions)

    def _sample_threads(self, now: float) -> Mapping[int, tuple[ThreadSample, ...]]:
        """The threads of the processes the table asked for; none read while none is asked."""
        pids = self._thread_pids
        if not pids:
            self._thread_reader = None  # a later H starts afresh
            return _NO_THREADS
        reader = self._thread_reader = self._thread_reader or ThreadReader()
        return self._guarded("threads", lambda: reader.read(sorted(pids)), _NO_THREADS, now)

    def show_threads(self, pids: Iterable[int]) -> None:
        """Read the userland threads of `pids` every tick (none: stop reading them); the
        first request comes with the next tick, at once."""
        wanted = frozenset(pids)
        first = wanted and not self._thread_pids
        self._thread_pids = wanted
        if first:
            self._ticker.wake()

    def _take_attach_requests(self) -> None:
        """Attach and detach requests from other threads, applied here, on the sampling
        thread, in the order they were made."""
        while self._attach_requests and self.attach_source is not None:
            attach, pid = self._attach_requests.popleft()
            if attach:
                self.attach_source.attach(pid)
            else:
                self.attach_source.detach(pid)

    def prime(self) -> None:
        """Take a first, throw-away sample so the next one already has meaningful rates."""
        self.sample()

    def wait(self, seconds: float) -> None:
        """Sleep for `seconds` unless the sampler is stopped first."""
        self._ticker.sleep(seconds)

    def first_frame(self) -> Frame:
        """Two samples close together: CPU-sorted rows within a fraction of a second."""
        self.prime()
        self._ticker.sleep(FIRST_GAP_S)
        return self.sample()

    def defer_sources(self, build: Callable[[], DeferredSources]) -> None:
        """Leave some sources to `add_deferred_sources()`, so the first frames come sooner."""
        self._deferred = build

    def add_deferred_sources(self) -> None:
        """Build and add the deferred sources (after a first tick, memory bandwidth reads now);
        with attach requests waiting for them, the next tick comes at once."""
        build, self._deferred = self._deferred, None
        if build is None:
            return
        later = build()
        with self._lock:
            if later.membw is not None and (self._last_sample_time is not None
                                            or self._looked_at is not None):
                later.membw.sample()  # like prime(): the next tick has a rate
            self.membw = later.membw or self.membw
            self.attach_source = later.attach or self.attach_source
            self.advisor = later.advisor or self.advisor
        if self._attach_requests:
            self._ticker.wake()

    def add_sink(self, sink: FrameSink) -> None:
        """Hand every frame the background thread delivers to `sink` too (before `on_frame`;
        the priming sample is not delivered): how a recorder sees what the screen shows."""
        self._sinks.append(sink)

    def _to_sinks(self, frame: Frame) -> Frame:
        """`frame` handed to each sink, with the lines of sinks that report an error."""
        errors = []
        for sink in self._sinks:
            try:
                error = sink.submit(frame)
            except Exception as exc:  # a sink's bug shows as its line, the ticks go on
                debuglog.log_exception("frame sink failed", exc)
                error = SourceError("record", f"{type(exc).__name__}: {exc}".splitlines()[0],
                                    1, self.interval_s, None)
            if error is not None:
                errors.append(error)
        return replace(frame, errors=(*frame.errors, *errors)) if errors else frame

    def attach(self, pid: int) -> None:
        """Read trainer `pid`'s ring from the next tick on (the request runs on that tick)."""
        if self.attach_source is None and self._deferred is None:
            raise ValueError("no attach source")
        self._attach_requests.append((True, pid))
        self._ticker.wake()

    def detach(self, pid: int) -> None:
        """Stop reading the job of trainer `pid` from the next tick on (nothing attached to
        it: nothing to do)."""
        self._attach_requests.append((False, pid))
        self._ticker.wake()

    def start(
        self,
        on_frame: FrameCallback,
        first_gap_s: float = FIRST_GAP_S,
        on_prime: FrameCallback | None = None,
    ) -> None:
        """Run ticks on a daemon thread and hand each Frame to `on_frame`.

        `on_prime` gets the priming sample, whose rates are not yet meaningful (a splash
        can show its GPUs and memory while the first real Frame is measured).
        """
        self._ticker.start(lambda: self._run(on_frame, first_gap_s, on_prime))

    def _run(
        self, on_frame: FrameCallback, first_gap_s: float, on_prime: FrameCallback | None
    ) -> None:
        if self._looked_at is None:
            primed = self._tick()
            if on_prime is not None and primed is not None:
                on_prime(primed)
            delay = first_gap_s
        else:  # the first look was taken early: the first frame is due first_gap_s after it
            delay = max(0.0, first_gap_s - (time.monotonic() - self._looked_at))
        for _ in self._ticker.turns():
            self._ticker.wait(delay)
            if self._ticker.stopped:
                break
            delay = self.interval_s
            if self._paused:
                continue
            frame = self._tick()
            if frame is not None:
                on_frame(self._to_sinks(frame) if self._sinks else frame)

    def _tick(self) -> Frame | None:
        """One sample; a bug outside the sources is shown on the last frame, never fatal."""
        try:
            self._last_frame = self.sample()
        except Exception as exc:
            debuglog.log_exception("sampler tick failed", exc)
            self._failed_ticks += 1
            if self._last_frame is None:
                return None
            error = SourceError("sampler", f"{type(exc).__name__}: {exc}".splitlines()[0][:200],
                                self._failed_ticks, self.interval_s, self._last_frame.time)
            return replace(self._last_frame, errors=(*self._last_frame.errors, error))
        self._failed_ticks = 0
        return self._last_frame

    def stop(self) -> None:
        """Stop the thread and close the sources."""
        self._ticker.stop()
        self.close()

    def close(self) -> None:
        """Release what the sources hold (NVML handles, perf fds, ring mappings)."""
        for source in (self.gpu, self.processes, self.membw, self.attach_source):
            if source is not None:
                source.close()


def look_early(host: HostSource, processes: ProcessSource) -> float:
    """A first look at the host and the processes (their rates need two), taken before the
    slower sources open and the UI loads: the first frame's %CPU then needs little waiting
    (`Sampler(looked_at=...)`). The monotonic time of the look."""
    host.sample()
    processes.sample(GpuReport(source="none"))
    return time.monotonic()


_NO_GPU = GpuReport(source="none", note="the GPU source failed before its first sample")
_NOT_ATTACHED: tuple[frozenset[int], tuple[AttachState, ...], InputStraggler | None] = (
    frozenset(), (), None)
_NO_THREADS: Mapping[int, tuple[ThreadSample, ...]] = {}


def _unknown_host() -> HostSample:
    """A host sample that knows only the host's name, for a host source that never worked."""
    return HostSample(
        hostname=socket.gethostname(), cpu_count=0, cpu_percent=None, per_cpu_percent=(),
        memory_total_bytes=0, memory_available_bytes=0, swap_total_bytes=0, swap_used_bytes=0,
        load_average=(0.0, 0.0, 0.0), uptime_s=0.0,
    )
