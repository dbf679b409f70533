"""swap, followed: a real probed trainer in a memory cgroup (a host with less RAM than this
one) whose samples are records of a data file read through one shared mmap, and whose
DataLoader workers each build a full copy of a label table. The copies cannot be reclaimed
(no swap), so the file's pages are dropped and read back from storage again and again: the
host's major faults (/proc/vmstat's pgmajfault, the counter gputop reads) climb, and the
trainer's own cgroup counts them. The swap advice must fire with those figures; the test
then follows it (the table built once before the workers fork and shared by them: no full
copy per worker), measures samples/s before and after, interleaved
(tests/helpers/follow.py), and the trainer must no longer page in enough to fire the rule.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from gputop.advice.host_rules import MAJOR_FAULTS_PER_S
from gputop.core.model import Frame
from gputop.frames.sampler import Sampler
from gputop.sources.membw import MemoryBandwidthMonitor
from gputop.sources.membw.estimate import parse_vmstat
from tests.helpers.advice_run import (
    FOLLOWED_TICKS,
    TICK_S,
    advice,
    number,
    probed_trainer,
    ready,
    sample_until,
    shows,
    watching,
)
from tests.helpers.follow import interleaved, report, with_workers
from tests.helpers.memcg import MemoryCgroup, memory_cgroup

pytestmark = [pytest.mark.slow, pytest.mark.alone]

RECORD_KB = 1024
RECORDS = 256
DATA_BYTES = RECORDS * RECORD_KB * 1024
TABLE_MB = DATA_BYTES // 2**20  # each copy as large as the file: sharing it frees its room
WORKERS = 2
BATCH = 8
ROOM = DATA_BYTES // 4  # the page cache the copies leave the file: a quarter of it
TABLES_BUILT_STEPS = 20  # by then each worker has delivered batches, so has built its copy
WARM_PASSES_STEPS = 2 * RECORDS // BATCH  # followed: the file read in once, and again
MEASURED_STEPS = 100  # the effect is several-fold: a few seconds a run tell
PAGED_TITLES = ("Training memory is being paged in from disk",
                "The host is swapping while training")  # the second where the host has swap
SWAP_ID = "swap"


@dataclass
class Faults:
    """Major faults since it was made: the host's (what gputop reads) and the cgroup's."""

    cgroup: MemoryCgroup
    host_at: int = 0
    own_at: int = 0

    def __post_init__(self) -> None:
        self.host_at, self.own_at = _host_major_faults(), self.cgroup.major_faults()

    def since(self) -> tuple[int, int]:
        """(the host's, the cgroup's) since it was made or last asked; restarts the count."""
        host, own = _host_major_faults(), self.cgroup.major_faults()
        counts = (host - self.host_at, own - self.own_at)
        self.host_at, self.own_at = host, own
        return counts


def _host_major_faults() -> int:
    """The host's major faults since boot, as gputop reads them."""
    return parse_vmstat(Path("/proc/vmstat").read_text())["pgmajfault"]


def data_file(tmp_path: Path) -> Path:
    """RECORDS records of 1 MiB on the storage under tmp_path; skip where that is a file
    system in RAM (its pages are never dropped, so never read back)."""
    kind = subprocess.run(["stat", "-f", "-c", "%T", str(tmp_path)], capture_output=True,
                          text=True, timeout=30, check=True).stdout.strip()
    if kind in ("tmpfs", "ramfs"):
        pytest.skip(f"{tmp_path} is on {kind}: its pages stay in RAM, none is read back")
    path = tmp_path / "records.bin"
    record = bytes(range(256)) * (RECORD_KB * 4)
    with path.open("wb") as f:
        for _ in range(RECORDS):
            f.write(record)
    return path


