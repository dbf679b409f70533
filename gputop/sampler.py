"""Owns the sources and turns one tick of them into one immutable Frame, on its own thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from gputop.model import Advice, Frame
from gputop.sources.base import (
    AttachSource,
    GpuSource,
    HostSource,
    MemoryBandwidthSource,
    ProcessSource,
)

Advisor = Callable[[Frame], tuple[Advice, ...]]
FrameCallback = Callable[[Frame], None]


@dataclass(frozen=True)
class LaterSources:
    """Sources a live view can add after its first paint (they cost ~50 ms to import)."""

    membw: MemoryBandwidthSource | None = None
    attach: AttachSource | None = None
    advisor: Advisor | None = None


FIRST_GAP_S = 0.15


class Sampler:
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
    ) -> None:
        self.gpu = gpu
        self.host = host
        self.processes = processes
        self.membw = membw
        self.attach_source = attach
        self.advisor = advisor
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._paused = False
        self._last_sample_time: float | None = None
        self._later: Callable[[], LaterSources] | None = None

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
            gpu = self.gpu.sample()
            host = self.host.sample()
            probe_pids = (
                self.attach_source.probe_pids() if self.attach_source else frozenset()
            )
            processes, trainers = self.processes.sample(gpu, probe_pids)
            membw = self.membw.sample() if self.membw else None
            attached = self.attach_source.sample() if self.attach_source else ()
            frame = Frame(
                time=now,
                interval_s=interval,
                host=host,
                gpu=gpu,
                processes=processes,
                trainers=trainers,
                memory_bandwidth=membw,
                attached=attached,
            )
            advice = self.advisor(frame) if self.advisor is not None else ()
            return replace(frame, advice=advice, sample_cost_s=time.perf_counter() - started)

    def prime(self) -> None:
        """Take a first, throw-away sample so the next one already has meaningful rates."""
        self.sample()

    def wait(self, seconds: float) -> None:
        """Sleep for `seconds` unless the sampler is stopped first."""
        self._stop.wait(seconds)

    def first_frame(self) -> Frame:
        """Two samples close together: CPU-sorted rows within a fraction of a second."""
        self.prime()
        self._stop.wait(FIRST_GAP_S)
        return self.sample()

    def defer(self, build: Callable[[], LaterSources]) -> None:
        """Leave some sources to `complete()`, so the first frames come sooner."""
        self._later = build

    def complete(self) -> None:
        """Build and add the deferred sources (after a first tick, memory bandwidth reads now)."""
        build, self._later = self._later, None
        if build is None:
            return
        later = build()
        with self._lock:
            if later.membw is not None and self._last_sample_time is not None:
                later.membw.sample()  # like prime(): the next tick has a rate
            self.membw = later.membw or self.membw
            self.attach_source = later.attach or self.attach_source
            self.advisor = later.advisor or self.advisor

    def attach(self, pid: int) -> None:
        """Start reading the ring of trainer `pid` from the next tick on."""
        if self.attach_source is None:
            raise ValueError("no attach source")
        self.attach_source.attach(pid)
        self._wake.set()

    def set_interval(self, seconds: float) -> None:
        """Change the refresh period; takes effect from the next tick."""
        self.interval_s = max(0.1, seconds)
        self._wake.set()

    @property
    def paused(self) -> bool:
        """Whether the background thread is holding off new frames."""
        return self._paused

    def set_paused(self, paused: bool) -> None:
        """Pause or resume the background ticks."""
        self._paused = paused
        self._wake.set()

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
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, args=(on_frame, first_gap_s, on_prime), name="gputop-sampler",
            daemon=True,
        )
        self._thread.start()

    def _run(
        self, on_frame: FrameCallback, first_gap_s: float, on_prime: FrameCallback | None
    ) -> None:
        primed = self.sample()
        if on_prime is not None:
            on_prime(primed)
        delay = first_gap_s
        while not self._stop.is_set():
            self._wake.clear()
            self._wake.wait(delay)
            if self._stop.is_set():
                break
            delay = self.interval_s
            if self._paused:
                continue
            on_frame(self.sample())

    def stop(self) -> None:
        """Stop the thread and close the sources."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None
        self.close()

    def close(self) -> None:
        """Release what the sources hold (NVML handles, perf fds, ring mappings)."""
        for source in (self.gpu, self.processes, self.membw, self.attach_source):
            if source is not None:
                source.close()

