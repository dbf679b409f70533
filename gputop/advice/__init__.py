"""Pure advice rules over a Frame, with hysteresis so advice neither flickers nor lingers."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import replace

from gputop.advice import (
    batch_rules,
    cpu_rules,
    gpu_rules,
    host_code_rules,
    host_rules,
    idle_rules,
    loader_rules,
    rank_rules,
)
from gputop.advice.context import Context
from gputop.core.model import Advice, AttachState, Frame

FrameRule = Callable[[Context], list[Advice]]
TrainerRule = Callable[[Context, AttachState], list[Advice]]

FRAME_RULES: tuple[FrameRule, ...] = (
    gpu_rules.gpu_starved,
    gpu_rules.gpu_shared,
    idle_rules.gpu_idle,
    host_rules.host_memory_bandwidth,
    host_rules.memory_layout,
    host_rules.swap,
    rank_rules.input_straggler_rank,
)
TRAINER_RULES: tuple[TrainerRule, ...] = (
    loader_rules.num_workers_advice,
    loader_rules.io_bound_loading,
    loader_rules.pin_memory_off,
    batch_rules.raise_batch_size,
    host_rules.cpu_threads,
    cpu_rules.cpu_starved,
    host_code_rules.host_bound,
)
AdviceKey = tuple[str, int | None]  # one piece of advice per rule and trainer
SEVERITY_ORDER = {"critical": 0, "warn": 1, "info": 2}
HISTORY = 30
# Items that turn the same knob: at most one of them is shown at a time.
KNOBS = {"num-workers-zero": "num_workers", "raise-num-workers": "num_workers",
         "too-many-workers": "num_workers"}


def evaluate(ctx: Context) -> list[Advice]:
    """Every rule once over one context, most severe first."""
    found = [a for rule in FRAME_RULES for a in rule(ctx)]
    for state in ctx.frame.attached:
        if state.judged:
            found += [replace(a, trainer_pid=state.pid)
                      for rule in TRAINER_RULES for a in rule(ctx, state)]
    return sorted(found, key=lambda a: SEVERITY_ORDER[a.severity])


def in_shown_order(items: Iterable[Advice]) -> tuple[Advice, ...]:
    """`items` as the advice pane lists them: most severe first, then by id and trainer."""
    return tuple(sorted(items, key=lambda a: (SEVERITY_ORDER.get(a.severity, len(SEVERITY_ORDER)),
                                              a.id, a.trainer_pid or 0)))


class Advisor:
    """Keeps the GPU history and shows advice after `on_after` ticks, hides it after `off_after`.

    An advisor that shows advice at once (on_after=1: `--once`, a final summary) keeps none
    past its condition either: what it shows is what the newest frame supports, so it never
    contradicts the verdict printed beside it. A shown item's action changes only once the
    new one held `on_after` ticks (a suggested number does not jitter), and of the items that
    turn one knob only the newest is shown (never "add workers" beside "remove workers").
    """

    def __init__(self, on_after: int = 2, off_after: int | None = None) -> None:
        self.on_after = on_after
        self.off_after = off_after if off_after is not None else (1 if on_after <= 1 else 5)
        self._util: dict[int, deque[float]] = {}
        self._seen: dict[AdviceKey, int] = {}
        self._missing: dict[AdviceKey, int] = {}
        self._latest: dict[AdviceKey, Advice] = {}
        self._pending: dict[AdviceKey, tuple[str, int]] = {}  # key -> (new action, ticks held)

    def __call__(self, frame: Frame) -> tuple[Advice, ...]:
        """The advice to show for this frame."""
        for gpu in frame.gpu.gpus:
            if gpu.util_percent is not None:
                self._util.setdefault(gpu.index, deque(maxlen=HISTORY)).append(gpu.util_percent)
        ctx = Context(frame, {i: tuple(h) for i, h in self._util.items()})
        current = {(a.id, a.trainer_pid): a for a in reversed(evaluate(ctx))}
        for key in set(self._seen) | set(current):
            if key in current:
                self._seen[key] = self._seen.get(key, 0) + 1
                self._missing[key] = 0
                self._latest[key] = self._steady(key, current[key])
            else:
                self._missing[key] = self._missing.get(key, 0) + 1
                if self._missing[key] >= self.off_after:
                    for table in (self._seen, self._missing, self._latest, self._pending):
                        table.pop(key, None)
        shown = [a for k, a in self._latest.items() if self._seen.get(k, 0) >= self.on_after]
        return in_shown_order(self._one_per_knob(shown))

    def _steady(self, key: AdviceKey, new: Advice) -> Advice:
        """`new`, unless a shown item would change its action before the change held."""
        old = self._latest.get(key)
        if old is None or old.action == new.action or self._seen[key] <= self.on_after:
            self._pending.pop(key, None)
            return new
        action, held = self._pending.get(key, (new.action, 0))
        held = held + 1 if action == new.action else 1
        if held >= self.on_after:
            self._pending.pop(key, None)
            return new
        self._pending[key] = (new.action, held)
        return old  # its evidence and action still agree with each other

    def _one_per_knob(self, shown: list[Advice]) -> list[Advice]:
        """Of the shown items that turn one knob of one trainer, the one seen most recently."""
        best: dict[tuple[str, int | None], Advice] = {}
        for a in shown:
            knob = (KNOBS.get(a.id, a.id), a.trainer_pid)
            held = best.get(knob)
            if held is None or self._missing.get((a.id, a.trainer_pid), 0) < self._missing.get(
                    (held.id, held.trainer_pid), 0):
                best[knob] = a
        return list(best.values())
