"""resctrl Memory Bandwidth Monitoring: mbm_*_bytes counters summed over groups, as bytes/s."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from gputop.sources.membw.hardware import Traffic, counter_delta

EVENTS = ("mbm_total_bytes", "mbm_local_bytes")
SKIP_DIRS = frozenset({"info", "mon_groups", "mon_data"})


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


def read_counters(files: list[Path]) -> dict[str, int | str]:
    """Path -> value for every counter file ('unreadable' and the like for those that fail)."""
    values: dict[str, int | str] = {}
    for path in files:
        try:
            values[str(path)] = parse_counter(path.read_text())
        except OSError as exc:
            values[str(path)] = exc.strerror or "unreadable"
    return values


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
        self._last: dict[str, int | str] | None = None
        self._last_time = 0.0

    def read(self) -> Traffic | None:
        """Total bytes/s over all groups and domains since the last read; None on the first."""
        now = self._clock()
        values = read_counters(counter_files(self.root, self.event))
        last, last_time = self._last, self._last_time
        self._last, self._last_time = values, now
        if last is None or now <= last_time:
            return None
        moved, used, problems = 0, 0, []
        for key, new in values.items():
            old = last.get(key)
            if isinstance(new, str):
                problems.append(new)
            elif isinstance(old, int):
                delta = counter_delta(old, new)
                if delta is None:
                    problems.append("reset")
                else:
                    moved, used = moved + delta, used + 1
        note = None
        if problems:
            words = ", ".join(sorted(set(problems)))
            note = f"{len(problems)} of {len(values)} MBM counter(s) skipped: {words}"
        if used == 0:
            return Traffic(None, None, None, note or "no MBM counter readable")
        return Traffic(None, None, moved / (now - last_time), note)

    def close(self) -> None:
        """Nothing to release."""


def open_resctrl(root: Path | str = "/sys/fs/resctrl") -> tuple[ResctrlMeter | None, str]:
    """A meter when resctrl is mounted with an MBM event giving numbers, else None and why."""
    root = Path(root)
    if not (root / "mon_data").is_dir():
        return None, "resctrl: not mounted or no monitoring"
    event = pick_event(root)
    if event is None:
        return None, "resctrl: no MBM event (mbm_total_bytes / mbm_local_bytes)"
    values = read_counters(counter_files(root, event))
    if not any(isinstance(v, int) for v in values.values()):
        words = ", ".join(sorted({str(v) for v in values.values()})) or "no counters"
        return None, f"resctrl: MBM gives no numbers ({words})"
    meter = ResctrlMeter(root)
    meter.read()
    return meter, meter.detail
