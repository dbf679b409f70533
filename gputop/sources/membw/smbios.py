"""Memory slots from SMBIOS type-17 records (DSP0134 7.18; root only), raw from sysfs or as
dmidecode's text; type-16 arrays keep flash and NVRAM out, and empty slots are kept too."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from gputop.core.printable import printable
from gputop.sources.membw.dimm_slots import MemoryLayout, MemoryModule, finish_layout

MEMORY_ARRAY = 16
MEMORY_DEVICE = 17
END_OF_TABLE = 127
SYSTEM_MEMORY_USE = 0x03
DMIDECODE_TIMEOUT_S = 5.0

# Memory Type (offset 0x12), the values a server or desktop module has.
MEMORY_TYPES = {
    0x12: "DDR", 0x13: "DDR2", 0x18: "DDR3", 0x1A: "DDR4", 0x1B: "LPDDR", 0x1C: "LPDDR2",
    0x1D: "LPDDR3", 0x1E: "LPDDR4", 0x20: "HBM", 0x21: "HBM2", 0x22: "DDR5", 0x23: "LPDDR5",
    0x24: "HBM3",
}


def _word(data: bytes, at: int, size: int = 2) -> int | None:
    """The little-endian word (or `size`-byte field) at `at`; None past the end."""
    return int.from_bytes(data[at:at + size], "little") if at + size <= len(data) else None


def _strings(raw: bytes, length: int) -> list[str]:
    """The structure's string set (string 1 first), made printable: firmware text."""
    return [printable(s.decode("utf-8", "replace").strip())
            for s in raw[length:].split(b"\0")]


def _string(raw: bytes, at: int) -> str:
    length = raw[1]
    index = raw[at] if at < length else 0
    strings = _strings(raw, length)
    return strings[index - 1] if 0 < index <= len(strings) else ""


def device_size(raw: bytes) -> int | None:
    """Module size in bytes: 0 for an empty slot, None when the firmware does not know."""
    formatted = raw[:raw[1]]
    size = _word(formatted, 0x0C)
    if size is None or size == 0xFFFF:
        return None
    if size == 0x7FFF:
        extended = _word(formatted, 0x1C, 4)
        return None if extended is None else (extended & 0x7FFF_FFFF) << 20
    return (size & 0x7FFF) << (10 if size & 0x8000 else 20)


def device_speed(raw: bytes, at: int, extended_at: int) -> int | None:
    """A speed word in MT/s (0 unknown; 0xFFFF means the 32-bit extended field)."""
    formatted = raw[:raw[1]]
    speed = _word(formatted, at)
    if speed == 0xFFFF:
        speed = _word(formatted, extended_at, 4)
    return speed or None


def parse_memory_device(raw: bytes) -> tuple[MemoryModule, bool, int | None] | None:
    """One type-17 structure -> (slot, populated, array handle), or None if it is not one."""
    if len(raw) < 0x15 or raw[0] != MEMORY_DEVICE or raw[1] < 0x15 or raw[1] > len(raw):
        return None
    size = device_size(raw)
    formatted = raw[:raw[1]]
    width = _word(formatted, 0x0A)
    module = MemoryModule(
        locator=_string(raw, 0x10) or f"handle {_word(raw, 2):#06x}",
        bank_locator=_string(raw, 0x11),
        size_bytes=size or None,
        mem_type=MEMORY_TYPES.get(raw[0x12]),
        speed_mts=device_speed(raw, 0x15, 0x54),
        configured_speed_mts=device_speed(raw, 0x20, 0x58),
        data_width_bits=width if width not in (None, 0, 0xFFFF) else None,
    )
    return module, size != 0, _word(formatted, 0x04)


def system_arrays(structures: list[bytes]) -> set[int] | None:
    """Handles of type-16 arrays used as system memory; None when no type 16 is listed."""
    arrays = [s for s in structures if s[0] == MEMORY_ARRAY and s[1] >= 0x0F]
    if not arrays:
        return None
    return {_word(s, 2) or 0 for s in arrays if s[0x05] == SYSTEM_MEMORY_USE}


def layout_from_structures(structures: list[bytes], source: str) -> MemoryLayout | None:
    """Slots of every type-17 structure in a system-memory array, or None if none is listed."""
    arrays = system_arrays(structures)
    parsed = [p for p in map(parse_memory_device, structures) if p is not None]
    return finish_layout(source, [(module, populated) for module, populated, array in parsed
                                  if arrays is None or array in arrays])


