"""Picks the GPU source: a simulated scenario when asked, else NVML, else none (CPU-only).

The simulated source is imported only when asked for: a live view on real GPUs starts
without it (its scenarios cost ~10 ms to import, on the way to the first frame).
"""

from __future__ import annotations

from collections.abc import Iterable

from gputop.sources.base import GpuSource
from gputop.sources.nvml import open_nvml

__all__ = ["DEFAULT_SIMULATED_COUNT", "open_gpu_source"]

DEFAULT_SIMULATED_COUNT = 4


def open_gpu_source(
    simulate: str | None = None,
    count: int = DEFAULT_SIMULATED_COUNT,
    seed: int = 0,
    owner_pids: Iterable[int] = (),
) -> GpuSource:
    """The simulated scenario `simulate`, or real GPUs over NVML (a "none" source without them).

    Raises ValueError, with a one-line message, for an unknown scenario or a bad count.
    """
    if simulate is None:
        return open_nvml()
    from gputop.sources.simulated import SimulatedGpuSource, check_count, check_scenario

    return SimulatedGpuSource(
        check_scenario(simulate), check_count(count), seed=seed, owner_pids=owner_pids
    )
