"""Memory layout from udev DMI properties and EDAC, expected peak, and the peak comparison."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputop.sources.membw.dimm_check import read_layout
from gputop.sources.membw.dimm_slots import (
    MemoryLayout,
    MemoryModule,
    channel_of,
    compare_peak,
    read_edac,
    read_udev,
)
from tests.helpers.membw import source_of

FIX = Path(__file__).parent / "fixtures" / "membw"


@pytest.mark.parametrize(("locator", "bank", "channel"), [
    ("ChannelA-DIMM0", "BANK 0", "A"),
    ("DIMM 1", "P0 CHANNEL B", "P0/B"),
    ("DIMM_B1", "", "B"),
    ("CPU1_DIMM_C2", "NODE 1", "NODE1/C"),
    ("Controller1-ChannelA-DIMM0", "BANK 0", "CONTROLLER1/A"),
    ("DIMM 0", "BANK 0", None),
])
def test_channel_from_locators(locator: str, bank: str, channel: str | None) -> None:
    assert channel_of(locator, bank) == channel


def test_one_module_in_slot_four() -> None:
    layout = read_udev(FIX / "udev-one")
    assert layout is not None and layout.slots == 4 and len(layout.modules) == 1
    module = layout.modules[0]
    assert (module.size_bytes, module.mts, module.channel) == (16 << 30, 3200, "B")
    assert layout.expected_peak_bytes_per_s == pytest.approx(3200e6 * 8)
    assert layout.summary() == "1 of 4 slots: 16 GiB DDR4 3200 MT/s; 1 channel (B)"


def test_four_modules_two_channels_running_slow() -> None:
    layout = read_udev(FIX / "udev-four")
    assert layout is not None and layout.channels == ("A", "B")
    assert layout.expected_peak_bytes_per_s == pytest.approx(2 * 2666e6 * 8)
    assert layout.summary() == ("4 of 4 slots: 4 x 8 GiB DDR4 2666 MT/s; 2 channels (A, B); "
                                "runs at 2666 of 3200 MT/s")


def test_compare_peak_sentences() -> None:
    one = read_udev(FIX / "udev-one")
    assert compare_peak(10.24e9, one) == (
        "measured peak 10.2 GB/s is 40 % of what 1 module at 3200 MT/s should give (25.6 GB/s); "
        "one channel populated (1 of 4 slots)")
    four = read_udev(FIX / "udev-four")
    assert compare_peak(34.1e9, four) == (
        "measured peak 34.1 GB/s is 80 % of what 4 modules at 2666 MT/s in 2 channels "
        "should give (42.7 GB/s)")
    assert compare_peak(None, one) == "one channel populated (1 of 4 slots)"
    assert compare_peak(1e9, None) is None


def test_unknown_channels_assume_one_per_module() -> None:
    layout = MemoryLayout("udev", (MemoryModule("DIMM 0", speed_mts=2400),
                                   MemoryModule("DIMM 1", speed_mts=2400)), slots=2)
    assert layout.channels is None and layout.channel_count == 2
    assert layout.expected_peak_bytes_per_s == pytest.approx(2 * 2400e6 * 8)
    assert "channels unknown" in layout.summary()


def test_edac_gives_sizes_and_channels_but_no_peak() -> None:
    layout = read_edac(FIX / "sys-edac")
    assert layout is not None and len(layout.modules) == 2  # the empty dimm2 is left out
    assert layout.channels == ("mc0/0", "mc0/1")
    assert layout.expected_peak_bytes_per_s is None
    assert compare_peak(5e9, layout) is None


def test_read_layout_falls_back_udev_then_edac() -> None:
    assert source_of(read_layout(FIX / "udev-none", FIX / "sys-edac")) == "edac"
    assert source_of(read_layout(FIX / "udev-four", FIX / "sys-edac")) == "udev"
    assert read_layout(FIX / "nowhere", FIX / "nowhere") is None
