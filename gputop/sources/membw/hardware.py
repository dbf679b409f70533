"""What the hardware rungs share (the traffic they report, counter arithmetic, the PMUs listed)
and the first rung, resctrl Memory Bandwidth Monitoring: mbm_*_bytes summed over groups.

Cheap to import: the ladder decides here, by PMU name, whether a perf rung can apply
before its module (and the perf_event layer under it) is imported.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, Protocol

from gputop.core.model import MemoryConsumer

COUNTER_MODULUS = 1 << 64
CACHE_LINE = 64.0  # bytes a cache miss or a CAS command moves
UNCORE_PREFIXES = ("uncore_imc", "amd_umc", "amd_df")
NO_UNCORE_PMU = "perf uncore: no memory-controller PMU"
NO_CORE_PMU = ("perf core: no core PMU (none in /sys/bus/event_source/devices: "
               "this machine or its hypervisor exposes no CPU counters)")
EVENTS = ("mbm_total_bytes", "mbm_local_bytes")
SKIP_DIRS = frozenset({"info", "mon_groups", "mon_data"})


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
    info: dict[str, str] = {}
    for line in (read_text(Path(proc_root) / "cpuinfo") or "").splitlines():
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


def parse_counter(text: str) -> int | str:
    """A counter file's value: an int, or the kernel's word for no value ('Unavailable', ...)."""
    word = text.strip()
    try:
        return int(word)
    except ValueError:
        return word or "empty"


def group_dirs(root: Path) -> list[Path]:
    """The default group and every control group (whose mon_data already sums its mon_groups)."""
    groups = [root] if (root / "mon_data").is_dir() else []
    try:
        children = sorted(root.iterdir())
    except OSError:
        return groups
    return groups + [c for c in children
                     if c.name not in SKIP_DIRS and (c / "mon_data").is_dir()]


def pick_event(root: Path) -> str | None:
    """mbm_total_bytes when the default group has it, else mbm_local_bytes, else None."""
    return next((e for e in EVENTS if any((root / "mon_data").glob(f"mon_L3_*/{e}"))), None)


def counter_files(root: Path, event: str) -> list[Path]:
    """One file per (group, L3 domain); sub-NUMA mon_sub_* folders are already in their parent."""
    return [f for group in group_dirs(root)
            for f in sorted((group / "mon_data").glob(f"mon_L3_*/{event}"))]


def read_counter(path: Path) -> int | str:
    """One counter file's value, or why it gave none ('unreadable' and the like)."""
    try:
        return parse_counter(path.read_text())
    except OSError as exc:
        return exc.strerror or "unreadable"


class ResctrlMeter:
    """Reads resctrl MBM counters; never mounts resctrl or creates groups."""

    source = "resctrl-mbm"
    confidence = "measured"

    def __init__(
        self, root: Path | str = "/sys/fs/resctrl", clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.root = Path(root)
        self.event = pick_event(self.root) or EVENTS[0]
        self.detail = "total" if self.event == "mbm_total_bytes" else "local socket only"
        self._clock = clock
        self._last: dict[str, int | str] = {}
        self._last_time: float | None = None

    def read(self) -> Traffic | None:
        """Total bytes/s over all groups and domains since the last read; None on the first."""
        now = self._clock()
        values = {str(f): read_counter(f) for f in counter_files(self.root, self.event)}
        last, last_time = self._last, self._last_time
        self._last, self._last_time = values, now
        if last_time is None or now <= last_time:
            return None
        problems = [new for new in values.values() if isinstance(new, str)]
        deltas = [counter_delta(old, new) for key, new in values.items()
                  if isinstance(new, int) and isinstance(old := last.get(key), int)]
        problems += ["reset"] * deltas.count(None)
        moved = [d for d in deltas if d is not None]
        note = (f"{len(problems)} of {len(values)} MBM counter(s) skipped: "
                f"{', '.join(sorted(set(problems)))}" if problems else None)
        if not moved:
            return Traffic(None, None, None, note or "no MBM counter readable")
        return Traffic(None, None, sum(moved) / (now - last_time), note)

    def close(self) -> None:
        """Nothing to release."""


def open_resctrl(root: Path | str = "/sys/fs/resctrl") -> tuple[ResctrlMeter | None, str]:
    """A meter when resctrl is mounted with an MBM event giving numbers, else None and why."""
    root = Path(root)
    if not (root / "mon_data").is_dir():
        return None, "resctrl: not mounted or no monitoring"
    if pick_event(root) is None:
        return None, "resctrl: no MBM event (mbm_total_bytes / mbm_local_bytes)"
    meter = ResctrlMeter(root)
    meter.read()
    if not any(isinstance(v, int) for v in meter._last.values()):
        words = ", ".join(sorted({str(v) for v in meter._last.values()})) or "no counters"
        return None, f"resctrl: MBM gives no numbers ({words})"
    return meter, meter.detail
