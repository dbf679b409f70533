"""Build SMBIOS memory records and dmidecode text for the layout fixtures (DSP0134 3.3).

A `Slot` is one type-17 memory device: populated (size, speeds) or empty. `device()`
packs it the way firmware does (92-byte formatted area + strings), `array()` packs the
type-16 array it belongs to, `dmidecode()` prints both the way dmidecode 3.3 does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

DDR4, DDR5 = 0x1A, 0x22
TYPE_NAMES = {DDR4: "DDR4", DDR5: "DDR5"}
REGISTERED_SYNCHRONOUS = 0x2080  # Type Detail bits 13 and 7
NO_ERROR_HANDLE = 0xFFFE
SYSTEM_MEMORY, FLASH_MEMORY = 0x03, 0x05
DIMM_FORM = 0x09
DEVICE_FORMAT = "<BBHHHHHHBBBBBHHBBBBBIHHHHBHBHHHHQQQQII"  # 0x5C bytes
ARRAY_FORMAT = "<BBHBBBIHHQ"  # 0x17 bytes


@dataclass(frozen=True)
class Slot:
    """One memory device record; size_mib 0 is an empty slot."""

    handle: int
    array: int
    locator: str
    bank: str
    size_mib: int = 0
    type_code: int = DDR4
    speed: int = 0
    configured: int = 0
    manufacturer: str = "NO DIMM"
    part: str = "NO DIMM"


def _strings(*values: str) -> bytes:
    return b"".join(v.encode() + b"\0" for v in values) + b"\0"


def device(slot: Slot) -> bytes:
    """The raw type-17 structure, as /sys/firmware/dmi/entries/17-N/raw holds it."""
    filled = slot.size_mib > 0
    size_word = (slot.size_mib if slot.size_mib < 0x7FFF else 0x7FFF) if filled else 0
    fields = (
        17, 0x5C, slot.handle, slot.array, NO_ERROR_HANDLE,
        72 if filled else 0xFFFF, 64 if filled else 0xFFFF, size_word, DIMM_FORM, 0,
        1, 2, slot.type_code if filled else 0x02, REGISTERED_SYNCHRONOUS if filled else 0x0002,
        slot.speed, 3, 4, 5, 6, 2 if filled else 0,
        slot.size_mib if size_word == 0x7FFF else 0, slot.configured,
        1200 if filled else 0, 1200 if filled else 0, 1200 if filled else 0,
        0x03 if filled else 0x02, 0x0004 if filled else 0x0002, 0,
        0, 0, 0, 0, 0, (slot.size_mib << 20) if filled else 0, 0, 0, 0, 0,
    )
    serial = "0000A1B2" if filled else "NO DIMM"
    asset = f"{slot.locator}_AssetTag" if filled else "NO DIMM"
    return struct.pack(DEVICE_FORMAT, *fields) + _strings(
        slot.locator, slot.bank, slot.manufacturer, serial, asset, slot.part)


def array(handle: int, devices: int, use: int = SYSTEM_MEMORY) -> bytes:
    """The raw type-16 structure (system board, multi-bit ECC, 2 TiB maximum)."""
    return struct.pack(ARRAY_FORMAT, 16, 0x17, handle, 0x03, use, 0x06, 0x8000_0000,
                       NO_ERROR_HANDLE, devices, 2 << 40) + b"\0\0"


def end_of_table(handle: int) -> bytes:
    """Type 127, the table's last structure."""
    return struct.pack("<BBH", 127, 4, handle) + b"\0\0"


def write_entries(root: Path, arrays: list[bytes], slots: list[Slot]) -> None:
    """root/firmware/dmi/entries/{16,17}-N/raw, numbered as dmi-sysfs numbers them."""
    records = [(16, i, raw) for i, raw in enumerate(arrays)]
    records += [(17, i, device(s)) for i, s in enumerate(slots)]
    for kind, index, raw in records:
        entry = root / "firmware/dmi/entries" / f"{kind}-{index}"
        entry.mkdir(parents=True)
        (entry / "raw").write_bytes(raw)
        (entry / "type").write_text(f"{kind}\n")
        (entry / "length").write_text(f"{raw[1]}\n")


