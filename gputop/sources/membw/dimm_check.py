"""The seed's DIMM case as a check: are the board's channels populated, evenly, at one speed?
(An empty channel or one slow module costs bandwidth while every other number looks normal.)
Where no slot list is readable, or the slot names do not say the channel, it is n/a and why."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from gputop.core.model import MemoryLayoutCheck
from gputop.sources.membw import dimm_slots, smbios
from gputop.sources.membw.dimm_slots import GiB, MemoryLayout, MemoryModule

MAX_SLOTS_PER_CHANNEL = 3  # DDR3-DDR5 boards carry at most three DIMMs per channel


def read_layout(
    udev_root: Path | str = "/run/udev/data",
    sys_root: Path | str = "/sys",
    dmidecode: Callable[[], str | None] | None = None,
) -> MemoryLayout | None:
    """The first source that lists modules: udev, DMI entries, the DMI table, dmidecode (run
    as root only, when /sys/firmware/dmi gave nothing and sys_root is this machine's), EDAC."""
    if dmidecode is None:
        dmidecode = smbios.run_dmidecode if Path(sys_root) == Path("/sys") else (lambda: None)
    udev = dimm_slots.read_udev(udev_root)
    if udev is not None and udev.modules:
        return udev
    readers: tuple[Callable[[], MemoryLayout | None], ...] = (
        lambda: smbios.read_dmi_entries(sys_root),
        lambda: smbios.read_dmi_table(sys_root),
        lambda: smbios.parse_dmidecode(text) if (text := dmidecode()) else None,
        lambda: dimm_slots.read_edac(sys_root),
    )
    for reader in readers:
        layout = reader()
        if layout is not None and layout.modules:
            return layout
    return udev


def unreadable_reason() -> str:
    """Why no module list was found, and what would help."""
    root = "" if os.geteuid() == 0 else "; as root, /sys/firmware/dmi or dmidecode may tell"
    return ("no memory-module list readable (no udev DMI data, SMBIOS memory records, "
            f"dmidecode or EDAC){root}")


def slot_names(layout: MemoryLayout) -> dict[MemoryModule, str]:
    """Each slot's name: its locator, with the bank locator where locators repeat."""
    slots = [*layout.modules, *layout.empty]
    repeats = Counter(m.locator for m in slots)
    return {m: (m.locator if repeats[m.locator] == 1 or not m.bank_locator
                else f"{m.bank_locator}/{m.locator}") for m in slots}


def _group(layout: MemoryLayout, channel: str) -> str:
    """The socket (or controller) a channel belongs to; EDAC's controllers are one machine."""
    return "" if layout.source == "edac" else channel.rpartition("/")[0]


def channel_findings(
    layout: MemoryLayout, names: dict[MemoryModule, str]
) -> tuple[list[str], list[str], int, int]:
    """Empty and uneven channels per socket -> (findings, slots to fill, populated, total)."""
    findings: list[str] = []
    fill: list[str] = []
    populated_total = channels_total = 0
    groups = sorted({_group(layout, m.channel or "") for m in layout.modules})
    for group in groups:
        slots = [m for m in (*layout.modules, *layout.empty)
                 if m.channel and _group(layout, m.channel) == group]
        channels = sorted({m.channel for m in slots if m.channel})
        used = {m.channel: [x for x in layout.modules if x.channel == m.channel]
                for m in layout.modules if m.channel and _group(layout, m.channel) == group}
        empty = [c for c in channels if c not in used]
        where = f" on {group}" if group else ""
        populated_total += len(used)
        channels_total += len(channels)
        if empty:
            named = [names[m] for m in slots if m.channel in empty]
            findings.append(f"{len(used)} of {len(channels)} channels populated{where}: "
                            f"channel{'s' if len(empty) > 1 else ''} {', '.join(empty)} empty "
                            f"(slot{'s' if len(named) > 1 else ''} {', '.join(named)})")
            fill += [next(names[m] for m in slots if m.channel == c) for c in empty]
        sizes = {c: sum(m.size_bytes or 0 for m in ms) for c, ms in used.items()}
        if len(set(sizes.values())) > 1:
            usual = Counter(sizes.values()).most_common(1)[0][0]
            odd = sorted(c for c, size in sizes.items() if size != usual)
            findings.append(
                f"channels hold different amounts{where}: "
                + "; ".join(f"{c} {sizes[c] / GiB:g} GiB" for c in odd)
                + f" where the others hold {usual / GiB:g} GiB (slots "
                + ", ".join([names[m] for c in odd for m in used[c]]) + ")")
    return findings, fill, populated_total, channels_total


def speed_findings(layout: MemoryLayout, names: dict[MemoryModule, str]) -> tuple[list[str],
                                                                                  list[str]]:
    """Modules rated or running at different speeds -> (findings, slots of the slow ones)."""
    rated = {m: m.speed_mts for m in layout.modules if m.speed_mts}
    running = {m: m.configured_speed_mts for m in layout.modules if m.configured_speed_mts}
    speeds = next((s for s in (rated, running) if len(set(s.values())) > 1), None)
    if speeds is None:
        return [], []
    fastest = max(speeds.values())
    slower = [names[m] for m, mts in speeds.items() if mts < fastest]
    if speeds is rated:
        runs = min(running.values()) if running else min(rated.values())
        return ["mixed module speeds: " + ", ".join(
            f"{n} rated {mts} MT/s" for mts, n in sorted(Counter(rated.values()).items()))
            + f"; slower ones in {', '.join(slower)}; all run at {runs} MT/s"], slower
    return [f"modules run at different speeds: {', '.join(slower)} at {min(running.values())} "
            f"MT/s, the others at {fastest} MT/s"], slower


def channels_unknown(layout: MemoryLayout, names: dict[MemoryModule, str]) -> str | None:
    """Why the slot names cannot be read as channels (a name without one; a "channel" of more
    slots than DDR allows, as Dell's A1..A12 name a socket's), or None when they can."""
    per_channel = Counter(m.channel for m in (*layout.modules, *layout.empty) if m.channel)
    if per_channel:
        channel, count = per_channel.most_common(1)[0]
        if count > MAX_SLOTS_PER_CHANNEL:
            return (f"the slot names put {count} slots in '{channel}', more than a memory "
                    f"channel has ({MAX_SLOTS_PER_CHANNEL}): they do not name channels")
    unnamed = [m for m in layout.modules if m.channel is None]
    if unnamed:
        return f"the slot names do not say the channel (e.g. '{names[unnamed[0]]}')"
    return None


def check_layout(layout: MemoryLayout | None) -> MemoryLayoutCheck:
    """Judge the layout; n/a (with why) where the modules or their channels are unknown."""
    if layout is None or not layout.modules:
        return MemoryLayoutCheck("n/a", reason=unreadable_reason())
    names = slot_names(layout)
    speed, slow = speed_findings(layout, names)
    usual = Counter(dimm_slots.module_kind(m, m.speed_mts) or "unknown module"
                    for m in layout.modules).most_common(1)[0][0]
    why = channels_unknown(layout, names)
    if why is not None:
        if not speed:
            return MemoryLayoutCheck("n/a", layout.source, reason=why)
        return MemoryLayoutCheck("unbalanced", layout.source, findings=tuple(speed),
                                 slow_slots=tuple(slow), usual_module=usual, reason=why)
    channels, fill, populated, total = channel_findings(layout, names)
    findings = (*channels, *speed)
    return MemoryLayoutCheck(
        "unbalanced" if findings else "balanced", layout.source, populated, total,
        findings, tuple(fill), tuple(slow), usual)
