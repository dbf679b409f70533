"""Turns loader fetches, phases and optimizer steps into step records for the ring.

Exactly one step is open at a time. A loader's `next()` closes the open step and opens
the next one (its blocked time is that step's data wait); `step_end()` or an optimizer
step closes a step no loader opened. Steps of a loader that does not train (evaluation)
are written with F_OTHER so readers keep them apart.
"""

from __future__ import annotations

import os
import sys
from time import perf_counter_ns

from gputop.probe import ring as layout

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

WARMUP_STEPS = 3
H2D, FORWARD, BACKWARD, OPTIMIZER = range(4)
PHASES = {"h2d": H2D, "forward": FORWARD, "backward": BACKWARD, "optimizer": OPTIMIZER}
NONE = layout.NONE
F_WARMUP, F_OPTIMIZER, F_OTHER, F_IMPLICIT = (
    layout.F_WARMUP, layout.F_OPTIMIZER, layout.F_OTHER, layout.F_IMPLICIT
)


class Recorder:
    """The probe's state in the training process; one per process."""

    __slots__ = (
        "_batch", "_data", "_depth", "_epoch", "_epoch_mark", "_facts_written", "_fetch_closed",
        "_fetch_t0", "_first_loader", "_in_epoch", "_loader", "_loader_facts", "_open_ring",
        "_step", "_t_open", "_train_loader", "_trains", "acc", "enabled", "facts", "gpu",
        "manual", "open", "owner", "ring",
    )

    def __init__(self, open_ring: Callable[[], layout.RingWriter | None]) -> None:
        self._open_ring = open_ring
        self.ring: layout.RingWriter | None = None
        self.enabled = True
        self.owner = os.getpid()
        self.gpu: GpuHook | None = None
        self.facts: dict[str, object] = {}
        self._facts_written: dict[str, object] = {}
        self.open = False
        self._t_open = 0
        self._data = NONE
        self.acc = [0, 0, 0, 0]  # ns per phase of the open step; 0 = not seen (written NONE)
        self._batch = NONE
        self._loader = 0
        self._trains = False
        self._step = 0
        self._epoch = 0
        self._in_epoch = 0
        self._train_loader = 0
        self._first_loader = 0
        self._loader_facts: dict[int, dict[str, object]] = {}
        self._depth = 0
        self._fetch_t0 = 0
        self._fetch_closed = False
        self._epoch_mark = 0
        self.manual = False

    # -- loaders ---------------------------------------------------------------------------

    def iteration_begin(self, loader: int, facts: dict[str, object] | None = None) -> None:
        """A loader starts a new pass: for the training loader that is an epoch boundary."""
        if not self._first_loader:
            self._first_loader = loader
        if facts:
            self._loader_facts[loader] = facts
        if self._is_training_loader(loader):
            if self._step > self._epoch_mark:
                self._epoch += 1
                self._epoch_mark = self._step
            self._in_epoch = 0
            if facts:
                self.annotate(facts)

    def fetch_begin(self) -> None:
        """`next()` on a loader starts: the open step ends here."""
        depth = self._depth = self._depth + 1
        if depth > 1:  # a watched iterable whose own iterator is patched too
            return
        t = self._fetch_t0 = perf_counter_ns()
        if self.open:
            self._fetch_closed = True
            self._close(t)
        else:
            self._fetch_closed = False

    def fetch_end(self, loader: int, batch_size: int = NONE) -> None:
        """`next()` returned a batch: a new step opens, its data wait is the blocked time."""
        depth = self._depth = self._depth - 1
        if depth:
            return
        t0 = self._t_open = self._fetch_t0
        self._data = perf_counter_ns() - t0
        self.open = True
        self._loader = loader
        self._batch = batch_size
        if self.gpu is not None:
            self.gpu.step_opened(self._fetch_closed)

    def fetch_stop(self) -> None:
        """`next()` raised (StopIteration or an error): no step opens."""
        self._depth = max(0, self._depth - 1)

    # -- phases and explicit boundaries ----------------------------------------------------

    def add_phase(self, phase: int, ns: int) -> None:
        """Add `ns` to a phase of the open step (opening one when none is)."""
        if not self.open:
            self._open_implicit(perf_counter_ns() - ns)
        self.acc[phase] += max(ns, 1)

    def auto_phase(self, phase: int, ns: int) -> None:
        """A phase timed by the torch patch; the program's own phase() calls take precedence."""
        if self.manual:
            self._trains = self._trains or (self.open and phase >= BACKWARD)
        elif self.open:  # the common case, without a further call: this runs every step
            self.acc[phase] += max(ns, 1)
        else:
            self.add_phase(phase, ns)

    def auto_optimizer_done(self, ns: int) -> None:
        """An optimizer step timed by the torch patch (ignored under manual phases)."""
        if self.manual:
            self._trains = self._trains or self.open
        elif self.open and self._loader:  # the common case, as in auto_phase
            self.acc[OPTIMIZER] += max(ns, 1)
        else:
            self.optimizer_done(ns)

    def optimizer_done(self, ns: int) -> None:
        """An optimizer step took `ns`; it ends a step that no loader opened."""
        self.add_phase(OPTIMIZER, ns)
        if not self._loader:
            self._close(perf_counter_ns())

    def step_end(self, batch_size: int | None = None) -> None:
        """Close the open step now; without a loader the next step opens at once."""
        t = perf_counter_ns()
        if not self.open:
            self._open_implicit(t)
            return
        if batch_size is not None:
            self._batch = batch_size
        implicit = not self._loader
        self._close(t)
        if implicit:
            self._open_implicit(t)

    def _open_implicit(self, t: int) -> None:
        self.open = True
        self._t_open = t
        self._data = NONE
        self._loader = 0
        self._batch = NONE

    def _close(self, t: int) -> None:
        self.open = False
        loader = self._loader
        acc = self.acc
        flags = 0 if loader else F_IMPLICIT
        if self._trains or acc[BACKWARD] or acc[OPTIMIZER]:
            flags |= F_OPTIMIZER
            self._trains = False
            if loader and self._train_loader != loader:
                self._switch_training_loader(loader)
        if loader and loader != (self._train_loader or self._first_loader):
            flags |= F_OTHER
        elif self._in_epoch < WARMUP_STEPS:
            flags |= F_WARMUP
            self._in_epoch += 1
        ring = self.ring
        if ring is None and self.enabled:
            ring = self._start_ring()
        if self.gpu is not None:
            if self.enabled:
                self.gpu.step_closed(
                    self, self._step, self._t_open, t - self._t_open, self._data, acc,
                    self._batch, self._epoch, flags, loader,
                )
        elif ring is not None and self.enabled:
            ring.append(
                self._step, self._t_open, t - self._t_open, self._data, acc[0] or NONE,
                acc[1] or NONE, acc[2] or NONE, acc[3] or NONE, NONE, NONE, self._batch,
                self._epoch, flags, loader,
            )
        self._step += 1
        acc[0] = acc[1] = acc[2] = acc[3] = 0

    def _switch_training_loader(self, loader: int) -> None:
        """`loader` enclosed an optimizer step: it trains (a new one per epoch is an epoch)."""
        if self._train_loader or loader != self._first_loader:
            self._in_epoch = 0
            if self._train_loader and self._step > self._epoch_mark:
                self._epoch += 1
                self._epoch_mark = self._step
        self._train_loader = loader
        if loader in self._loader_facts:
            self.annotate(self._loader_facts[loader])

    def _is_training_loader(self, loader: int) -> bool:
        if self._train_loader:
            return loader == self._train_loader
        return loader == self._first_loader

    # -- facts -----------------------------------------------------------------------------

    def annotate(self, facts: dict[str, object], start: bool = True) -> None:
        """Merge facts into the metadata area (rewritten only when something changed)."""
        self.facts.update(facts)
        if self.ring is None and self.enabled and start:
            self._start_ring()
        self._write_facts()

    def _write_facts(self) -> None:
        if self.ring is None or self.facts == self._facts_written:
            return
        self._facts_written = dict(self.facts)
        self.ring.set_meta(bounded_json(self.facts, layout.META_CAP))

    def _start_ring(self) -> layout.RingWriter | None:
        """Create the ring on first use; when that fails, go quiet after one warning."""
        if os.getpid() != self.owner:
            self.enabled = False
            return None
        self.ring = self._open_ring()
        if self.ring is None:
            self.enabled = False
            return None
        self._write_facts()
        return self.ring

    # -- lifecycle -------------------------------------------------------------------------

    def forked(self) -> None:
        """In a forked child (a DataLoader worker): never write or unlink the parent's ring."""
        self.enabled = False
        if self.ring is not None:
            self.ring.closed = True  # the parent still owns the file
        self.ring = None
        self.gpu = None

    def close(self) -> None:
        """At exit: publish steps still waiting for GPU times, then unlink the ring."""
        if os.getpid() != self.owner:
            return
        if self.gpu is not None and self.ring is not None:
            self.gpu.flush(self)
        if self.ring is not None:
            self.ring.close()
        self.enabled = False

    def write(
        self, step: int, start: int, duration: int, data: int, acc: list[int], gpu_ns: int,
        gap_ns: int, batch: int, epoch: int, flags: int, loader: int,
    ) -> None:
        """Publish one step (called by the GPU hook once its times are known)."""
        if self.ring is not None and self.enabled:
            self.ring.append(
                step, start, duration, data, acc[0] or NONE, acc[1] or NONE, acc[2] or NONE,
                acc[3] or NONE, gpu_ns, gap_ns, batch, epoch, flags, loader,
            )


