"""A CPU trainer shaped by its flags; trains until killed, writes READY after its first step.

--sleep-ms makes each sample wait (storage-like), --spin-ms makes it burn CPU (decode-like),
--passes sets how much compute each batch gets, --step-spin-ms adds that much CPU time to
each step's compute (a cost in CPU time, the same on any machine), --hidden the model's
width, --optimizer which optimizer steps it. The probe records its loader settings.
--copies times that many host-side copies of each batch as the probe's h2d phase (what
.to(device) does from pageable memory); --claim-device makes it tell the probe it trains
on that device (a CUDA trainer, as far as the probe's facts go).
--stats gets the trainer's own input share and, after --measure-after steps, its samples/s.
--data-file makes each sample read a record of --record-kb KiB from that file, from storage
each time (O_DIRECT: the page cache keeps none of it, as for a dataset larger than RAM);
--cache-in-ram reads the file once into memory at start, and samples take their records
from there.
--mmap-file makes each sample read a --record-kb record through one shared read-only mmap
of that file (the page cache holds it, once for every worker; the run starts with none of it
cached); --table-mb gives each sample a label from a table of that many MiB (a dataset's
annotations), built once before the workers fork and shared by them, or, with
--table-per-worker, built by each worker for itself (a full copy per worker, as a Dataset
that loads its annotations lazily in each worker has).
--image-kb makes each sample a decoded image of that many KiB of uint8, handed on as it is
(uint8 until the model, which converts and pools it to its width); --float64-round-trips
normalizes it in float64 and back to float32 that many times in the worker instead, as a
pipeline that round-trips through numpy float64 does, handing on float32.
Under torchrun, --rank-workers gives each rank its own num_workers (DDP over gloo); rank 0
writes --ready and --stats, with the job's samples/s (every rank's batches).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import time
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

WIDTH = 64
WARMUP_STEPS = 3
SHUFFLE_STRIDE = 2654435761  # odd: index * stride modulo a power of two visits every record


class Records:
    """The fixed-size records of a data file, read from storage each time one is asked for
    (the page cache keeps none of them), or from a copy in RAM read once at start."""

    def __init__(self, path: str, record_bytes: int, in_ram: bool) -> None:
        self.record_bytes = record_bytes
        self.count = os.path.getsize(path) // record_bytes
        self.in_ram: bytes | None = None
        if in_ram:
            with open(path, "rb") as f:
                self.in_ram = f.read()
            return
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        self.buffers: dict[int, mmap.mmap] = {}

    def first_byte(self, index: int) -> int:
        """The first byte of record `index` (modulo the count); from storage, the whole record
        is read."""
        offset = index % self.count * self.record_bytes
        if self.in_ram is not None:
            return self.in_ram[offset]
        # O_DIRECT reads into page-aligned memory; each worker process has its own.
        buffer = self.buffers.get(os.getpid())
        if buffer is None:
            buffer = self.buffers[os.getpid()] = mmap.mmap(-1, self.record_bytes,
                                                           flags=mmap.MAP_PRIVATE)
        os.preadv(self.fd, [buffer], offset)
        return buffer[0]


class Mapped:
    """The fixed-size records of a data file through one shared read-only mmap: the page
    cache holds each record once for every process that maps the file."""

    def __init__(self, path: str, record_bytes: int) -> None:
        self.record_bytes = record_bytes
        with open(path, "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # start cold
            self.map = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        self.count = len(self.map) // record_bytes

    def first_byte(self, index: int) -> int:
        """The first byte of a record, every page of it read; records in a shuffled order (a
        fixed odd stride through the file, as a shuffling sampler takes them): storage read
        ahead of the one asked for is not what comes next."""
        offset = index * SHUFFLE_STRIDE % self.count * self.record_bytes
        pages = memoryview(self.map)[offset:offset + self.record_bytes:mmap.PAGESIZE]
        return sum(pages) % 256


class Table:
    """A label table of `size` bytes, built once (shared by the workers forked afterwards)
    or by each process that looks a label up (a copy per worker)."""

    def __init__(self, size: int, per_worker: bool) -> None:
        self.size = size
        self.per_worker = per_worker
        self.owner = 0
        self.rows = b"" if per_worker else _filled(size)

    def label(self, index: int) -> int:
        """The label of sample `index`."""
        if self.per_worker and self.owner != os.getpid():
            self.owner, self.rows = os.getpid(), _filled(self.size)
        return self.rows[index * mmap.PAGESIZE % self.size] % 2


def _filled(size: int) -> bytes:
    """`size` bytes written, so every page of them is resident."""
    return bytes(range(256)) * (size // 256)


class Samples(Dataset):
    """Endless small samples that take --sleep-ms waiting and --spin-ms computing each, and
    a record of a data file when there are `records`."""

    def __init__(self, sleep_ms: float, spin_ms: float, records: Records | Mapped | None = None,
                 table: Table | None = None, image_bytes: int = 0, round_trips: int = 0) -> None:
        self.sleep_s = sleep_ms / 1000
        self.spin_ns = int(spin_ms * 1e6)
        self.records = records
        self.table = table
        self.image_bytes = image_bytes
        self.round_trips = round_trips

    def __len__(self) -> int:
        return 10_000_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        _spin(self.spin_ns)
        value = index if self.records is None else self.records.first_byte(index)
        label = index % 2 if self.table is None else self.table.label(index)
        if self.image_bytes:
            return self._image(value), torch.tensor(label)
        return torch.full((WIDTH,), float(value % 7)), torch.tensor(label)

    def _image(self, value: int) -> torch.Tensor:
        """A decoded uint8 image, or its float32 after the float64 round trips."""
        image = torch.full((self.image_bytes,), value % 251, dtype=torch.uint8)
        if not self.round_trips:
            return image
        pixels = image.to(torch.float64)
        for _ in range(self.round_trips):
            pixels = ((pixels - 127.5) / 64.0).to(torch.float32).to(torch.float64)
        return pixels.to(torch.float32)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ready", required=True)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--sleep-ms", type=float, default=0.0)
    parser.add_argument("--spin-ms", type=float, default=0.0)
    parser.add_argument("--passes", type=int, default=1)
    parser.add_argument("--step-spin-ms", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    parser.add_argument("--copies", type=int, default=0, help="copies of each batch, as h2d")
    parser.add_argument("--claim-device", help="annotate this device after the first step")
    parser.add_argument("--stats", help="write the trainer's own input share here now and then")
    parser.add_argument("--measure-after", type=int, default=20,
                        help="steps before samples/s is measured (start-up and prefetch done)")
    parser.add_argument("--data-file", help="each sample reads a record of it from storage")
    parser.add_argument("--record-kb", type=int, default=1024)
    parser.add_argument("--cache-in-ram", action="store_true",
                        help="read --data-file into memory once at start")
    parser.add_argument("--mmap-file", help="each sample reads a record of it through an mmap")
    parser.add_argument("--table-mb", type=int, default=0, help="a label table this large")
    parser.add_argument("--table-per-worker", action="store_true",
                        help="each worker builds its own copy of the label table")
    parser.add_argument("--image-kb", type=int, default=0, help="each sample a uint8 image")
    parser.add_argument("--float64-round-trips", type=int, default=0,
                        help="the worker normalizes each image in float64 this many times")
    parser.add_argument("--rank-workers", help="under torchrun: each rank's num_workers, "
                        "comma-separated (DDP over gloo)")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    rank, ranks, workers = 0, 1, args.workers
    if args.rank_workers:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank, ranks = dist.get_rank(), dist.get_world_size()
        workers = int(args.rank_workers.split(",")[rank])
    records: Records | Mapped | None = None
    if args.data_file:
        records = Records(args.data_file, args.record_kb * 1024, args.cache_in_ram)
    elif args.mmap_file:
        records = Mapped(args.mmap_file, args.record_kb * 1024)
    table = Table(args.table_mb * 2**20, args.table_per_worker) if args.table_mb else None
    loader = DataLoader(Samples(args.sleep_ms, args.spin_ms, records, table,
                                args.image_kb * 1024, args.float64_round_trips),
                        batch_size=args.batch_size, num_workers=workers,
                        persistent_workers=workers > 0, prefetch_factor=4 if workers else None)
    hidden = args.hidden
    model: nn.Module = nn.Sequential(nn.Linear(WIDTH, hidden), nn.ReLU(),
                                     nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 2))
    if args.rank_workers:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model)
    opt = (torch.optim.Adam(model.parameters(), lr=1e-3) if args.optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=0.01))
    copy = _timed_copy(args.copies)
    step_spin_ns = int(args.step_spin_ms * 1e6)
    ready = False
    waited = total = steps = 0
    measured_from = 0.0
    it = iter(loader)
    while True:
        t0 = time.perf_counter_ns()
        x, y = next(it)
        t1 = time.perf_counter_ns()
        x = copy(x)
        if x.shape[1] != WIDTH:  # an image: converted and pooled where the model starts
            x = x.to(torch.float32).view(x.shape[0], WIDTH, -1).mean(-1)
        _spin(step_spin_ns)
        for _ in range(args.passes):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
        opt.step()
        steps += 1
        if steps > WARMUP_STEPS:  # the probe leaves the first steps of an epoch out too
            waited += t1 - t0
            total += time.perf_counter_ns() - t0
        if steps == args.measure_after:
            measured_from = time.perf_counter()
        if rank != 0:
            continue  # rank 0 speaks for the job: DDP keeps the ranks in step
        if args.stats and steps % 10 == 0 and total:
            stats = {"input_percent": 100.0 * waited / total, "steps": steps}
            if steps > args.measure_after:
                stats["samples_per_s"] = (ranks * args.batch_size * (steps - args.measure_after)
                                          / (time.perf_counter() - measured_from))
            _write_json(args.stats, stats)
        if not ready:
            ready = True
            if args.claim_device:  # after the first step: the probe notes the optimizer's
                from gputop import probe  # device then, and this fact comes after it

                probe.annotate(device=args.claim_device)
            _write_json(args.ready, {"pid": os.getpid(), "num_threads": torch.get_num_threads()})


def _spin(ns: int) -> None:
    """Burn `ns` of this thread's CPU time (not wall time: a core shared with others only
    makes it take longer)."""
    until = time.thread_time_ns() + ns
    x = 0
    while time.thread_time_ns() < until:
        x += 1


def _timed_copy(copies: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """Without copies, the batch as it is; with them, the last of `copies` copies of it from
    pageable memory (what .to(device) does without pin_memory), timed as the h2d phase."""
    if not copies:
        return lambda x: x
    from gputop import probe

    def copy(x: torch.Tensor) -> torch.Tensor:
        with probe.phase("h2d"):
            for _ in range(copies):
                x = x.clone()
            return x

    return copy


def _write_json(path: str, data: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
