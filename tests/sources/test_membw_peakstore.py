"""The kept idle peak: where it lives, what keys it, upward only, and written safely."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path

import pytest

from gputop.sources.membw.canary import Calibration
from gputop.sources.membw.idlepeak import (
    FILE_NAME,
    Key,
    PeakStore,
    StoreRefused,
    default_state_dir,
    machine_key,
)
from tests.helpers.users import as_other_user

KEY: Key = {"cpu_model": "Test CPU", "cpus": 2, "mem_total": "24683624 kB",
            "layout": "unknown", "boot_id": "4f9b", "canary": "16777216/2097152"}
CAL = Calibration(5e9, 9e9, 2, 0.2)


def test_state_dir_follows_xdg_state_home_and_falls_back_to_home() -> None:
    assert default_state_dir({"XDG_STATE_HOME": "/x/state", "HOME": "/h"}) == \
        Path("/x/state/gputop")
    # A relative XDG_STATE_HOME is invalid by the spec: ignored.
    assert default_state_dir({"XDG_STATE_HOME": "rel", "HOME": "/h"}) == \
        Path("/h/.local/state/gputop")
    assert default_state_dir({"HOME": "/h"}) == Path("/h/.local/state/gputop")


def test_machine_key_names_cpu_memory_layout_boot_and_canary(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "sys/kernel/random").mkdir(parents=True)
    (proc / "cpuinfo").write_text("processor\t: 0\nmodel name\t: Test CPU\n\n"
                                  "processor\t: 1\nmodel name\t: Test CPU\n")
    (proc / "meminfo").write_text("MemTotal:       24683624 kB\nMemFree: 1 kB\n")
    (proc / "sys/kernel/random/boot_id").write_text("4f9b\n")
    assert machine_key(proc, None, "16777216/2097152") == KEY
    assert machine_key(proc, "2 of 4 slots: 2 x 16 GiB DDR5", "x")["layout"] == \
        "2 of 4 slots: 2 x 16 GiB DDR5"
    assert machine_key(tmp_path / "nowhere", None, "x")["boot_id"] == "unknown"


def test_a_saved_peak_is_private_replaced_atomically_and_only_raised(tmp_path: Path) -> None:
    directory = tmp_path / "state" / "gputop"
    store = PeakStore(directory, KEY)
    assert store.load() is None and not directory.exists()  # reading creates nothing
    assert store.save(CAL) == CAL
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert os.listdir(directory) == [FILE_NAME]  # no temporary file left behind
    assert store.load() == Calibration(5e9, 9e9, 2, 0.0)
    store.save(Calibration(4e9, 8e9, 1, 0.2))  # lower: kept as it was
    assert store.load() == Calibration(5e9, 9e9, 2, 0.0)
    store.save(Calibration(6e9, 8e9, 1, 0.2))  # higher single, lower aggregate
    assert store.load() == Calibration(6e9, 9e9, 2, 0.0)


def test_a_changed_machine_ignores_the_stored_peak(tmp_path: Path) -> None:
    PeakStore(tmp_path, KEY).save(CAL)
    for field, value in (("boot_id", "rebooted"), ("cpu_model", "Other"),
                         ("mem_total", "1 kB"), ("layout", "1 of 4 slots"), ("cpus", 4)):
        moved = PeakStore(tmp_path, {**KEY, field: value})
        assert moved.load() is None
    rebooted = PeakStore(tmp_path, {**KEY, "boot_id": "rebooted"})
    rebooted.save(Calibration(1e9, 2e9, 1, 0.1))  # the old machine's higher peak is not kept
    assert rebooted.load() == Calibration(1e9, 2e9, 1, 0.0)
    assert PeakStore(tmp_path, KEY).load() is None


@pytest.mark.parametrize("body", [
    b"not json", b"[]", b'{"version": 1}',
    json.dumps({"version": 1, "key": KEY, "single_bytes_per_s": float("nan"),
                "aggregate_bytes_per_s": 1.0, "threads": 1}).encode(),
    json.dumps({"version": 1, "key": KEY, "single_bytes_per_s": 1.0,
                "aggregate_bytes_per_s": 1.0, "threads": True}).encode(),
    json.dumps({"version": 1, "key": KEY, "single_bytes_per_s": -1.0,
                "aggregate_bytes_per_s": 1.0, "threads": 1}).encode(),
    b" " * 70_000 + b"{}",
])
def test_malformed_records_are_ignored_and_replaced(tmp_path: Path, body: bytes) -> None:
    tmp_path.chmod(0o700)
    (tmp_path / FILE_NAME).write_bytes(body)
    store = PeakStore(tmp_path, KEY)
    assert store.load() is None
    store.save(CAL)
    assert store.load() == Calibration(5e9, 9e9, 2, 0.0)


def test_a_link_planted_as_the_file_is_not_followed(tmp_path: Path) -> None:
    directory = tmp_path / "gputop"
    directory.mkdir(mode=0o700)
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"version": 1, "key": KEY, "single_bytes_per_s": 9e99,
                                  "aggregate_bytes_per_s": 9e99, "threads": 1}))
    (directory / FILE_NAME).symlink_to(target)
    store = PeakStore(directory, KEY)
    assert store.load() is None  # not read through the link
    store.save(CAL)
    assert not (directory / FILE_NAME).is_symlink()  # the link itself was replaced
    assert json.loads(target.read_text())["single_bytes_per_s"] == 9e99  # target untouched
    assert store.load() == Calibration(5e9, 9e9, 2, 0.0)


def test_a_linked_or_shared_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "gputop").symlink_to(real)
    linked = PeakStore(tmp_path / "gputop", KEY)
    with pytest.raises(OSError):
        linked.save(CAL)
    assert linked.load() is None and os.listdir(real) == []
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(StoreRefused, match="open to others"):
        PeakStore(shared, KEY).save(CAL)
    assert os.listdir(shared) == []


def test_a_directory_or_file_of_another_user_is_refused() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to act as a second user")
    # Under /tmp, which the other user can reach (pytest's tmp_path is 0700 root's).
    with tempfile.TemporaryDirectory(prefix="gputop-peakstore-") as name:
        _refuse_others(Path(name))


def _refuse_others(tmp_path: Path) -> None:
    tmp_path.chmod(0o1777)  # like /tmp: the other user may create its own directory here
    theirs = tmp_path / "theirs"
    as_other_user(lambda: theirs.mkdir(mode=0o700))
    assert theirs.stat().st_uid != os.geteuid()
    with pytest.raises(StoreRefused, match="belongs to uid"):
        PeakStore(theirs, KEY).save(CAL)
    assert PeakStore(theirs, KEY).load() is None
    ours = tmp_path / "ours"
    PeakStore(ours, KEY).save(CAL)
    os.chown(ours / FILE_NAME, 54321, 54321)  # a file that is not ours, in our directory
    assert PeakStore(ours, KEY).load() is None