def test_swap_fires_on_paging_and_sharing_the_copied_table_pays(tmp_path: Path) -> None:
    loader = ("--batch-size", str(BATCH), "--mmap-file", str(data_file(tmp_path)),
              "--record-kb", str(RECORD_KB), "--table-mb", str(TABLE_MB))
    with memory_cgroup("gputop-swap-test") as cgroup:
        before = replace(with_workers(WORKERS, *loader, "--table-per-worker"), cgroup=cgroup)
        after = replace(with_workers(WORKERS, *loader), cgroup=cgroup)
        with probed_trainer(tmp_path / "advised", *before.args, cgroup=cgroup) as trainer, \
                watching(trainer, membw=MemoryBandwidthMonitor(None, None)) as sampler:
            sample_until(sampler, lambda f: ready(f, TABLES_BUILT_STEPS))
            anon = cgroup.anon_bytes()
            faults = Faults(cgroup)
            cgroup.limit(anon + ROOM)  # the same limit for every run that follows
            frames = [sample_until(sampler, shows(SWAP_ID))]
            frames += [_tick(sampler) for _ in range(FOLLOWED_TICKS)]
            host, own = faults.since()
        print(f"\nswap: cgroup limit {(anon + ROOM) / 2**20:.0f} MiB ({anon / 2**20:.0f} MiB "
              f"anonymous); {advice(frames[0], SWAP_ID).evidence}; major faults from the limit "
              f"on: host {host}, trainer's {own}, per s in the frames "
              f"{[round(_major_faults(f)) for f in frames]}")
        _check_evidence(frames[0])
        assert own >= host / 2, (own, host)  # the host's figure moves with the trainer's paging
        runs = interleaved(tmp_path, before, after, MEASURED_STEPS)
        assert report("swap", "label table shared by the workers, not a copy each", runs) > 1.1
        _check_followed(tmp_path, after.args, cgroup)


def _tick(sampler: Sampler) -> Frame:
    """The next frame, a tick on."""
    time.sleep(TICK_S)
    return sampler.sample()


def _major_faults(frame: Frame) -> float:
    """The frame's host-wide major faults per second (-1 when unknown)."""
    m = frame.memory_bandwidth
    return -1.0 if m is None or m.major_faults_per_s is None else m.major_faults_per_s


def _check_evidence(frame: Frame) -> None:
    """The figures quoted are the trainer's own (it and its workers), past the threshold."""
    found = advice(frame, SWAP_ID)
    assert found.title in PAGED_TITLES and found.trainer_pid is not None
    own = [row for row in frame.processes
           if row.pid == found.trainer_pid or row.trainer_pid == found.trainer_pid]
    faults = sum(row.major_faults_per_s or 0.0 for row in own)
    assert number(r"take (\d+) major page faults/s", found.evidence) == round(faults)
    assert faults >= MAJOR_FAULTS_PER_S
    if not frame.host.swap_total_bytes:
        assert "swap" not in f"{found.title} {found.evidence}".lower()
    assert "no full dataset copies per worker" in found.action


def _check_followed(tmp_path: Path, args: tuple[str, ...], cgroup: MemoryCgroup) -> None:
    """FOLLOWED_TICKS frames of the followed trainer, once it has read the file in: none
    shows the advice while the host's major faults are mostly the trainer's (the figure is
    host-wide: other work paging in is not the trainer's doing)."""
    with probed_trainer(tmp_path / "followed", *args, cgroup=cgroup) as trainer, \
            watching(trainer, membw=MemoryBandwidthMonitor(None, None)) as sampler:
        sample_until(sampler, lambda f: ready(f, WARM_PASSES_STEPS))
        faults = Faults(cgroup)
        ticks = []
        for _ in range(FOLLOWED_TICKS):
            frame = _tick(sampler)
            ticks.append((SWAP_ID in {a.id for a in frame.advice}, *faults.since()))
    print(f"followed: (advice shown, host's major faults, trainer's) per tick: {ticks}")
    assert not [t for t in ticks if t[0] and t[2] >= t[1] / 2], ticks
