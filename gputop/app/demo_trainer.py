"""The trainer `gputop --demo` runs: a small, real training loop, with DataLoader workers in
most scenarios.

With torch (when it is already importable; the demo never installs it): a CPU MLP fed by
a DataLoader with worker processes (named pt_data_worker by torch itself). Without torch:
a standard-library trainer whose multiprocessing workers name themselves pt_data_worker,
labelled as such in the step pane. Either way the real probe times every step, and it
exits when its parent (gputop) dies.

`--scenario` makes it behave as the simulated GPUs of that scenario look: starved
scenarios wait on slow workers, compute-bound ones compute far longer than a batch takes
to load, small-batch computes on small batches of a wide model whose optimizer update (the
same for any batch) is much of each step; host-bound runs nanoGPT's loop, whose get_batch
(demo_host_bound.py) takes most of each step on the main thread; cpu-starved computes as
compute-bound does, pinned to one CPU that a busy process of the demo's own
(demo_cpu_hog.py) spins on. So GPU rows, step pane and advice agree.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

PR_SET_NAME = 15
PR_SET_PDEATHSIG = 1
STDLIB_NOTE = "stdlib demo trainer: torch not installed"
UPDATE_WORK = {"sgd": 1000, "adam": 30_000}  # the stand-in's optimizer arithmetic
WIDTH = 64


@dataclass(frozen=True)
class Shape:
    """How one scenario's trainer behaves: workers, batch, seconds a worker spends per
    sample (the starvation knob), forward/backward passes per step (the compute knob), and
    the optimizer ("adam" updates three numbers per parameter where "sgd" updates one);
    `loop`: "loader" (a DataLoader's) or "get-batch" (nanoGPT's, demo_host_bound.py);
    `cpu_hog`: pinned to one CPU that the demo's busy process shares."""

    workers: int
    batch: int
    item_sleep: float
    passes: int
    hidden: int = 128
    optimizer: str = "sgd"
    loop: str = "loader"
    cpu_hog: bool = False


STARVED = Shape(workers=3, batch=32, item_sleep=0.004, passes=1)
COMPUTING = Shape(workers=3, batch=64, item_sleep=0.0, passes=12, hidden=512)
SHAPES: dict[str, Shape] = {
    "data-starved": STARVED,
    "mixed": STARVED,  # GPU 0, the demo trainer's, plays data-starved in "mixed"
    "compute-bound": COMPUTING,
    # Small batches of a wide model: each step's update outweighs its forward and backward.
    "small-batch": replace(COMPUTING, batch=8, passes=2, hidden=1024, optimizer="adam"),
    # Memory full, util zero: the classic starved GPU. One batch a second or so.
    "memory-full-util-zero": replace(STARVED, item_sleep=0.04),
    # nanoGPT's loop: no workers; the main thread's get_batch outweighs a small model.
    "host-bound": Shape(workers=0, batch=16, item_sleep=0.0, passes=1, hidden=32,
                        loop="get-batch"),
    # Computes as compute-bound does, but gets a third of the one core it may use.
    "cpu-starved": replace(COMPUTING, cpu_hog=True),
}
NO_TRAINER = ("idle",)  # idle GPUs: nothing trains


def prctl(option: int, value: Any) -> None:
    """Best-effort prctl: the demo still runs where libc or prctl is unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def die_with_parent(parent: int) -> None:
    """Get SIGTERM when the parent dies; if it already has, leave now."""
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        sys.exit(0)


def orphaned(parent: int) -> bool:
    """True once the process that started us is gone (backup for PDEATHSIG)."""
    return os.getppid() != parent


_children: list[subprocess.Popen[bytes]] = []  # the demo's busy process, reaped as we go


def _leave_now(signum: int, frame: object) -> None:
    """On SIGTERM: remove the probe's ring (os._exit skips the exit handlers that would),
    end the busy process, go."""
    probe = sys.modules.get("gputop.probe")
    if probe is not None:
        probe.unlink_ring()
    _end_children()
    os._exit(0)


def _end_children() -> None:
    for child in _children:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            child.kill()
            child.wait(1.0)


def probe_module() -> Any:
    """gputop.probe, or None where it cannot be imported."""
    try:
        import gputop.probe as probe
    except ImportError:
        return None
    return probe


def phase_of(probe: Any, name: str) -> contextlib.AbstractContextManager[Any]:
    """`probe`'s timer of phase `name` (nothing without a probe)."""
    return probe.phase(name) if probe is not None else contextlib.nullcontext()


