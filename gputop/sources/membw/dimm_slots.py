"""Which memory modules sit in which channels (udev DMI data, EDAC), and what peak they promise."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

GiB = 1 << 30


@dataclass(frozen=True)
class MemoryModule:
    """One slot: a populated one, or an empty one (no size) where a source lists those."""

    locator: str
    bank_locator: str = ""
    size_bytes: int | None = None
    mem_type: str | None = None
    speed_mts: int | None = None
    configured_speed_mts: int | None = None
    data_width_bits: int | None = None
    channel: str | None = None

    @property
    def mts(self) -> int | None:
        """The speed it runs at: configured if known, else rated."""
        return self.configured_speed_mts or self.speed_mts


@dataclass(frozen=True)
class MemoryLayout:
    """Populated modules, empty slots, slot count and channels; `source` says where it was read."""

    source: str
    modules: tuple[MemoryModule, ...]
    slots: int | None = None
    empty: tuple[MemoryModule, ...] = ()

    @property
    def channels(self) -> tuple[str, ...] | None:
        """Distinct populated channels, or None when a module's channel is unknown."""
        names = [m.channel for m in self.modules]
        if not names or any(n is None for n in names):
            return None
        return tuple(sorted({n for n in names if n is not None}))

    @property
    def channel_count(self) -> int:
        """Populated channels; one per module when the locators do not say."""
        channels = self.channels
        return len(channels) if channels is not None else len(self.modules)

    @property
    def expected_peak_bytes_per_s(self) -> float | None:
        """Theoretical peak: per channel, MT/s x bus width (8 bytes), at the slowest module."""
        if not self.modules or any(m.mts is None for m in self.modules):
            return None
        by_channel: dict[str, list[MemoryModule]] = {}
        for i, module in enumerate(self.modules):
            key = module.channel if self.channels is not None else str(i)
            by_channel.setdefault(key or str(i), []).append(module)
        return sum(min(m.mts or 0 for m in ms) * 1e6 * min(m.data_width_bits or 64 for m in ms) / 8
                   for ms in by_channel.values())

    def summary(self) -> str:
        """'1 of 4 slots: 16 GiB DDR4 3200 MT/s; 1 channel (A)'."""
        count = len(self.modules)
        head = f"{count} of {self.slots} slots" if self.slots else f"{count} module(s)"
        kinds = Counter(module_kind(m, m.mts, "? GiB") for m in self.modules)
        body = ", ".join(k if n == 1 else f"{n} x {k}" for k, n in kinds.items())
        channels = self.channels
        chan = ("channels unknown" if channels is None
                else f"{counted(len(channels), 'channel')} ({', '.join(channels)})")
        slow = [m for m in self.modules if m.configured_speed_mts and m.speed_mts
                and m.configured_speed_mts < m.speed_mts]
        tail = (f"; runs at {slow[0].configured_speed_mts} of {slow[0].speed_mts} MT/s"
                if slow else "")
        return f"{head}: {body}; {chan}{tail}"


def module_kind(module: MemoryModule, mts: int | None, no_size: str = "") -> str:
    """'32 GiB DDR4 3200 MT/s': what is known of a module, at the speed given."""
    size = f"{module.size_bytes / GiB:g} GiB" if module.size_bytes else no_size
    return " ".join(filter(None, (size, module.mem_type, f"{mts} MT/s" if mts else "")))


def counted(n: int, thing: str) -> str:
    """'1 channel' / '2 channels'."""
    return f"{n} {thing}{'s' if n != 1 else ''}"


CHANNEL_PATTERNS = (
    re.compile(r"CHANNEL[\s_-]*([A-Z0-9]+)"),
    re.compile(r"DIMM[\s_-]*([A-Z])[\s_-]*\d"),
    re.compile(r"(?:^|[\s_-])([A-Z])\d$"),
)
PREFIX_PATTERNS = (
    re.compile(r"(?:CPU|SOCKET|NODE|^P)[\s_]*(\d+)"),
    re.compile(r"CONTROLLER[\s_-]*(\d+)"),
)


def channel_of(locator: str, bank_locator: str = "") -> str | None:
    """'ChannelA-DIMM0' / 'DIMM_B1' / 'P0 CHANNEL A' -> 'P0/A' style key; None if unnamed."""
    for text in (locator.upper(), bank_locator.upper()):
        for pattern in CHANNEL_PATTERNS:
            match = pattern.search(text)
            if match:
                both = f"{bank_locator.upper()} {locator.upper()}".strip()
                found = [m.group(0).replace(" ", "") for p in PREFIX_PATTERNS
                         if (m := p.search(both) or p.search(locator.upper()))]
                return "/".join([*found, match.group(1)])
    return None


def strip_common_prefix(modules: list[MemoryModule]) -> list[MemoryModule]:
    """Drop a socket/controller prefix every module shares: 'CPU1/A', 'CPU1/B' -> 'A', 'B'."""
    prefixes = {m.channel.rpartition("/")[0] for m in modules if m.channel}
    if len(prefixes) != 1 or not all(m.channel for m in modules):
        return modules
    return [replace(m, channel=(m.channel or "").rpartition("/")[2]) for m in modules]


def finish_layout(source: str, slots: list[tuple[MemoryModule, bool]],
                  count: int | None = None) -> MemoryLayout | None:
    """The (slot, populated) pairs as a layout, each slot's channel read from its locators and
    shared prefixes dropped; None when there are no slots."""
    if not slots:
        return None
    modules = [m for m, full in slots if full]
    named = strip_common_prefix([replace(m, channel=channel_of(m.locator, m.bank_locator))
                                 for m in [*modules, *(m for m, full in slots if not full)]])
    return MemoryLayout(source, tuple(named[:len(modules)]), count or len(slots),
                        tuple(named[len(modules):]))


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


