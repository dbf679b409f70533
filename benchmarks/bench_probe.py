"""Probe cost: ns per event beside a bare pack_into floor, and a real training loop's slowdown.

Run from the repository root: `python benchmarks/bench_probe.py [--json] [--rounds N]
[--sampled]` (--sampled: the training loop's arms with the stack sampler running, by the
trigger the probe uses by default: a signal where it can be had; the warm figures always give
the probe without sampling, with the default trigger's and with the thread trigger's).
Every figure compares loops run interleaved in the same process, in a new random order
each round, so the shared machine's drift (its speed changes 2x within seconds) hits all
sides alike and no loop always follows the same one. Three figures:
- warm: the probe in a tight loop (ns per event), beside one struct.pack_into;
- in the loop: what the probe adds between the steps of a real ~5 ms CPU training loop,
  read off clocks placed around the model's work (resolves microseconds);
- end to end: the whole loop's time with vs without, with a control (the same loop
  against itself) that shows how much this machine can resolve; `--rounds` narrows it.
"""

from __future__ import annotations

import functools
import importlib
import json
import math
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gputop.probe as probe
import gputop.probe.torch as probe_torch
from gputop.probe import ring as ring_format
from gputop.probe.stack_sampler import INTERVAL_S as STACK_INTERVAL_S
from gputop.probe.stack_sampler import SAMPLER_ENV, SIGNAL, THREAD, StackSampler
from gputop.probe.steps import BACKWARD, OPTIMIZER, SAMPLE_ENV, Recorder

EVENTS_PER_STEP = 5  # one fetch (closes a step, opens the next) and four phases
ROUND_STEPS = 5_000
ROUNDS = 200
ROUNDS_LOOP = 300  # of the training loop's arms; `--rounds N` for a longer, finer run
STEP_MS = 5.0  # the "real CPU training loop with ~5 ms steps"


def use_private_recorder(directory: str) -> Recorder:
    """A recorder without the torch patch, so 'without the probe' really is without it."""
    path = ring_format.ring_path(os.getpid(), directory=directory)
    rec = Recorder(lambda: ring_format.RingWriter(path))
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

    buf = bytearray(ring_format.FILE_SIZE)
    pack = ring_format.RECORD.pack_into
    offset = ring_format.HEADER_SIZE

    words = tuple(range(1, ring_format.RECORD_WORDS - 1))  # a record's words after seq, step

    def floor() -> None:
        for i in items:
            pack(buf, offset, 2 * i + 1, i, *words)

    sampler = StackSampler(probe.recorder(), threading.main_thread().ident or 0)
    triggers: dict[str, str] = {}

    def sampling(trigger: str) -> tuple[Callable[[], object], Callable[[], object]]:
        def start() -> None:
            triggers[trigger] = sampler.start(trigger)

        def stop() -> None:
            sampler.stop()
            time.sleep(2 * STACK_INTERVAL_S)  # its thread sees it and ends

        return start, stop

    times = interleaved({"probed": probed, "sampled": probed, "sampled_thread": probed,
                         "bare": bare, "floor": floor},
                        rounds, setups={"sampled": sampling(SIGNAL),
                                        "sampled_thread": sampling(THREAD)})
    fastest = {name: min(ns) / steps for name, ns in times.items()}
    median = {name: statistics.median(ns) / steps for name, ns in times.items()}
    overhead = fastest["probed"] - fastest["bare"]
    return {
        "probed_step_ns": fastest["probed"],
        "bare_loop_step_ns": fastest["bare"],
        "probe_overhead_per_step_ns": overhead,
        "probe_overhead_per_event_ns": overhead / EVENTS_PER_STEP,
        "sampled_overhead_per_event_ns": (fastest["sampled"] - fastest["bare"]) / EVENTS_PER_STEP,
        "sampled_median_round_per_event_ns": (median["sampled"] - median["bare"])
        / EVENTS_PER_STEP,
        "sampled_by_signal": float(triggers.get(SIGNAL) == SIGNAL),  # 0: the thread's fallback
        "sampled_thread_overhead_per_event_ns": (fastest["sampled_thread"] - fastest["bare"])
        / EVENTS_PER_STEP,
        "sampled_thread_median_round_per_event_ns": (median["sampled_thread"] - median["bare"])
        / EVENTS_PER_STEP,
        "median_round_per_event_ns": (median["probed"] - median["bare"]) / EVENTS_PER_STEP,
        "bare_pack_into_ns": fastest["floor"],
        "overhead_over_floor": overhead / fastest["floor"],
    }