def _watch(probe: Any, loader: Iterable[Any], batch_size: int | None = None) -> Iterator[Any]:
    """`loader` timed by the probe; `batch_size`: each item's samples, where the loader
    cannot say (the stand-in's queue), so the pane shows samples/s."""
    return iter(probe.watch(loader, batch_size)) if probe is not None else iter(loader)


def run_torch(args: argparse.Namespace, parent: int) -> None:
    """The torch loop: workers make batches at the scenario's pace, the model computes its
    passes over each."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    torch.set_num_threads(1)

    class Samples(Dataset[tuple[torch.Tensor, torch.Tensor]]):
        def __len__(self) -> int:
            return 10_000_000

        def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
            # Runs in the workers; torch ends them when this trainer goes away.
            if args.item_sleep:
                time.sleep(args.item_sleep)
            x = torch.randn(WIDTH)
            return x, (x.sum() > 0).long()

    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, args.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(args.hidden, 2))
    optimizer = (torch.optim.Adam(model.parameters(), lr=1e-3) if args.optimizer == "adam"
                 else torch.optim.SGD(model.parameters(), lr=0.01))
    loss_fn = torch.nn.CrossEntropyLoss()
    probe = probe_module()
    if probe is not None:
        probe.annotate(device="cpu", num_threads=1, demo=True, scenario=args.scenario)
    while not orphaned(parent):
        loader = DataLoader(Samples(), batch_size=args.batch, num_workers=args.workers,
                            pin_memory=False, persistent_workers=False, prefetch_factor=2)
        for step, (x, y) in enumerate(_watch(probe, loader)):
            optimizer.zero_grad()
            for _ in range(args.passes):  # the compute knob: gradients accumulate
                with phase_of(probe, "forward"):
                    loss = loss_fn(model(x), y)
                with phase_of(probe, "backward"):
                    loss.backward()
            with phase_of(probe, "optimizer"):
                optimizer.step()
            if step % 20 == 0 and orphaned(parent):
                return
            if step >= args.epoch_steps:
                break


def run_host_bound_torch(args: argparse.Namespace, parent: int) -> None:
    """nanoGPT's loop (demo_host_bound.py) with a small torch language model, whose forward
    returns (logits, loss); no phases of its own: the probe's torch hooks time it."""
    import torch

    from gputop.app.demo_host_bound import ALPHABET, BLOCK, DOC_CHARS, ORPHAN_CHECK_STEPS, Corpus

    torch.set_num_threads(1)
    corpus = Corpus()
    text = torch.tensor([corpus.stoi[char] for char in corpus.text], dtype=torch.uint8)

    def get_batch() -> tuple[torch.Tensor, torch.Tensor]:
        """`batch` documents, each tokenized whole (its characters ranked by torch.unique,
        as a per-document vocabulary would) and cropped to a block: inputs and targets."""
        xs, ys = [], []
        for start in torch.randint(len(text) - DOC_CHARS, (args.batch,)).tolist():
            doc = text[start:start + DOC_CHARS].long()
            _, ids = torch.unique(doc, sorted=True, return_inverse=True)
            at = start % (DOC_CHARS - BLOCK - 1)
            xs.append(ids[at:at + BLOCK])
            ys.append(ids[at + 1:at + BLOCK + 1])
        return torch.stack(xs), torch.stack(ys)

    class TinyLM(torch.nn.Module):
        def __init__(self, vocab: int, width: int) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(vocab, width)
            self.head = torch.nn.Linear(width, vocab)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            logits = self.head(torch.relu(self.embed(x)))
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
            return logits, loss

    model = TinyLM(len(ALPHABET), args.hidden)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    probe = probe_module()
    if probe is not None:
        probe.annotate(device="cpu", num_threads=1, demo=True, scenario=args.scenario,
                       batch_size=args.batch)
    X, Y = get_batch()
    step = 0
    while True:
        _logits, loss = model(X, Y)
        X, Y = get_batch()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        if step % ORPHAN_CHECK_STEPS == 0 and orphaned(parent):
            return


