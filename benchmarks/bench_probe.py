"""Probe cost: ns per event beside a bare pack_into floor, and a real training loop's slowdown.

Run from the repository root: `python benchmarks/bench_probe.py [--json]`.
Every figure compares loops run interleaved in the same process, so the shared machine's
drift (its speed changes 2x within seconds) hits both sides alike.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gputop.probe as probe
import gputop.probe.torch as probe_torch
from gputop.probe import ring as layout
from gputop.probe.recorder import Recorder

EVENTS_PER_STEP = 5  # one fetch (closes a step, opens the next) and four phases
ROUND_STEPS = 5_000
ROUNDS = 200
STEP_MS = 5.0  # the "real CPU training loop with ~5 ms steps"


def use_private_recorder(directory: str) -> Recorder:
    """A recorder without the torch patch, so 'without the probe' really is without it."""
    path = layout.ring_path(os.getpid(), directory=directory)
    rec = Recorder(lambda: layout.RingWriter(path))
    probe._use(rec)
    return rec


def probe_cost(steps: int = ROUND_STEPS, rounds: int = ROUNDS) -> dict[str, float]:
    """ns per fully instrumented step, a bare loop, and a bare pack_into of one record.

    The loops take turns for `rounds` rounds; each keeps its fastest round (other tenants
    only ever add time) and the median round is reported beside it.
    """
    items = list(range(steps))
    phase = probe.phase

    def probed() -> None:
        for _ in probe.watch(items):
            with phase("h2d"):
                pass
            with phase("forward"):
                pass
            with phase("backward"):
                pass
            with phase("optimizer"):
                pass

    def bare() -> None:
        for _ in items:
            pass

    buf = bytearray(layout.FILE_SIZE)
    pack = layout.RECORD.pack_into
    offset = layout.HEADER_SIZE

    def floor() -> None:
        for i in items:
            pack(buf, offset, 2 * i + 1, i, 1, 2, 3, 4, 5, 6, 7, -1, -1, 32, 0, 2, 1, 0)

    times = interleaved({"probed": probed, "bare": bare, "floor": floor}, rounds)
    fastest = {name: min(ns) / steps for name, ns in times.items()}
    median = {name: statistics.median(ns) / steps for name, ns in times.items()}
    overhead = fastest["probed"] - fastest["bare"]
    return {
        "probed_step_ns": fastest["probed"],
        "bare_loop_step_ns": fastest["bare"],
        "probe_overhead_per_step_ns": overhead,
        "probe_overhead_per_event_ns": overhead / EVENTS_PER_STEP,
        "median_round_per_event_ns": (median["probed"] - median["bare"]) / EVENTS_PER_STEP,
        "bare_pack_into_ns": fastest["floor"],
        "overhead_over_floor": overhead / fastest["floor"],
    }


def interleaved(
    loops: dict[str, Callable[[], object]], rounds: int,
    setups: dict[str, tuple[Callable[[], object], Callable[[], object]]] | None = None,
) -> dict[str, list[int]]:
    """ns of each loop in each round; the order rotates so none always runs first.

    A loop that returns an int has timed itself. `setups` gives a loop a (before, after)
    pair run around it, outside the timing.
    """
    names = list(loops)
    times: dict[str, list[int]] = {name: [] for name in names}
    nothing = (lambda: None, lambda: None)
    for r in range(rounds + 1):  # round 0 warms every loop up
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            before, after = (setups or {}).get(name, nothing)
            before()
            t0 = time.perf_counter_ns()
            result = loops[name]()
            elapsed = result if isinstance(result, int) else time.perf_counter_ns() - t0
            after()
            if r:
                times[name].append(elapsed)
    return times


def training_slowdown(directory: str, rounds: int = 300, block: int = 5) -> dict[str, float]:
    """A real CPU loop of ~5 ms steps: blocks with the probe, without it, and without it again.

    The second bare block is the control: its ratio to the first says how far two runs of
    the very same code differ here, which bounds what the probe's ratio can show.
    """
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    torch.set_num_threads(1)
    width = 384
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width),
                          nn.ReLU(), nn.Linear(width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = batch_for_step_ms(model, opt, width, STEP_MS)
    # One step more than is timed: each block's first step runs with whatever caches the
    # previous block (or the zero-code arm's patching) left, so none is timed.
    samples = (block + 1) * batch
    loader = DataLoader(TensorDataset(torch.randn(samples, width),
                                      torch.randint(0, 10, (samples,))), batch_size=batch)
    loss_of = nn.functional.cross_entropy
    clock = time.perf_counter_ns

    def bare() -> int:
        t0 = 0
        for i, (x, y) in enumerate(loader):
            if i == 1:
                t0 = clock()
            loss = loss_of(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return clock() - t0

    def instrumented(api: Any) -> Callable[[], int]:
        """The loop as a user writes it for the probe, against `api` (probe or a no-op)."""
        watch, phase = api.watch, api.phase

        def loop() -> int:
            t0 = 0
            for i, (x, y) in enumerate(watch(loader)):
                if i == 1:
                    t0 = clock()
                with phase("forward"):
                    loss = loss_of(model(x), y)
                with phase("backward"):
                    opt.zero_grad()
                    loss.backward()
                with phase("optimizer"):
                    opt.step()
            return clock() - t0

        return loop

    probed, shaped = instrumented(probe), instrumented(no_probe)

    zero_code_ring = os.path.join(directory, "zero-code.ring")
    rec = Recorder(lambda: layout.RingWriter(zero_code_ring))  # its own: no manual phases
    times = interleaved(
        {"bare": bare, "probed": probed, "shaped": shaped, "zero_code": bare,
         "bare_again": bare},
        rounds,
        setups={"zero_code": (lambda: probe_torch.install(rec), probe_torch.uninstall)},
    )
    rec.close()
    own_ns, bracket_ns = probe_time_in_loop(loader, model, opt, batch)
    out: dict[str, float] = {
        "probe_in_loop_us_per_step": own_ns / 1e3,
        "probe_in_loop_share": own_ns / (statistics.median(times["bare"]) / block),
        "bracket_in_loop_us_per_step": bracket_ns / 1e3,
        "batch_size": batch,
        "step_ms_without": statistics.median(times["bare"]) / block / 1e6,
        "step_ms_with": statistics.median(times["probed"]) / block / 1e6,
    }
    for name, (top, bottom) in {
        "slowdown": ("probed", "bare"),  # what a user pays
        "shape": ("shaped", "bare"),  # the loop's new shape alone: a generator, three withs
        "work": ("probed", "shaped"),  # the probe's own work
        "zero_code": ("zero_code", "bare"),  # the unmodified loop, torch patched
        "control": ("bare_again", "bare"),  # the same code twice: this machine's resolution
    }.items():
        ratios = [a / b for a, b in zip(times[top], times[bottom], strict=True)]
        low, high = median_interval(ratios)
        out[f"{name}_ratio"] = statistics.median(ratios)
        out[f"{name}_ratio_95_low"], out[f"{name}_ratio_95_high"] = low, high
    return out


def probe_time_in_loop(loader: Any, model: Any, opt: Any, batch: int,
                       rounds: int = 60) -> tuple[float, float]:
    """The probe's own code timed where it runs: between the steps of a real loop.

    Each call the probe makes at a step boundary (fetch begin/end, phase enter/exit) is
    bracketed by clock reads; alternate passes bracket nothing, and their median is taken
    off. The with-statement's own machinery is not included (it is the program's).
    Returns (probe ns per step, empty-bracket ns per step).
    """
    import torch

    rec = probe.recorder()
    fwd, bwd, opt_phase = (probe.phase(n) for n in ("forward", "backward", "optimizer"))
    lid = probe.loader_id(loader)
    spent: dict[bool, list[int]] = {True: [], False: []}
    for r in range(rounds):
        on = bool(r % 2)
        rec.iteration_begin(lid, {})
        it = iter(loader)
        while True:
            ns = bracket(on, rec.fetch_begin)
            try:
                x, y = next(it)
            except StopIteration:
                if on:
                    rec.fetch_stop()
                break
            ns += bracket(on, partial(rec.fetch_end, lid, batch), fwd.__enter__)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            ns += bracket(on, partial(fwd.__exit__, None, None, None), bwd.__enter__)
            opt.zero_grad()
            loss.backward()
            ns += bracket(on, partial(bwd.__exit__, None, None, None), opt_phase.__enter__)
            opt.step()
            ns += bracket(on, partial(opt_phase.__exit__, None, None, None))
            if r >= 2:  # the first pass of each kind warms up
                spent[on].append(ns)
    empty = statistics.median(spent[False])
    return statistics.median(spent[True]) - empty, empty


def bracket(on: bool, *calls: Callable[[], object]) -> int:
    """ns the calls take (none when not `on`: then only the clock and this frame are)."""
    t0 = time.perf_counter_ns()
    if on:
        for call in calls:
            call()
    return time.perf_counter_ns() - t0


class NoProbe:
    """The probe's API doing nothing: the same loop shape without the probe's work."""

    class _Nothing:
        def __enter__(self) -> None:
            return None

        def __exit__(self, *exc: object) -> None:
            return None

    _nothing = _Nothing()

    @staticmethod
    def watch(loader: Iterable[Any]) -> Iterator[Any]:
        """Yield from `loader` through a generator, as probe.watch does."""
        yield from loader

    def phase(self, name: str) -> NoProbe._Nothing:
        """A context manager that does nothing."""
        return self._nothing


no_probe = NoProbe()


def batch_for_step_ms(model: Any, opt: Any, width: int, step_ms: float) -> int:
    """The batch size whose training step takes about `step_ms` on this machine now."""
    import torch

    def step_ms_at(batch: int) -> float:
        x, y = torch.randn(batch, width), torch.randint(0, 10, (batch,))
        times = []
        for _ in range(7):
            t0 = time.perf_counter_ns()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            times.append(time.perf_counter_ns() - t0)
        return statistics.median(times) / 1e6

    batch = 64
    for _ in range(3):  # a step's time is close to linear in the batch; converge in steps
        batch = max(8, min(4096, round(batch * step_ms / step_ms_at(batch))))
    return batch


def median_interval(values: list[float]) -> tuple[float, float]:
    """A distribution-free 95 % confidence interval of the median (order statistics)."""
    ordered = sorted(values)
    n = len(ordered)
    half = 1.96 * math.sqrt(n) / 2
    low = max(0, math.floor(n / 2 - half))
    high = min(n - 1, math.ceil(n / 2 + half))
    return ordered[low], ordered[high]


def main() -> int:
    """Print the figures (or one JSON object with --json)."""
    with tempfile.TemporaryDirectory(dir=layout.ring_dir()) as directory:
        rec = use_private_recorder(directory)
        cost = probe_cost()
        try:
            loop = training_slowdown(directory)
        except ImportError:
            loop = {}
        rec.close()
    if "--json" in sys.argv:
        print(json.dumps({**cost, **loop}, indent=1))
        return 0
    print(f"probe, all phases:   {cost['probed_step_ns']:8.0f} ns/step "
          f"(bare loop {cost['bare_loop_step_ns']:.0f} ns/step; fastest of {ROUNDS} rounds)")
    print(f"probe overhead:      {cost['probe_overhead_per_step_ns']:8.0f} ns/step, "
          f"{cost['probe_overhead_per_event_ns']:.0f} ns/event (median round "
          f"{cost['median_round_per_event_ns']:.0f}; target <= 1000)")
    print(f"floor (pack_into):   {cost['bare_pack_into_ns']:8.0f} ns/record; "
          f"overhead = {cost['overhead_over_floor']:.1f}x the floor")
    if loop:
        print(f"probe in the loop:   {loop['probe_in_loop_us_per_step']:.1f} us/step of its "
              f"own code between steps = {100 * loop['probe_in_loop_share']:.2f} % of a step "
              f"(clock brackets, {loop['bracket_in_loop_us_per_step']:.1f} us, taken off)")
        print(f"training loop:       {loop['step_ms_without']:.2f} ms/step without, "
              f"{loop['step_ms_with']:.2f} ms/step with the probe (MLP, batch "
              f"{loop['batch_size']:.0f}, one thread)")
        for name, label, note in (
            ("slowdown", "slowdown", "target <= 1.01"),
            ("shape", "  loop shape alone", "a generator and three no-op withs"),
            ("work", "  probe's own work", "probed vs the same shape doing nothing"),
            ("zero_code", "zero-code mode", "the unmodified loop with torch patched, as "
             "`gputop run` does"),
            ("control", "control", "the same code twice: this machine's resolution"),
        ):
            print(f"{label + ':':21s}x{loop[name + '_ratio']:.4f} (95 % CI "
                  f"{loop[name + '_ratio_95_low']:.4f}-{loop[name + '_ratio_95_high']:.4f}; "
                  f"{note})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