def dmidecode(arrays: list[tuple[int, int, str]], slots: list[Slot]) -> str:
    """`dmidecode -t 16,17` output: arrays as (handle, devices, use), then the slots."""
    out = ["# dmidecode 3.3", "Getting SMBIOS data from sysfs.", "SMBIOS 3.3.0 present.", ""]
    for handle, devices, use in arrays:
        out += [f"Handle {handle:#06X}, DMI type 16, 23 bytes".replace("0X", "0x"),
                "Physical Memory Array", "\tLocation: System Board Or Motherboard",
                f"\tUse: {use}", "\tError Correction Type: Multi-bit ECC",
                "\tMaximum Capacity: 2 TB", "\tError Information Handle: Not Provided",
                f"\tNumber Of Devices: {devices}", ""]
    for s in slots:
        out += _dmidecode_device(s)
    return "\n".join(out)


def _dmidecode_device(s: Slot) -> list[str]:
    filled = s.size_mib > 0
    size = f"{s.size_mib // 1024} GB" if filled else "No Module Installed"
    speed = f"{s.speed} MT/s" if s.speed else "Unknown"
    configured = f"{s.configured} MT/s" if s.configured else "Unknown"
    return [
        f"Handle {s.handle:#06X}, DMI type 17, 92 bytes".replace("0X", "0x"), "Memory Device",
        f"\tArray Handle: {s.array:#06X}".replace("0X", "0x"),
        "\tError Information Handle: Not Provided",
        f"\tTotal Width: {'72 bits' if filled else 'Unknown'}",
        f"\tData Width: {'64 bits' if filled else 'Unknown'}",
        f"\tSize: {size}", "\tForm Factor: DIMM", "\tSet: None",
        f"\tLocator: {s.locator}", f"\tBank Locator: {s.bank}",
        f"\tType: {TYPE_NAMES.get(s.type_code, 'Unknown') if filled else 'Unknown'}",
        f"\tType Detail: {'Synchronous Registered (Buffered)' if filled else 'Unknown'}",
        f"\tSpeed: {speed}", f"\tManufacturer: {s.manufacturer}",
        f"\tSerial Number: {'0000A1B2' if filled else 'NO DIMM'}",
        f"\tAsset Tag: {s.locator + '_AssetTag' if filled else 'NO DIMM'}",
        f"\tPart Number: {s.part}", f"\tRank: {'2' if filled else 'Unknown'}",
        f"\tConfigured Memory Speed: {configured}",
        f"\tMinimum Voltage: {'1.2 V' if filled else 'Unknown'}",
        f"\tMaximum Voltage: {'1.2 V' if filled else 'Unknown'}",
        f"\tConfigured Voltage: {'1.2 V' if filled else 'Unknown'}",
        f"\tMemory Technology: {'DRAM' if filled else 'Unknown'}", "",
    ]


def write_edac(root: Path, dimms: dict[int, list[tuple[int, int]]], mem_type: str,
               channels: int = 2, slots_per_channel: int = 2) -> None:
    """An i10nm-style EDAC tree: per controller, (channel, size MiB) of each populated DIMM."""
    for mc, populated in dimms.items():
        base = root / "devices/system/edac/mc" / f"mc{mc}"
        base.mkdir(parents=True)
        (base / "mc_name").write_text(f"Intel_10nm Socket#0 IMC#{mc}\n")
        (base / "max_location").write_text(
            f"channel {channels - 1} slot {slots_per_channel - 1} \n")
        (base / "size_mb").write_text(f"{sum(size for _, size in populated)}\n")
        for channel, size in populated:
            dimm = base / f"dimm{channel * slots_per_channel}"
            dimm.mkdir()
            (dimm / "size").write_text(f"{size}\n")
            (dimm / "dimm_location").write_text(f"channel {channel} slot 0 \n")
            (dimm / "dimm_label").write_text(f"CPU_SrcID#0_MC#{mc}_Chan#{channel}_DIMM#0\n")
            (dimm / "dimm_mem_type").write_text(f"{mem_type}\n")
            (dimm / "dimm_edac_mode").write_text("SECDED\n")
            (dimm / "dimm_dev_type").write_text("x4\n")