def _stand_in_worker(queue: Any, parent: int, item_sleep: float, batch: int) -> None:
    prctl(PR_SET_NAME, b"pt_data_worker")
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    while os.getppid() == parent:
        if item_sleep:
            time.sleep(item_sleep * batch / 4)
        queue.put(sum(i * i for i in range(2000)))


def run_stand_in(args: argparse.Namespace, parent: int) -> None:
    """No torch: multiprocessing workers named pt_data_worker feed a queue; the loop's
    forward, backward and optimizer are arithmetic, timed by the same probe."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    queue = ctx.Queue(maxsize=8)
    me = os.getpid()
    workers = [ctx.Process(target=_stand_in_worker, args=(queue, me, args.item_sleep, args.batch),
                           daemon=True) for _ in range(args.workers)]
    for worker in workers:
        worker.start()
    probe = probe_module()
    if probe is not None:
        probe.annotate(note=STDLIB_NOTE, num_workers=args.workers, batch_size=args.batch,
                       device="cpu", num_threads=1, demo=True)

    def batches() -> Iterator[int]:
        while not orphaned(parent):
            yield queue.get()

    for item in _watch(probe, batches(), args.batch):
        for _ in range(args.passes):
            with phase_of(probe, "forward"):
                sum(i * item % 7 for i in range(3000))
            with phase_of(probe, "backward"):
                sum(i * item % 5 for i in range(5000))
        with phase_of(probe, "optimizer"):
            sum(i * item % 3 for i in range(UPDATE_WORK[args.optimizer]))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The knobs: a scenario's shape, each part of which a flag may override."""
    parser = argparse.ArgumentParser(prog="python -m gputop.app.demo_trainer")
    parser.add_argument("--scenario", choices=sorted(SHAPES), default="data-starved",
                        help="behave as this --demo scenario's GPUs look (default data-starved)")
    parser.add_argument("--workers", type=int)
    parser.add_argument("--batch", type=int)
    parser.add_argument("--item-sleep", type=float,
                        help="seconds a worker spends per sample (data starvation knob)")
    parser.add_argument("--passes", type=int, help="forward/backward passes per step")
    parser.add_argument("--hidden", type=int, help="width of the model's hidden layers")
    parser.add_argument("--optimizer", choices=("sgd", "adam"))
    parser.add_argument("--epoch-steps", type=int, default=300)
    parser.add_argument("--stand-in", action="store_true", help="never use torch")
    args = parser.parse_args(argv)
    shape = SHAPES[args.scenario]
    for knob in ("workers", "batch", "item_sleep", "passes", "hidden", "optimizer"):
        if getattr(args, knob) is None:
            setattr(args, knob, getattr(shape, knob))
    args.loop, args.cpu_hog = shape.loop, shape.cpu_hog
    return args


Loop = Callable[[argparse.Namespace, int], None]


def _loop(args: argparse.Namespace, use_torch: bool) -> Loop:
    """The scenario's training loop, with torch or the stand-in's."""
    if args.loop == "get-batch":
        from gputop.app import demo_host_bound

        return run_host_bound_torch if use_torch else demo_host_bound.run_stand_in
    return run_torch if use_torch else run_stand_in


def pin_beside_hog() -> subprocess.Popen[bytes] | None:
    """Pin this process to one of its CPUs and start the demo's busy process on it (None
    where affinity cannot be set: then nothing is started)."""
    try:
        cpu = max(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
    except (AttributeError, OSError, ValueError):
        return None
    from gputop.app.demo_cpu_hog import start_cpu_hog

    hog = start_cpu_hog(cpu)
    _children.append(hog)
    return hog


def main(argv: list[str] | None = None) -> int:
    """Parse the knobs and train until the parent goes away or we are signalled."""
    args = parse_args(argv)
    parent = os.getppid()
    die_with_parent(parent)
    signal.signal(signal.SIGTERM, _leave_now)
    use_torch = not args.stand_in and importlib.util.find_spec("torch") is not None
    if args.cpu_hog:
        pin_beside_hog()  # the busy process also dies with us (PDEATHSIG)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            _loop(args, use_torch)(args, parent)
    finally:
        _end_children()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
