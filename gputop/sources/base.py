"""The interfaces the sampler owns its sources through; tests inject their own."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple, Protocol

from gputop.core.model import (
    AttachState,
    GpuReport,
    HostSample,
    MemoryBandwidthSample,
    ProcessSample,
)


class GpuSource(Protocol):
    """NVML or simulated devices."""

    def sample(self) -> GpuReport: ...

    def close(self) -> None: ...


class HostSource(Protocol):
    """Host CPU, memory and swap."""

    def sample(self) -> HostSample: ...


class ProcessScan(NamedTuple):
    """Every process as /proc shows it, roles not yet assigned (the sampler derives them)."""

    rows: tuple[ProcessSample, ...]
    changed: bool  # a process appeared, vanished, or changed its parent or name
    # Which: the rows that appeared or changed parent or name, and the PIDs that vanished
    # (None: not told, so a change may be anywhere)
    moved: tuple[ProcessSample, ...] | None = None
    gone: frozenset[int] = frozenset()
    # The PIDs of the rows with GPU memory or devices (None: not told, found from the rows)
    gpu_pids: frozenset[int] | None = None
    # Where each PID's row is in `rows` (None: not told); a mapping never changed once given
    positions: Mapping[int, int] | None = None


class ProcessWaits(NamedTuple):
    """What kept one process from running over the last interval (None: not known)."""

    runqueue_wait_percent: float | None  # runnable, waiting for a CPU; summed over threads
    io_wait_percent: float | None  # blocked on block I/O (delay accounting)
    read_bytes_per_s: float | None  # storage reads
    # The main thread running or waiting for a CPU (100 = the whole interval): near 100, the
    # process's own thread is what its loop waits for, not its inputs.
    main_thread_busy_percent: float | None = None
    # Major page faults per second: pages it touched that had to be read in from storage or
    # swap (/proc/PID/stat majflt), the process's own and no one else's.
    major_faults_per_s: float | None = None
    # The main thread runnable but waiting for a CPU (100 = the whole interval): the share of
    # wall time the trainer's own loop lost to whatever else held the cores.
    main_thread_wait_percent: float | None = None


class ProcessFacts(Protocol):
    """The few per-process facts read on demand (what deriving roles and waits asks)."""

    def waits(self, pids: Iterable[int]) -> dict[int, ProcessWaits]: ...

    def threads_named(self, pids: Iterable[int], comm: str) -> frozenset[int]: ...

    def torch_version(self, pid: int) -> str | None: ...


class ProcessSource(ProcessFacts, Protocol):
    """All processes with GPU memory joined in, and the few per-process facts read on demand."""

    def sample(self, gpu: GpuReport) -> ProcessScan: ...

    def close(self) -> None: ...


class MemoryBandwidthSource(Protocol):
    """Host memory-bandwidth pressure from the best source allowed here."""

    def sample(self) -> MemoryBandwidthSample: ...

    def close(self) -> None: ...


class AttachSource(Protocol):
    """Rings of probed trainers: which PIDs have one, and what the attached ones say."""

    def probe_pids(self) -> frozenset[int]: ...

    def remove_dead_rings(self) -> None: ...

    def attach(self, pid: int) -> None: ...

    def detach(self, pid: int) -> None: ...

    def sample(self) -> tuple[AttachState, ...]: ...

    def close(self) -> None: ...