def interleaved(
    loops: dict[str, Callable[[], object]], rounds: int,
    setups: dict[str, tuple[Callable[[], object], Callable[[], object]]] | None = None,
) -> dict[str, list[int]]:
    """ns of each loop in each round, the loops in a new random order each round.

    A loop that returns an int has timed itself. `setups` gives a loop a (before, after)
    pair run around it, outside the timing.
    """
    times: dict[str, list[int]] = {name: [] for name in loops}
    nothing = (lambda: None, lambda: None)
    for r, names in enumerate(shuffled_rounds(list(loops), rounds + 1)):
        for name in names:  # round 0 warms every loop up
            before, after = (setups or {}).get(name, nothing)
            before()
            t0 = time.perf_counter_ns()
            result = loops[name]()
            elapsed = result if isinstance(result, int) else time.perf_counter_ns() - t0
            after()
            if r:
                times[name].append(elapsed)
    return times


def shuffled_rounds(names: list[str], rounds: int) -> Iterator[list[str]]:
    """`names` in a new random order for each of `rounds` rounds (seeded: runs repeat).

    A fixed order, even rotated, gives each loop the same predecessor every round, and
    what a loop leaves behind (its caches, a patch just removed) then biases the next.
    """
    order = random.Random(0)
    for _ in range(rounds):
        order.shuffle(names)
        yield names


