"""Which PMUs the kernel lists, by name only: cheap enough to decide whether a perf rung can
apply before its module (and the perf_event layer under it) is imported."""

from __future__ import annotations

from pathlib import Path

UNCORE_PREFIXES = ("uncore_imc", "amd_umc", "amd_df")
NO_UNCORE_PMU = "perf uncore: no memory-controller PMU"
NO_CORE_PMU = ("perf core: no core PMU (none in /sys/bus/event_source/devices: "
               "this machine or its hypervisor exposes no CPU counters)")


def pmu_dir(sys_root: Path | str = "/sys") -> Path:
    """Where the kernel lists its PMUs."""
    return Path(sys_root) / "bus/event_source/devices"


def pmu_names(sys_root: Path | str = "/sys") -> list[str]:
    """The PMUs' names, sorted; [] when the directory is unreadable."""
    try:
        return sorted(e.name for e in pmu_dir(sys_root).iterdir())
    except OSError:
        return []


def is_uncore_pmu(name: str) -> bool:
    """A memory-controller or data-fabric PMU (Intel IMC, AMD UMC, AMD DF)."""
    return name.startswith(UNCORE_PREFIXES)


def is_core_pmu(name: str) -> bool:
    """A core PMU: 'cpu' (x86), 'cpu_core'/'cpu_atom' (hybrid), 'armv8_*'."""
    return name == "cpu" or name.startswith(("cpu_", "armv"))