def split_table(table: bytes) -> list[bytes]:
    """An SMBIOS table (/sys/firmware/dmi/tables/DMI) cut into structures, strings included."""
    out = []
    at = 0
    while at + 4 <= len(table):
        length = table[at + 1]
        if length < 4:
            break
        end = table.find(b"\0\0", at + length)
        if end < 0:
            break
        out.append(table[at:end + 2])
        if table[at] == END_OF_TABLE:
            break
        at = end + 2
    return out


def read_dmi_entries(sys_root: Path | str = "/sys") -> MemoryLayout | None:
    """Slots from /sys/firmware/dmi/entries/{16,17}-*/raw (dmi-sysfs; root only)."""
    structures = []
    for entry in sorted(Path(sys_root).glob("firmware/dmi/entries/1[67]-*"),
                        key=lambda p: (p.name.split("-")[0], int(p.name.split("-")[1]))):
        try:
            structures.append((entry / "raw").read_bytes())
        except (OSError, ValueError):
            continue
    return layout_from_structures(structures, "dmi")


def read_dmi_table(sys_root: Path | str = "/sys") -> MemoryLayout | None:
    """Slots from the whole SMBIOS table, /sys/firmware/dmi/tables/DMI (root only)."""
    try:
        table = (Path(sys_root) / "firmware/dmi/tables/DMI").read_bytes()
    except OSError:
        return None
    return layout_from_structures(split_table(table), "dmi")


def _mts(value: str | None) -> int | None:
    """'3200 MT/s' or '2400 MHz' (older dmidecode) -> 3200 / 2400; 'Unknown' -> None."""
    match = re.match(r"(\d+)\s*(MT/s|MHz)", value or "")
    return int(match.group(1)) if match else None


def _size(value: str | None) -> int | None:
    """'32 GB' / '32768 MB' / '16384 kB' -> bytes; 'No Module Installed' -> 0; else None."""
    if value is None or value.startswith(("No Module", "Not Installed")):
        return 0
    match = re.match(r"(\d+)\s*(kB|KB|MB|GB|TB)", value)
    if not match:
        return None
    shift = {"kB": 10, "KB": 10, "MB": 20, "GB": 30, "TB": 40}[match.group(2)]
    return int(match.group(1)) << shift


def parse_dmidecode(text: str) -> MemoryLayout | None:
    """`dmidecode -t 16,17` (or `-t memory`) output -> slots of the system-memory arrays."""
    arrays: set[str] = set()
    saw_array = False
    devices: list[dict[str, str]] = []
    for block in re.split(r"\n(?=Handle 0x)", text):
        header = re.match(r"Handle (0x[0-9A-Fa-f]+), DMI type (\d+)", block)
        if not header:
            continue
        fields = {k.strip(): v.strip() for k, _, v in
                  (line.partition(":") for line in block.splitlines()[2:]) if v}
        if header.group(2) == str(MEMORY_ARRAY):
            saw_array = True
            if fields.get("Use") == "System Memory":
                arrays.add(header.group(1).upper())
        elif header.group(2) == str(MEMORY_DEVICE):
            devices.append(fields)
    slots: list[tuple[MemoryModule, bool]] = []
    for fields in devices:
        if saw_array and fields.get("Array Handle", "").upper() not in arrays:
            continue
        size = _size(fields.get("Size"))
        width = re.match(r"(\d+) bits", fields.get("Data Width", ""))
        mem_type = fields.get("Type")
        module = MemoryModule(
            locator=printable(fields.get("Locator", "")) or "unnamed slot",
            bank_locator=printable(fields.get("Bank Locator", "")),
            size_bytes=size or None,
            mem_type=mem_type if mem_type not in (None, "Unknown", "Other") else None,
            speed_mts=_mts(fields.get("Speed")),
            configured_speed_mts=_mts(fields.get("Configured Memory Speed")
                                      or fields.get("Configured Clock Speed")),
            data_width_bits=int(width.group(1)) if width else None,
        )
        slots.append((module, size != 0))
    return finish_layout("dmidecode", slots)


def run_dmidecode() -> str | None:
    """`dmidecode -t 16,17` as root when installed; None otherwise (it would only refuse)."""
    binary = shutil.which("dmidecode")
    if binary is None or os.geteuid() != 0:
        return None
    try:
        done = subprocess.run([binary, "-t", "16,17"], capture_output=True, text=True,
                              timeout=DMIDECODE_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None
