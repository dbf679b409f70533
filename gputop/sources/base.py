"""The interfaces the sampler owns its sources through; tests inject their own."""

from __future__ import annotations

from typing import Protocol

from gputop.model import (
    AttachState,
    GpuReport,
    HostSample,
    MemoryBandwidthSample,
    ProcessSample,
    TrainerGroup,
)


class GpuSource(Protocol):
    """NVML or simulated devices."""

    def sample(self) -> GpuReport: ...

    def close(self) -> None: ...


class HostSource(Protocol):
    """Host CPU, memory and swap."""

    def sample(self) -> HostSample: ...


class ProcessSource(Protocol):
    """All processes, GPU memory joined in, roles assigned, workers grouped under trainers."""

    def sample(
        self, gpu: GpuReport, probe_pids: frozenset[int]
    ) -> tuple[tuple[ProcessSample, ...], tuple[TrainerGroup, ...]]: ...

    def close(self) -> None: ...


class MemoryBandwidthSource(Protocol):
    """Host memory-bandwidth pressure from the best source allowed here."""

    def sample(self) -> MemoryBandwidthSample: ...

    def close(self) -> None: ...


class AttachSource(Protocol):
    """Rings of probed trainers: which PIDs have one, and what the attached ones say."""

    def probe_pids(self) -> frozenset[int]: ...

    def attach(self, pid: int) -> None: ...

    def sample(self) -> tuple[AttachState, ...]: ...

    def close(self) -> None: ...