def parse_udev(text: str) -> MemoryLayout | None:
    """udev's +dmi:id database (E:MEMORY_DEVICE_<n>_<FIELD>=...) -> layout, None if absent."""
    props: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("E:") and "=" in line:
            key, _, value = line[2:].partition("=")
            props[key] = value.strip()
    indices = sorted({
        int(m.group(1)) for k in props if (m := re.match(r"MEMORY_DEVICE_(\d+)_", k))
    })
    if not indices:
        return None
    slots: list[tuple[MemoryModule, bool]] = []
    for i in indices:
        def get(name: str, i: int = i) -> str | None:
            return props.get(f"MEMORY_DEVICE_{i}_{name}")

        size = _int(get("SIZE"))
        slot = MemoryModule(
            locator=get("LOCATOR") or f"slot {i}",
            bank_locator=get("BANK_LOCATOR") or "",
            size_bytes=size,
            mem_type=get("TYPE"),
            speed_mts=_int(get("SPEED_MTS")),
            configured_speed_mts=_int(get("CONFIGURED_SPEED_MTS")),
            data_width_bits=_int(get("DATA_WIDTH")),
        )
        full = get("PRESENT") != "0" and bool(size)
        slots.append((slot if full else replace(slot, size_bytes=None, mem_type=None), full))
    return finish_layout("udev", slots, _int(props.get("MEMORY_ARRAY_NUM_DEVICES")))


def read_udev(udev_root: Path | str = "/run/udev/data") -> MemoryLayout | None:
    """Layout from /run/udev/data/+dmi:id (world-readable; filled by udev's dmi_memory_id)."""
    try:
        return parse_udev((Path(udev_root) / "+dmi:id").read_text())
    except OSError:
        return None


def read_edac(sys_root: Path | str = "/sys") -> MemoryLayout | None:
    """Layout from EDAC (/sys/devices/system/edac/mc/mc*/dimm*): sizes and channels, no speeds;
    a channel of max_location's without a DIMM is an empty slot named after it."""
    modules: list[MemoryModule] = []
    empty: list[MemoryModule] = []
    slots: int | None = 0
    for mc in sorted(Path(sys_root).glob("devices/system/edac/mc/mc*")):
        channels, per_channel = _edac_shape(mc)
        slots = slots + channels * per_channel if slots is not None and per_channel else None
        seen: set[str] = set()
        for dimm in sorted(mc.glob("dimm*")):
            slot = _edac_dimm(dimm)
            if slot is None:
                continue
            seen.add(slot.channel or "")
            (modules if slot.size_bytes else empty).append(slot)
        empty += [MemoryModule(locator=f"{mc.name} channel {n}", channel=f"{mc.name}/{n}")
                  for n in range(channels) if f"{mc.name}/{n}" not in seen]
    if not modules:
        return None
    return MemoryLayout("edac", tuple(modules), slots or None, tuple(empty))


def _edac_dimm(dimm: Path) -> MemoryModule | None:
    """One EDAC dimm folder as a slot (size 0: empty), or None when unreadable."""
    try:
        size_mib = int((dimm / "size").read_text())
        location = (dimm / "dimm_location").read_text().strip()
    except (OSError, ValueError):
        return None
    try:
        mem_type = (dimm / "dimm_mem_type").read_text().strip()
    except OSError:
        mem_type = ""
    match = re.search(r"channel (\d+)", location)
    populated = size_mib > 0
    return MemoryModule(
        locator=f"{dimm.parent.name} {location}",
        size_bytes=size_mib << 20 if populated else None,
        mem_type=(mem_type.rsplit("-", 1)[-1] or None) if populated else None,
        channel=f"{dimm.parent.name}/{match.group(1)}" if match else None,
    )


def _edac_shape(mc: Path) -> tuple[int, int]:
    """(channels, slots per channel) from max_location: 'channel 1 slot 1' -> (2, 2); 0 where a
    layer is not named (AMD's 'csrow 7 channel 1' has no slots)."""
    try:
        layers = dict(re.findall(r"(\w+) (\d+)", (mc / "max_location").read_text()))
    except OSError:
        return 0, 0
    channel, slot = layers.get("channel"), layers.get("slot")
    return (int(channel) + 1 if channel else 0), (int(slot) + 1 if slot else 0)


def compare_peak(measured_bytes_per_s: float | None, layout: MemoryLayout | None) -> str | None:
    """One sentence comparing the measured peak with what the populated modules should give."""
    if layout is None or not layout.modules:
        return None
    warnings = []
    if layout.channel_count == 1 and (layout.slots or 0) > 1:
        warnings.append(f"one channel populated ({len(layout.modules)} of {layout.slots} slots)")
    expected = layout.expected_peak_bytes_per_s
    if measured_bytes_per_s is None or not expected:
        return "; ".join(warnings) or None
    speeds = sorted({m.mts for m in layout.modules if m.mts})
    speed = f"{speeds[0]} MT/s" if len(speeds) == 1 else f"{speeds[0]}-{speeds[-1]} MT/s"
    what = f"{counted(len(layout.modules), 'module')} at {speed}"
    if layout.channels is not None and layout.channel_count != len(layout.modules):
        what += f" in {counted(layout.channel_count, 'channel')}"
    percent = 100 * measured_bytes_per_s / expected
    warnings.insert(0, f"measured peak {measured_bytes_per_s / 1e9:.1f} GB/s is {percent:.0f} % "
                       f"of what {what} should give ({expected / 1e9:.1f} GB/s)")
    return "; ".join(warnings)
