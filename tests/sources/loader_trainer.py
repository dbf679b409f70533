"""A real CPU trainer with a real DataLoader whose workers stay alive until it is killed.

Writes READY (JSON, atomically) once every worker has started: its own pid, the worker
pids each worker reported from worker_init_fn, and whether a pin-memory thread exists.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    """Small tensors, slowly: workers stay busy and alive while the test looks."""

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.02)
        return torch.full((8,), float(index))


class RecordWorker:
    """worker_init_fn: each worker writes its own pid to OUT/worker-ID.pid."""

    def __init__(self, out: str) -> None:
        self.out = out

    def __call__(self, worker_id: int) -> None:
        info = torch.utils.data.get_worker_info()
        assert info is not None and info.id == worker_id
        _write(os.path.join(self.out, f"worker-{worker_id}.pid"), str(os.getpid()))


def _write(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _named_pin_thread(stop: threading.Event) -> None:
    torch.multiprocessing._set_thread_name("pt_data_pin")
    stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--start-method", choices=("fork", "spawn", "forkserver"), default="fork")
    parser.add_argument("--pin-memory", action="store_true")
    parser.add_argument("--name-pin-thread", action="store_true",
                        help="start a real thread named pt_data_pin (CPU torch has none)")
    args = parser.parse_args()
    if "LOCAL_RANK" in os.environ:  # under torchrun: one folder per rank
        args.out = os.path.join(args.out, f"rank{os.environ['LOCAL_RANK']}")
        os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    stop = threading.Event()
    if args.name_pin_thread:
        threading.Thread(target=_named_pin_thread, args=(stop,), daemon=True).start()
    loader = DataLoader(
        SlowDataset(),
        batch_size=4,
        num_workers=args.workers,
        persistent_workers=True,
        pin_memory=args.pin_memory,
        multiprocessing_context=args.start_method,
        worker_init_fn=RecordWorker(args.out),
    )
    batches = iter(loader)
    next(batches)
    paths = [os.path.join(args.out, f"worker-{i}.pid") for i in range(args.workers)]
    while not all(os.path.exists(p) for p in paths):
        next(batches)
    worker_pids = sorted(int(Path(p).read_text()) for p in paths)
    ready = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "worker_pids": worker_pids,
        "torch": torch.__version__,
        "pin_memory_thread": getattr(batches, "_pin_memory_thread", None) is not None,
        "named_pin_thread": args.name_pin_thread,
    }
    _write(os.path.join(args.out, "READY"), json.dumps(ready))
    while True:
        next(batches)


if __name__ == "__main__":
    main()
