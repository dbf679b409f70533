"""io-bound-loading, followed: a real probed trainer whose samples are records read from
storage (O_DIRECT: the page cache keeps none of them, as for a dataset larger than RAM) gets
the advice with the storage evidence; the test then caches the dataset in RAM, as the
advice says, and measures samples/s before and after, interleaved (tests/helpers/follow.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gputop.advice.context import Context, worker_load
from gputop.core.model import Frame
from tests.helpers.advice_run import (
    FOLLOWED_TICKS,
    advice,
    followed,
    ids,
    number,
    probed_trainer,
    sample_until,
    shows,
    state,
    watching,
)
from tests.helpers.follow import interleaved, report, with_workers

pytestmark = [pytest.mark.slow, pytest.mark.alone]

RECORD_KB = 1024  # each sample reads a 1 MiB record (an image, a shard's slice)
RECORDS = 64
WORKERS = 2
BATCH = 8
NO_READS = "they read nothing from local storage"
MEASURED_STEPS = 100  # steps of a few ms, the effect about 2x: a second per run is plenty


def data_file(tmp_path: Path) -> Path:
    """RECORDS random records on the storage under tmp_path; skip where that file system
    cannot read past the page cache (tmpfs keeps files in RAM: no read would wait)."""
    path = tmp_path / "records.bin"
    with path.open("wb") as f:
        f.write(os.urandom(RECORDS * RECORD_KB * 1024))
        os.fsync(f.fileno())
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
    except OSError as e:
        pytest.skip(f"no O_DIRECT under {tmp_path} ({e.strerror}): its reads never wait")
    return path


def test_io_bound_loader_gets_io_advice_and_caching_in_ram_pays(tmp_path: Path) -> None:
    loader = ("--batch-size", str(BATCH), "--data-file", str(data_file(tmp_path)),
              "--record-kb", str(RECORD_KB))
    before = with_workers(WORKERS, *loader)
    frames: list[Frame] = []
    with probed_trainer(tmp_path / "advised", *before.args) as trainer, \
            watching(trainer) as sampler:
        frame = sample_until(sampler, shows("io-bound-loading"), frames)
    found = advice(frame, "io-bound-loading")
    _check_storage_evidence(found.evidence, frame, trainer.pid)
    assert "too-many-workers" not in ids(frames)  # never told to remove workers
    assert "in RAM" in found.action
    after = with_workers(WORKERS, *loader, "--cache-in-ram")
    runs = interleaved(tmp_path, before, after, MEASURED_STEPS)
    assert report("io-bound-loading", "dataset cached in RAM", runs) > 1.1
    # Followed, the workers read nothing from storage. The rule may still speak (their
    # waits for the trainer, busy on its own, look like I/O to it), but not of storage.
    still = [a.evidence for f in followed(tmp_path, after.args) for a in f.advice
             if a.id == "io-bound-loading"]
    print(f"followed: io-bound-loading in {len(still)} of {FOLLOWED_TICKS} frames")
    assert all(NO_READS in evidence for evidence in still), still


def _check_storage_evidence(evidence: str, frame: Frame, pid: int) -> None:
    """The workers' load quoted is the frame's: mostly blocked, not queueing for a core, and
    reading from storage at about a record per sample the steps take (within 3x: the read
    rate is the last tick's, the samples/s the window's mean; the median step would
    overstate a loader that delivers in bursts)."""
    load = worker_load(Context(frame, {}), pid)
    assert load is not None and load.blocked is not None
    assert load.words() in evidence
    assert load.blocked >= 0.5 and not load.starved
    read_mb_s = number(r"they read ([\d.]+) MB/s from storage", evidence)
    samples_per_s = state(frame).summary.samples_per_s
    assert samples_per_s
    records_mb_s = samples_per_s * RECORD_KB * 1024 / 1e6
    print(f"read {read_mb_s:.0f} MB/s from storage, records taken {records_mb_s:.0f} MB/s")
    assert 1 / 3 <= read_mb_s / records_mb_s <= 3, (read_mb_s, records_mb_s)
