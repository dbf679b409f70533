"""What the hardware rungs share: the traffic they report, counter arithmetic, the PMUs listed.

Cheap to import: the ladder decides here, by PMU name, whether a perf rung can apply
before its module (and the perf_event layer under it) is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Protocol

from gputop.core.model import MemoryConsumer

COUNTER_MODULUS = 1 << 64
CACHE_LINE = 64.0  # bytes a cache miss or a CAS command moves
UNCORE_PREFIXES = ("uncore_imc", "amd_umc", "amd_df")
NO_UNCORE_PMU = "perf uncore: no memory-controller PMU"
NO_CORE_PMU = ("perf core: no core PMU (none in /sys/bus/event_source/devices: "
               "this machine or its hypervisor exposes no CPU counters)")


class Traffic(NamedTuple):
    """DRAM bytes/s over the last interval (None: a side the meter cannot split), and who."""

    read_bytes_per_s: float | None
    write_bytes_per_s: float | None
    total_bytes_per_s: float | None
    note: str | None = None
    top: tuple[MemoryConsumer, ...] = ()


class TrafficMeter(Protocol):
    """A hardware source of DRAM bytes: resctrl MBM, perf uncore or core PMU counters."""

    source: str
    confidence: str  # "measured" (memory-controller bytes) or "approximate" (cache misses)
    detail: str

    def read(self) -> Traffic | None: ...

    def close(self) -> None: ...


def counter_delta(old: int, new: int, modulus: int = COUNTER_MODULUS) -> int | None:
    """new - old for a monotonic counter; a wrap past `modulus` is undone, a reset gives None."""
    if new >= old:
        return new - old
    if old >= modulus // 2 and new < modulus // 2:
        return new + modulus - old
    return None


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


def parse_cpulist(text: str) -> tuple[int, ...]:
    """'0-2,8' -> (0, 1, 2, 8); an empty or bad list gives ()."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            cpus.extend(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            return ()
    return tuple(cpus)


def read_text(path: Path) -> str | None:
    """A sysfs or procfs file's text, or None when unreadable."""
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def read_cpu_id(proc_root: Path | str = "/proc") -> tuple[str, int, int] | None:
    """(vendor_id, cpu family, model) of the first CPU in /proc/cpuinfo."""
    text = read_text(Path(proc_root) / "cpuinfo")
    if text is None:
        return None
    info: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if info:
                break
            continue
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    try:
        return info["vendor_id"], int(info["cpu family"]), int(info["model"])
    except (KeyError, ValueError):
        return None
