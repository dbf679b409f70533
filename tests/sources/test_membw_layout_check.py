"""The memory-layout check on recorded server trees: balanced, one channel empty, mixed speeds.

The trees in fixtures/layout/ are constructed from the SMBIOS specification and dmidecode's
output format (their README says how); nothing is invented where data is missing.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from gputop.advice import evaluate
from gputop.advice.context import Context
from gputop.export.snapshot import dumps
from gputop.export.text import render
from gputop.sources.membw import MemoryBandwidthMonitor
from gputop.sources.membw.dimm_check import check_layout, read_layout
from gputop.sources.membw.dimm_slots import read_edac, read_udev
from gputop.sources.membw.smbios import (
    device_size,
    parse_dmidecode,
    parse_memory_device,
    read_dmi_entries,
    read_dmi_table,
    split_table,
)
from tests.helpers.builders import frame
from tests.helpers.membw import source_of
from tests.helpers.smbios import DDR5, Slot, array, device, write_entries
from tests.sources.fixtures.layout.make_fixtures import build

FIX = Path(__file__).parent / "fixtures" / "layout"
MEMBW = Path(__file__).parent / "fixtures" / "membw"


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.suffix not in (".py", ".md", ".pyc")
            and "__pycache__" not in p.parts}


def test_the_committed_fixtures_are_what_the_builder_writes(tmp_path: Path) -> None:
    build(tmp_path)
    assert _files(tmp_path) == _files(FIX)


def test_balanced_eight_channels_from_dmi_entries_and_edac() -> None:
    for layout in (read_dmi_entries(FIX / "x12-8ch-balanced/sys"),
                   read_edac(FIX / "x12-8ch-balanced/sys")):
        assert layout is not None and len(layout.modules) == 8
        check = check_layout(layout)
        assert (check.verdict, check.channels_populated, check.channels_total) == (
            "balanced", 8, 8)
        assert check.findings == () and check.fill_slots == ()
    dmi = read_dmi_entries(FIX / "x12-8ch-balanced/sys")
    assert dmi is not None and dmi.slots == 16 and len(dmi.empty) == 8
    assert dmi.summary() == ("8 of 16 slots: 8 x 32 GiB DDR4 3200 MT/s; "
                             "8 channels (A, B, C, D, E, F, G, H)")
    assert dmi.expected_peak_bytes_per_s == pytest.approx(8 * 3200e6 * 8)


def test_one_empty_channel_from_dmidecode_names_its_slots() -> None:
    layout = parse_dmidecode((FIX / "x12-one-channel-empty/dmidecode.txt").read_text())
    check = check_layout(layout)
    assert (check.verdict, check.source) == ("unbalanced", "dmidecode")
    assert (check.channels_populated, check.channels_total) == (7, 8)
    assert check.findings == (
        "7 of 8 channels populated: channel D empty (slots P1-DIMMD1, P1-DIMMD2)",)
    assert check.fill_slots == ("P1-DIMMD1",)
    assert check.usual_module == "32 GiB DDR4 3200 MT/s"


def test_one_empty_channel_from_edac_names_the_controller_channel() -> None:
    check = check_layout(read_edac(FIX / "x12-one-channel-empty/sys"))
    assert check.verdict == "unbalanced" and check.source == "edac"
    assert check.findings == ("7 of 8 channels populated: channel mc1/1 empty "
                              "(slot mc1 channel 1)",)


def test_mixed_speeds_from_the_dmi_table_name_the_slow_modules() -> None:
    layout = read_dmi_table(FIX / "h13-mixed-speeds/sys")
    assert layout is not None
    assert len(layout.modules) == 12  # the SYSTEM ROM in a flash array is not memory
    check = check_layout(layout)
    assert check.verdict == "unbalanced" and (check.channels_populated,
                                              check.channels_total) == (12, 12)
    assert check.findings == ("mixed module speeds: 2 rated 4400 MT/s, 10 rated 4800 MT/s; "
                              "slower ones in DIMMC1, DIMMH1; all run at 4400 MT/s",)
    assert check.slow_slots == ("DIMMC1", "DIMMH1") and check.fill_slots == ()


def test_the_seed_case_one_module_of_two_channels() -> None:
    check = check_layout(read_udev(MEMBW / "udev-one"))
    assert (check.verdict, check.channels_populated, check.channels_total) == (
        "unbalanced", 1, 2)
    assert check.findings == ("1 of 2 channels populated: channel A empty "
                              "(slots P0 CHANNEL A/DIMM 0, P0 CHANNEL A/DIMM 1)",)


def test_unequal_channels_are_named(tmp_path: Path) -> None:
    slots = [Slot(0x40 + i, 0x3F, f"DIMM_{c}1", f"CHANNEL {c}", size, DDR5, 4800, 4800, "M", "P")
             for i, (c, size) in enumerate([("A", 32768), ("B", 32768), ("C", 16384),
                                            ("D", 32768)])]
    write_entries(tmp_path, [array(0x3F, 4)], slots)
    check = check_layout(read_dmi_entries(tmp_path))
    assert check.verdict == "unbalanced"
    assert check.findings == ("channels hold different amounts: C 16 GiB where the others "
                              "hold 32 GiB (slots DIMM_C1)",)


def test_nothing_readable_or_unnamed_channels_is_na_with_the_reason(tmp_path: Path) -> None:
    none = check_layout(read_layout(tmp_path, tmp_path, dmidecode=lambda: None))
    assert none.verdict == "n/a" and none.findings == ()
    assert (none.reason or "").startswith("no memory-module list readable")
    hpe = [Slot(0x40 + i, 0x3F, f"PROC 1 DIMM {i + 1}", "Not Specified", 32768, DDR5, 4800,
                4800, "M", "P") for i in range(4)]
    write_entries(tmp_path / "hpe", [array(0x3F, 4)], hpe)
    check = check_layout(read_dmi_entries(tmp_path / "hpe"))
    assert check.verdict == "n/a" and check.findings == ()
    assert check.reason == "the slot names do not say the channel (e.g. 'PROC 1 DIMM 1')"


def test_socket_letters_are_not_taken_for_channels(tmp_path: Path) -> None:
    """Dell names slots A1..A12 (CPU 1), B1..B12 (CPU 2): one CPU fitted is not 1 of 2."""
    dell = [Slot(0x1100 + i, 0x1000, f"{cpu}{n}", "Not Specified",
                 32768 if cpu == "A" else 0, DDR5, 4800, 4800, "M", "P")
            for i, (cpu, n) in enumerate((c, n) for c in "AB" for n in range(1, 13))]
    write_entries(tmp_path, [array(0x1000, 24)], dell)
    check = check_layout(read_dmi_entries(tmp_path))
    assert check.verdict == "n/a" and check.findings == ()
    assert check.reason == ("the slot names put 9 slots in 'A', more than a memory channel "
                            "has (3): they do not name channels")


def test_read_layout_order_and_dmidecode_only_when_sysfs_has_nothing() -> None:
    calls: list[int] = []

    def dmidecode() -> str:
        calls.append(1)
        return (FIX / "x12-one-channel-empty/dmidecode.txt").read_text()

    balanced = FIX / "x12-8ch-balanced/sys"
    assert source_of(read_layout(MEMBW / "udev-four", balanced, dmidecode)) == "udev"
    assert source_of(read_layout(MEMBW / "udev-none", balanced, dmidecode)) == "dmi"
    assert source_of(read_layout(MEMBW / "udev-none", FIX / "h13-mixed-speeds/sys",
                                 dmidecode)) == "dmi"
    assert calls == []
    edac_only = FIX / "x12-one-channel-empty/sys"
    assert source_of(read_layout(MEMBW / "udev-none", edac_only, dmidecode)) == "dmidecode"
    assert source_of(read_layout(MEMBW / "udev-none", edac_only, lambda: None)) == "edac"


def test_record_edge_cases_sizes_speeds_and_junk() -> None:
    big = device(Slot(1, 2, "DIMM_A1", "", 131072, DDR5, 5600, 5600, "M", "P"))
    assert device_size(big) == 128 << 30  # past 0x7FFF MiB: the extended size field
    kib = bytearray(big)
    struct.pack_into("<H", kib, 0x0C, 0x8000 | 512)  # bit 15: the size is in KiB
    assert device_size(bytes(kib)) == 512 << 10
    fast = bytearray(big)
    struct.pack_into("<H", fast, 0x15, 0xFFFF)
    struct.pack_into("<I", fast, 0x54, 8800)
    parsed = parse_memory_device(bytes(fast))
    assert parsed is not None and parsed[0].speed_mts == 8800
    hostile = device(Slot(1, 2, "DIMM_A1\x1b]0;pwned\x07", "", 1024, DDR5, 4800, 4800, "M", "P"))
    parsed = parse_memory_device(hostile)
    assert parsed is not None and parsed[0].locator == "DIMM_A1\\x1b]0;pwned\\x07"
    assert parse_memory_device(big[:0x10]) is None and parse_memory_device(b"") is None
    assert split_table(b"\x11\x02garbage") == [] and split_table(b"") == []
    assert parse_dmidecode("not dmidecode output") is None


def test_the_monitor_carries_the_check_and_advice_names_the_slots_whatever_the_pressure(
        ) -> None:
    layout = parse_dmidecode((FIX / "x12-one-channel-empty/dmidecode.txt").read_text())
    monitor = MemoryBandwidthMonitor(None, None, MEMBW / "proc-zen2", layout, ("no rung",))
    sample = monitor.sample()
    assert sample.pressure is None and sample.layout_check is not None
    advice = {a.id: a for a in evaluate(Context(frame(membw=sample), {}))}
    layout_advice = advice["memory-layout"]
    assert layout_advice.title == "Only 7 of 8 memory channels are populated"
    assert "channel D empty (slots P1-DIMMD1, P1-DIMMD2) (dmidecode)" in layout_advice.evidence
    assert layout_advice.action.startswith(
        "Fill P1-DIMMD1 with modules matching the others (32 GiB DDR4 3200 MT/s)")
    f = frame(membw=sample)
    checked = json.loads(dumps(f))["memory_bandwidth"]["layout_check"]
    assert checked["verdict"] == "unbalanced" and checked["fill_slots"] == ["P1-DIMMD1"]
    assert "memory layout: unbalanced 7 of 8 channels — 7 of 8 channels populated" in render(f)
    monitor.close()


def test_balanced_or_unreadable_layouts_give_no_advice() -> None:
    for layout in (read_dmi_entries(FIX / "x12-8ch-balanced/sys"), None):
        sample = MemoryBandwidthMonitor(None, None, MEMBW / "proc-zen2", layout).sample()
        assert "memory-layout" not in {a.id for a in evaluate(Context(frame(membw=sample), {}))}
