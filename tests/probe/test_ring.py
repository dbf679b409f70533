"""The ring file: layout round trips, hostile files, permissions, a racing writer, dead owners."""

from __future__ import annotations

import mmap
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputop.probe import ring as ring_format
from gputop.probe.reader import RingError, RingReader
from gputop.sources.attach import RingAttachSource
from tests.helpers.probe import ROOT, header_only_ring, trainer_env

OPTIONAL = st.one_of(st.just(-1), st.integers(0, 1 << 61))
RECORD = st.tuples(
    st.integers(0, 1 << 61), st.integers(0, 1 << 61), st.integers(0, 1 << 61),
    *[OPTIONAL] * 8, st.integers(0, 1 << 20), st.integers(0, 15), st.integers(0, 1 << 20),
    OPTIONAL, OPTIONAL, *[st.integers(0, 1 << 20)] * 5, st.integers(0, (1 << 63) - 1),
)
# a record's words after `loader`: host_ns, sync_ns, no samples, no sites, no part samples
TAIL = (0, -1, 0, 0, 0, 0, 0, 0)


def _writer(directory: Path) -> ring_format.RingWriter:
    return ring_format.RingWriter(ring_format.ring_path(os.getpid(), directory=str(directory)))


@settings(max_examples=60, deadline=None)
@given(records=st.lists(RECORD, min_size=1, max_size=40))
def test_records_round_trip(tmp_path_factory: pytest.TempPathFactory, records: list) -> None:
    directory = tmp_path_factory.mktemp("ring")
    writer = _writer(directory)
    try:
        reader = RingReader(writer.path)
        for r in records:
            writer.append([r])  # one at a time: each published as it comes
        got = reader.read_new()
        assert [g[1:] for g in got] == [tuple(r) for r in records]  # the index, then as written
        assert [g.index for g in got] == list(range(len(records)))
        assert reader.dropped == 0
        reader.close()
    finally:
        writer.close()


def test_a_lapped_reader_counts_what_it_lost(ring_dir: Path) -> None:
    writer = _writer(ring_dir)
    reader = RingReader(writer.path)
    total = ring_format.SLOTS * 2 + 10
    writer.append([(n, 1, 2, -1, -1, -1, -1, -1, -1, -1, 1, 0, 0, 0, *TAIL)
                   for n in range(total)])
    got = reader.read_new()
    assert len(got) == ring_format.SLOTS
    assert reader.dropped == total - ring_format.SLOTS
    assert [g.step for g in got] == list(range(total - ring_format.SLOTS, total))
    writer.close()


def _slot_words(path: str, index: int) -> tuple[int, list[int]]:
    """The file offset of record `index`'s slot and its 16 words."""
    offset = ring_format.HEADER_SIZE + (index % ring_format.SLOTS) * ring_format.RECORD_SIZE
    with open(path, "rb") as f:
        f.seek(offset)
        return offset, list(ring_format.RECORD.unpack(f.read(ring_format.RECORD_SIZE)))


def _put_words(path: str, offset: int, words: list[int]) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(ring_format.RECORD.pack(*words))


def test_a_record_seen_before_all_its_stores_land_is_never_read_as_written(
    ring_dir: Path,
) -> None:
    """What a weakly ordered CPU can show a reader, which the sequence numbers alone would
    pass: record n's completed sequence over the previous lap's payload, and a payload
    torn in the middle. The check turns both into drops, never into steps."""
    writer = _writer(ring_dir)
    reader = RingReader(writer.path)
    writer.append([(n, 10 * n, 5, 1, -1, -1, -1, -1, -1, -1, 4, 0, 0, 1, *TAIL)
                   for n in range(ring_format.SLOTS + 3)])
    assert len(reader.read_new()) == ring_format.SLOTS
    writer.append([(n, 10 * n, 5, 1, -1, -1, -1, -1, -1, -1, 4, 0, 0, 1, *TAIL)
                   for n in range(ring_format.SLOTS + 3, ring_format.SLOTS + 6)])
    stale = ring_format.SLOTS + 3  # its slot held record 3: keep that payload and check
    offset, words = _slot_words(writer.path, stale)
    old_payload = [3, 30, 5, 1, -1, -1, -1, -1, -1, -1, 4, 0, 0, 1, *TAIL]
    old_check = ring_format.record_check(3, ring_format.PAYLOAD.pack(*old_payload))
    _put_words(writer.path, offset, [words[0], *old_payload, old_check])
    torn = stale + 1
    offset, words = _slot_words(writer.path, torn)
    words[2] += 1  # one field from another write
    _put_words(writer.path, offset, words)
    got = reader.read_new()
    assert [g.index for g in got] == [stale + 2]
    assert got[0].step == stale + 2 and got[0].start_ns == 10 * (stale + 2)
    assert reader.dropped == 2 + 3  # the two bad ones, and the three the lap took before
    writer.close()