def training_slowdown(directory: str, rounds: int = ROUNDS_LOOP, block: int = 4,
                      warm: int = 4) -> dict[str, float]:
    """A real CPU loop of ~5 ms steps: blocks with the probe, without it, and without it again.

    Each block runs `warm` untimed steps first: switching arms (the zero-code arm patches
    torch's classes and unpatches them after) makes the interpreter drop its
    specializations, and timing their recovery would charge the probe for the benchmark's
    own switching. The second bare block is the control: its ratio to the first says how
    far two runs of the very same code differ here, which bounds what the probe's ratio
    can show.
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
    samples = (block + warm) * batch
    loader = DataLoader(TensorDataset(torch.randn(samples, width),
                                      torch.randint(0, 10, (samples,))), batch_size=batch)
    loss_of = nn.functional.cross_entropy
    clock = time.perf_counter_ns

    def bare() -> int:
        t0 = 0
        for i, (x, y) in enumerate(loader):
            if i == warm:
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
                if i == warm:
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
    rec = Recorder(lambda: ring_format.RingWriter(zero_code_ring))  # its own: no manual phases
    # probe.watch() patches torch too (GPU timing and the device come through the patch),
    # so the probed arm runs patched, as a user's program would.
    times = interleaved(
        {"bare": bare, "probed": probed, "shaped": shaped, "zero_code": bare,
         "bare_again": bare},
        rounds,
        setups={
            "probed": (lambda: probe_torch.install(probe.recorder()), probe_torch.uninstall),
            "zero_code": (lambda: probe_torch.install(rec), probe_torch.uninstall),
        },
    )
    rec.close()
    in_loop = probe_time_in_loop(model, opt, batch, width, directory)
    step_ns = statistics.median(times["bare"]) / block
    out: dict[str, float] = {
        **in_loop,
        "probe_in_loop_share": in_loop["probe_in_loop_us_per_step"] * 1e3 / step_ns,
        "zero_code_in_loop_share": in_loop["zero_code_in_loop_us_per_step"] * 1e3 / step_ns,
        "batch_size": batch,
        "rounds": rounds,
        "timed_steps_per_arm": rounds * block,
        "step_ms_without": step_ns / 1e6,
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


def probe_time_in_loop(model: Any, opt: Any, batch: int, width: int, directory: str,
                       rounds: int = 90, steps: int = 14) -> dict[str, float]:
    """What the probe adds where it runs, timed between the steps of a real loop.

    Four loops take turns, an epoch each, in a new order each round: bare, the probe's
    (watch + three phase blocks), the same shape doing nothing, and zero-code (the bare
    loop, torch patched). Each reads the clock at the same places: around the loader's
    next() and at the edges of the model's work. What lies outside the model's work — the
    loader's next(), the generator, the with-statements, the probe — is compared per step,
    so the model's own noisy milliseconds never enter. Zero-code's patches run inside
    backward() and step(): there the probe's own timing of the work is taken off what a
    clock saw around it — the caller's clock around backward(), hooks registered first and
    last around the optimizer's — leaving the probe's wrapper and hooks. The loader hands
    out ready batches, so its next() is cheap and steady. The first `warm` steps of an epoch
    follow another loop (and a patch or unpatch) and are not used.
    """
    import torch
    from torch.utils.data import DataLoader

    loss_of = torch.nn.functional.cross_entropy
    batches: Any = [(torch.randn(batch, width), torch.randint(0, 10, (batch,)))
                    for _ in range(steps)]
    loader: Any = DataLoader(batches, batch_size=None)  # each item is already a batch
    clock = time.perf_counter_ns
    warm = 4
    patched = Recorder(lambda: ring_format.RingWriter(os.path.join(directory, "in-loop.ring")))
    acc = patched.acc  # zero-code's backward and optimizer times of the open step

    def plain(inner: list[int] | None) -> Callable[[list[int]], None]:
        """The bare loop; with `inner`, the probe's times inside backward/step are known."""

        def loop(out: list[int]) -> None:
            end = 0
            for i, (x, y) in enumerate(loader):
                t1 = clock()
                t2 = clock()
                loss = loss_of(model(x), y)
                t3 = clock()
                opt.zero_grad()
                t4 = clock()
                loss.backward()
                t5 = clock()
                t6 = clock()
                opt.step()
                t7 = clock()
                if i >= warm:
                    ns = (t1 - end) + (t2 - t1) + (t4 - t3) + (t6 - t5) + (clock() - t7)
                    if inner is not None:
                        ns += (t5 - t4 - inner[BACKWARD]) + (hook_ns[1] - hook_ns[0]
                                                            - inner[OPTIMIZER])
                    out.append(ns)
                end = clock()

        return loop

    def instrumented(api: Any) -> Callable[[list[int]], None]:
        watch, phase = api.watch, api.phase

        def loop(out: list[int]) -> None:
            end = 0
            for i, (x, y) in enumerate(watch(loader)):
                t1 = clock()
                with phase("forward"):
                    t2 = clock()
                    loss = loss_of(model(x), y)
                    t3 = clock()
                with phase("backward"):
                    opt.zero_grad()
                    t4 = clock()
                    loss.backward()
                    t5 = clock()
                with phase("optimizer"):
                    t6 = clock()
                    opt.step()
                    t7 = clock()
                if i >= warm:
                    out.append((t1 - end) + (t2 - t1) + (t4 - t3) + (t6 - t5) + (clock() - t7))
                end = clock()

        return loop

    loops = {"bare": plain(None), "probed": instrumented(probe),
             "shaped": instrumented(no_probe), "zero_code": plain(acc)}
    hooks = importlib.import_module("torch.optim.optimizer")
    hook_ns = [0, 0]  # clock at the first pre-hook and at the last post-hook of opt.step()
    handles = []

    def patch() -> None:
        handles.append(hooks.register_optimizer_step_pre_hook(
            lambda *_: hook_ns.__setitem__(0, clock())))
        probe_torch.install(patched)
        handles.append(hooks.register_optimizer_step_post_hook(
            lambda *_: hook_ns.__setitem__(1, clock())))

    def unpatch() -> None:
        while handles:
            handles.pop().remove()
        probe_torch.uninstall()

    outside: dict[str, list[int]] = {name: [] for name in loops}
    # interleaved()'s whole-epoch times are not used: each loop records its own steps
    interleaved({name: functools.partial(loop, outside[name]) for name, loop in loops.items()},
                rounds - 1, setups={"zero_code": (patch, unpatch)})
    patched.close()
    median = {name: statistics.median(ns) for name, ns in outside.items()}
    return {
        "probe_in_loop_us_per_step": (median["probed"] - median["bare"]) / 1e3,
        "probe_work_in_loop_us_per_step": (median["probed"] - median["shaped"]) / 1e3,
        "shape_in_loop_us_per_step": (median["shaped"] - median["bare"]) / 1e3,
        "zero_code_in_loop_us_per_step": (median["zero_code"] - median["bare"]) / 1e3,
        "outside_model_bare_us_per_step": median["bare"] / 1e3,
    }


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
    """Print the figures (or one JSON object with --json); `--rounds N` for a finer run."""
    rounds = ROUNDS_LOOP
    if "--rounds" in sys.argv:
        rounds = int(sys.argv[sys.argv.index("--rounds") + 1])
    os.environ[SAMPLE_ENV] = "0"  # the arms that sample start their own sampler
    with tempfile.TemporaryDirectory(dir=ring_format.ring_dir()) as directory:
        rec = use_private_recorder(directory)
        cost = probe_cost()
        sampler = StackSampler(rec, threading.main_thread().ident or 0)
        if "--sampled" in sys.argv:  # the training loop's probed arms with stack sampling
            sampler.start(SIGNAL)
        try:
            loop = training_slowdown(directory, rounds=rounds)
        except ImportError:
            loop = {}
        sampler.stop()
        rec.close()
    if "--json" in sys.argv:
        print(json.dumps({**cost, **loop}, indent=1))
        return 0
    print(f"probe, all phases:   {cost['probed_step_ns']:8.0f} ns/step "
          f"(bare loop {cost['bare_loop_step_ns']:.0f} ns/step; fastest of {ROUNDS} rounds)")
    print(f"probe overhead:      {cost['probe_overhead_per_step_ns']:8.0f} ns/step, "
          f"{cost['probe_overhead_per_event_ns']:.0f} ns/event (median round "
          f"{cost['median_round_per_event_ns']:.0f}; target <= 1000)")
    print(f"with stack sampling: {cost['sampled_overhead_per_event_ns']:8.0f} ns/event (median "
          f"round {cost['sampled_median_round_per_event_ns']:.0f}; the "
          f"{SIGNAL if cost['sampled_by_signal'] else THREAD} trigger, the default, at "
          f"{1 / STACK_INTERVAL_S:.0f} Hz beside the same loop)")
    print(f"  thread trigger:    {cost['sampled_thread_overhead_per_event_ns']:8.0f} ns/event "
          f"(median round {cost['sampled_thread_median_round_per_event_ns']:.0f}; the "
          f"fallback, {SAMPLER_ENV}=thread)")
    print(f"floor (pack_into):   {cost['bare_pack_into_ns']:8.0f} ns/record; "
          f"overhead = {cost['overhead_over_floor']:.1f}x the floor")
    if loop:
        print(f"probe in the loop:   {loop['probe_in_loop_us_per_step']:.1f} us/step outside "
              f"the model's work = {100 * loop['probe_in_loop_share']:.2f} % of a step "
              f"(its work {loop['probe_work_in_loop_us_per_step']:.1f} us, the loop's shape "
              f"{loop['shape_in_loop_us_per_step']:.1f} us; bare loop "
              f"{loop['outside_model_bare_us_per_step']:.1f} us there)")
        print(f"zero-code in the loop: {loop['zero_code_in_loop_us_per_step']:.1f} us/step = "
              f"{100 * loop['zero_code_in_loop_share']:.2f} % of a step (next() patch, "
              f"backward wrapper, optimizer hooks)")
        print(f"training loop:       {loop['step_ms_without']:.2f} ms/step without, "
              f"{loop['step_ms_with']:.2f} ms/step with the probe (MLP, batch "
              f"{loop['batch_size']:.0f}, one thread; {loop['timed_steps_per_arm']:.0f} timed "
              f"steps an arm)")
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
