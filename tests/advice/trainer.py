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


class Samples(Dataset):
    """Endless small samples that take --sleep-ms waiting and --spin-ms computing each, and
    a record of a data file when there are `records`."""

    def __init__(self, sleep_ms: float, spin_ms: float, records: Records | None = None) -> None:
        self.sleep_s = sleep_ms / 1000
        self.spin_ns = int(spin_ms * 1e6)
        self.records = records

    def __len__(self) -> int:
        return 10_000_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        _spin(self.spin_ns)
        value = index if self.records is None else self.records.first_byte(index)
        return torch.full((WIDTH,), float(value % 7)), torch.tensor(index % 2)


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
    records = (Records(args.data_file, args.record_kb * 1024, args.cache_in_ram)
               if args.data_file else None)
    loader = DataLoader(Samples(args.sleep_ms, args.spin_ms, records),
                        batch_size=args.batch_size, num_workers=workers,
                        persistent_workers=workers > 0, prefetch_factor=4 if workers else None)
    hidden = args.hidden
    model = nn.Sequential(nn.Linear(WIDTH, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                          nn.ReLU(), nn.Linear(hidden, 2))
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