def test_metadata_round_trips_and_stays_bounded(ring_dir: Path) -> None:
    from gputop.probe.steps import bounded_json

    writer = _writer(ring_dir)
    reader = RingReader(writer.path)
    facts: dict[str, object] = {f"k{i}": "x" * 10_000 for i in range(40)}
    blob = bounded_json({**facts, "num_workers": 4}, ring_format.META_CAP)
    assert len(blob) <= ring_format.META_CAP
    writer.set_meta(blob)
    meta = reader.read_meta()
    assert meta["num_workers"] == 4 and 0 < len(meta) < 41
    writer.set_meta(b"{not json")
    assert reader.read_meta() == {}
    writer.close()


class _SeenAtNamespace:
    """Stands in for ring_format.NAMESPACE: notes the file's first bytes when the namespace (the
    header's last field) is written."""

    def __init__(self) -> None:
        self.magic_then: bytes | None = None
        self.real = ring_format.NAMESPACE
        self.size = self.real.size

    def pack_into(self, buffer: mmap.mmap, offset: int, *values: int) -> None:
        self.magic_then = bytes(buffer[:len(ring_format.MAGIC)])
        self.real.pack_into(buffer, offset, *values)


def test_the_magic_is_written_last_so_a_reader_never_sees_half_a_header(
        ring_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scan that reads the header while the writer fills it would refuse the ring for good
    (a zero version or PID); with the magic last, an unfinished header reads as unwritten."""
    seen = _SeenAtNamespace()
    monkeypatch.setattr(ring_format, "NAMESPACE", seen)
    writer = _writer(ring_dir)
    monkeypatch.undo()
    try:
        assert seen.magic_then == bytes(len(ring_format.MAGIC))
        assert RingReader(writer.path).header.pid == os.getpid()
    finally:
        writer.close()


def test_ring_is_private_and_unlinked_on_close(ring_dir: Path) -> None:
    old = os.umask(0)
    try:
        writer = _writer(ring_dir)
    finally:
        os.umask(old)
    assert os.stat(writer.path).st_mode & 0o777 == 0o600
    assert Path(writer.path).name == f"gputop-{os.getuid()}-{os.getpid()}.ring"
    writer.close()
    assert not os.path.exists(writer.path)


def test_a_symlink_at_the_ring_path_is_never_followed(ring_dir: Path) -> None:
    target = ring_dir / "victim"
    target.write_text("keep me")
    os.symlink(target, ring_format.ring_path(os.getpid(), directory=str(ring_dir)))
    writer = _writer(ring_dir)
    assert not os.path.islink(writer.path)
    assert target.read_text() == "keep me"
    writer.close()
    with pytest.raises(RingError):
        os.symlink(target, writer.path)
        RingReader(writer.path)


@settings(max_examples=200, deadline=None)
@given(blob=st.binary(max_size=ring_format.HEADER_SIZE + 3 * ring_format.RECORD_SIZE))
def test_random_files_never_raise_anything_but_ring_error(
    tmp_path_factory: pytest.TempPathFactory, blob: bytes
) -> None:
    path = tmp_path_factory.mktemp("junk") / "gputop-0-1.ring"
    path.write_bytes(blob)
    _read_everything(path)


def test_truncated_and_corrupted_rings_never_raise(ring_dir: Path) -> None:
    writer = _writer(ring_dir)
    writer.append([(n, n, n, n, -1, -1, -1, -1, -1, -1, 4, 0, 0, 1, *TAIL) for n in range(50)])
    writer.set_meta(b'{"num_workers": 2}')
    good = Path(writer.path).read_bytes()
    writer.close()
    rng = random.Random(7)
    path = ring_dir / "copy.ring"
    for cut in (0, 7, 100, ring_format.HEADER_SIZE, ring_format.HEADER_SIZE + 5, len(good) - 1):
        path.write_bytes(good[:cut])
        _read_everything(path)
    for _ in range(300):
        raw = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            end = ring_format.HEADER_SIZE + 60 * ring_format.RECORD_SIZE
            raw[rng.randrange(0, end)] = rng.randrange(256)
        path.write_bytes(bytes(raw))
        _read_everything(path)


def _read_everything(path: Path) -> None:
    try:
        reader = RingReader(str(path))
    except RingError:
        return
    try:
        reader.read_new()
        reader.read_meta()
    except RingError:
        pass
    finally:
        reader.close()


WRITER = """
import sys
from gputop.probe import ring
w = ring.RingWriter(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
for n in range(int(sys.argv[2])):
    w.append([(n, 3*n+1, 5*n+2, 7*n+3, 11*n+4, 13*n+5, 17*n+6, 19*n+7, 23*n+8, 29*n+9,
               n % 97, n % 13, n & 15, n % 5, 31*n, -1, n % 7, n % 3, n % 5, n % 2, n % 11, 0)])
print("done", flush=True)
sys.stdin.readline()
w.close()
"""


def _pattern_ok(r) -> bool:
    n = r.step
    return (r.index == n and (r.start_ns, r.duration_ns, r.data_ns, r.h2d_ns, r.forward_ns,
            r.backward_ns, r.optimizer_ns, r.gpu_ns, r.gpu_gap_ns, r.batch_size, r.epoch,
            r.flags, r.loader, r.host_ns, r.sync_ns, r.samples, r.host_site, r.host_site_samples,
            r.data_site, r.data_site_samples) == (3*n+1, 5*n+2, 7*n+3, 11*n+4, 13*n+5, 17*n+6,
            19*n+7, 23*n+8, 29*n+9, n % 97, n % 13, n & 15, n % 5, 31*n, -1, n % 7, n % 3,
            n % 5, n % 2, n % 11))


@pytest.mark.slow
def test_full_speed_writer_never_yields_torn_or_invented_records(tmp_path: Path) -> None:
    total = 200_000
    path = str(tmp_path / "gputop-0-1.ring")
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, path, str(total)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True, env=trainer_env(tmp_path), cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "ready"
    reader = RingReader(path)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    seen = bad = 0
    while True:
        done = proc.poll() is not None or _ready(proc)
        for r in reader.read_new():
            seen += 1
            bad += not _pattern_ok(r)
        if done:
            break
        time.sleep(0.02)  # a slow reader: the writer laps it
    for r in reader.read_new():
        seen += 1
        bad += not _pattern_ok(r)
    proc.stdin.write("bye\n")
    proc.stdin.flush()
    proc.wait(timeout=30)
    assert bad == 0
    assert seen + reader.dropped == total
    assert reader.dropped > 0 and seen >= ring_format.SLOTS


def _ready(proc: subprocess.Popen[str]) -> bool:
    import select

    assert proc.stdout is not None
    if select.select([proc.stdout], [], [], 0)[0]:
        return proc.stdout.readline().strip() == "done"
    return False


@pytest.mark.slow
def test_a_killed_trainers_ring_is_ignored_and_removed(tmp_path: Path) -> None:
    code = ("import gputop.probe as p, time; p.annotate(x=1); print('up', flush=True); "
            "time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env=trainer_env(tmp_path), cwd=ROOT)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    path = Path(ring_format.ring_path(proc.pid, directory=str(tmp_path)))
    source = RingAttachSource(directory=str(tmp_path))
    assert source.probe_pids() == {proc.pid}
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert path.exists()  # no exit handler ran
    assert source.probe_pids() == frozenset()
    source.remove_dead_rings()
    assert not path.exists()


def _own_ticks() -> int:
    ticks = ring_format.own_start_ticks()
    assert ticks is not None
    return ticks


def test_the_header_records_the_writers_pid_namespace(ring_dir: Path) -> None:
    writer = _writer(ring_dir)
    st = os.stat("/proc/self/ns/pid")
    assert RingReader(writer.path).header.namespace == (st.st_dev, st.st_ino)
    writer.close()


def test_a_ring_left_by_an_earlier_process_with_the_same_pid_is_replaced(ring_dir: Path) -> None:
    path = ring_format.ring_path(os.getpid(), directory=str(ring_dir))
    Path(path).write_bytes(header_only_ring(os.getpid(), _own_ticks() + 1,
                                            ring_format.pid_namespace()))
    writer = _writer(ring_dir)
    assert writer.path == path and writer.squatter is None
    assert RingReader(path).header.start_ticks == _own_ticks()
    writer.close()


def test_an_old_file_at_our_name_that_is_no_ring_is_replaced(ring_dir: Path) -> None:
    path = ring_format.ring_path(os.getpid(), directory=str(ring_dir))
    Path(path).write_bytes(b"\0" * 64)  # what a predecessor that crashed in creating it leaves
    past = time.time() - 60
    os.utime(path, (past, past))
    writer = _writer(ring_dir)
    assert writer.path == path and RingReader(path).header.pid == os.getpid()
    writer.close()


MAYBE_LIVE = {  # files of ours at our ring's name that may be another process's live ring
    "a file no ring yet, young: a writer may be creating it": lambda: b"\0" * 64,
    "a ring of another PID namespace, whose trainer has our PID there": lambda: (
        header_only_ring(os.getpid(), _own_ticks() + 1, (1, 12345))),
    "a ring whose namespace is unknown (a probe before the field)": lambda: (
        header_only_ring(os.getpid(), _own_ticks() + 1, None)),
}


@pytest.mark.parametrize("case", MAYBE_LIVE)
def test_a_file_of_ours_that_may_be_a_live_ring_keeps_our_ring_from_its_name(
    ring_dir: Path, case: str
) -> None:
    """The ring takes a second name, silently: no other user is squatting."""
    path = Path(ring_format.ring_path(os.getpid(), directory=str(ring_dir)))
    held = MAYBE_LIVE[case]()
    path.write_bytes(held)
    writer = _writer(ring_dir)
    assert writer.path != str(path) and writer.squatter is None
    assert path.read_bytes() == held
    assert RingReader(writer.path).header.pid == os.getpid()
    writer.close()