class GpuHook:
    """What the recorder needs from a GPU timer (implemented in gpu_timing.py)."""

    def step_opened(self, contiguous: bool) -> None:
        """A loader delivered a batch: the GPU part of a step starts here."""

    def step_closed(
        self, rec: Recorder, step: int, start: int, duration: int, data: int, acc: list[int],
        batch: int, epoch: int, flags: int, loader: int,
    ) -> None:
        """A step closed; write it now or once its GPU times are known."""

    def flush(self, rec: Recorder) -> None:
        """Write every step still waiting, with unknown GPU times."""


def bounded_json(facts: dict[str, object], cap: int) -> bytes:
    """Facts as JSON of at most `cap` bytes, dropping the longest values first if needed."""
    import json

    clean = {str(k)[:64]: _plain(v) for k, v in facts.items()}
    while True:
        blob = json.dumps(clean, separators=(",", ":"), sort_keys=True).encode()
        if len(blob) <= cap or not clean:
            return blob if len(blob) <= cap else b"{}"
        longest = max(clean, key=lambda k: len(json.dumps(clean[k])))
        del clean[longest]


def _plain(value: object) -> object:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(value)[:200]


def warn(message: str) -> None:
    """One line on stderr, prefixed so the user knows who speaks."""
    try:
        sys.stderr.write(f"gputop.probe: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass
