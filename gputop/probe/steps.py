"""Turns loader fetches, phases and optimizer steps into step records for the ring.

Exactly one step is open at a time. A loader's `next()` closes the open step and opens
the next one (its blocked time is that step's data wait); `step_end()` or an optimizer
step closes a step no loader opened. Steps of a loader that does not train (evaluation)
are written with F_OTHER so readers keep them apart.

Without a loader, an optimizer step closes the open step and opens the next at once; the
first forward of the stepped model (timed by the torch patch) then ends that step's input:
the host time since the previous optimizer step (the program's own get_batch, copies, loop
overhead), written as data with F_INPUT_OUTSIDE_MODEL. Without a loader and before any
optimizer step or step_end() (a loop that updates its parameters by hand), a backward pass in
a step that already holds one closes it where the new backward begins, and the next step
opens there (F_AT_BACKWARD): each step holds a backward, the update after it and the next
batch's input and forward. The first optimizer step or step_end() ends that for good.
A probed process that has closed no step yet still gets its ring once it iterates a loader
or runs a backward pass, with a status in its metadata saying why no step closed.

Closed steps are staged in a list and published to the ring at most every PUBLISH_NS
(at once when steps are longer). After a training step the caches are cold, and a
shared-memory store then costs microseconds (the first touch of memoryview's C code)
where a list append costs a fraction of one. A publisher thread writes what a paused
trainer left staged (and, on a GPU, polls the events of steps still waiting for their
GPU times), so a reader sees every step at most ~0.15 s late.
"""

from __future__ import annotations

import os
import sys
import time
from _thread import allocate_lock  # threading's lock without importing threading (start-up)
from time import perf_counter_ns

from gputop.probe import ring as ring_format

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from threading import Lock

WARMUP_STEPS = 3
PUBLISH_NS = 50_000_000
STAGE_MAX = 64  # steps staged before publishing regardless of time (bounds memory)
STALL_CHECK_S = 0.1  # how often the publisher thread looks for steps a pause left staged
H2D, FORWARD, BACKWARD, OPTIMIZER = range(4)
PHASES = {"h2d": H2D, "forward": FORWARD, "backward": BACKWARD, "optimizer": OPTIMIZER}
# What the training thread runs now (Recorder.phase_now, read by the stack sampler): a phase
# above, a loader's next() (DATA), a loader-less step's input before the model's forward
# (INPUT: its data), or anything else (HOST: Python outside the model and the loader)
DATA, INPUT, HOST = 4, 5, 6
NO_SAMPLES = (-1, 0, 0, 0, 0, 0, 0)  # the sampler's hand-over before it has sampled a step
SAMPLE_ENV = "GPUTOP_PROBE_SAMPLE"  # "0": no stack sampling
NONE = ring_format.NONE
MAX_KEY, MAX_TEXT = 64, 200  # annotate() keys and text values are cut to these lengths
MAX_INT_BITS = 640  # about 190 digits; a longer int is recorded as its size
_annotate_warned = False
F_WARMUP, F_OPTIMIZER, F_OTHER, F_IMPLICIT, F_INPUT_OUTSIDE_MODEL, F_AT_BACKWARD = (
    ring_format.F_WARMUP, ring_format.F_OPTIMIZER, ring_format.F_OTHER, ring_format.F_IMPLICIT,
    ring_format.F_INPUT_OUTSIDE_MODEL, ring_format.F_AT_BACKWARD,
)
NO_STEP_YET = ("probed; no optimizer step seen yet: steps close at optimizer.step() or "
               "gputop.probe.step_end(), without an optimizer at the next backward()")
FIRST_BATCH = "probed; the first batch is loading: a step closes at the loader's next batch"


class Recorder:
    """The probe's state in the training process; one per process."""

    __slots__ = (
        "_awaiting_forward", "_batch", "_close_flags", "_closed_at", "_data", "_epoch",
        "_epoch_mark", "_facts_written", "_fetch_closed", "_fetch_t0", "_first_loader", "_gpu_lock",
        "_in_epoch", "_loader", "_loader_facts", "_lock", "_meta_lock", "_open_ring",
        "_publish_at", "_staged", "_status_shown", "_step", "_t_open", "_train_loader",
        "_trains", "acc", "backward_closes", "enabled", "end_evaluation", "evaluating", "facts",
        "fetching", "gpu", "manual", "open", "optimizer_t0", "owner", "phase_now", "ring",
        "site_counts", "sync", "sync_known", "times_own_training",
    )

    def __init__(self, open_ring: Callable[[], ring_format.RingWriter | None]) -> None:
        self._open_ring = open_ring
        self.ring: ring_format.RingWriter | None = None
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
        self.fetching = 0  # next() calls in progress: a watched loader's own is patched too
        self._fetch_t0 = 0
        self._fetch_closed = False
        self._epoch_mark = 0
        self.manual = False  # the program times its own phases
        self.times_own_training = False  # ... and among them backward or optimizer
        self._staged: list[tuple[int, ...]] = []
        self._publish_at = 0
        self._lock: Lock | None = None  # with the ring comes the publisher thread
        self._gpu_lock = allocate_lock()  # the GPU hook's queue: that thread polls it too
        self._closed_at = 0  # when the last step closed (kept with a GPU hook only)
        self._awaiting_forward = False  # an optimizer step opened the step: input runs
        self._status_shown = False  # the metadata says no step has closed yet
        # No optimizer step and no step_end() seen yet: a backward closes a loader-less step
        # that holds one already (the torch patch clears it at each optimizer's first step).
        self.backward_closes = True
        self._close_flags = 0  # flags the step closing now gets beside _flags()'s
        self.phase_now = HOST
        self.optimizer_t0 = 0  # when the optimizer step in progress (or the last one) began
        # ns the open step waited on the device outside the model's phases (the torch patch
        # times it once CUDA is in use); sync_known: written as measured, else NONE
        self.sync = 0
        self.sync_known = False
        # The stack sampler's counts of the step it sampled last, swapped in whole (no lock):
        # (step, samples, host site, its samples, data site, its samples, the part_samples
        # word: the host and data parts' samples, all their sites)
        self.site_counts: tuple[int, int, int, int, int, int, int] = NO_SAMPLES
        self._meta_lock = allocate_lock()  # the sampler thread writes its sites there too
        # An evaluation is under way (activity.py); the training loader's next fetch ends it
        # by calling end_evaluation (set with it)
        self.evaluating = False
        self.end_evaluation: Callable[[], None] | None = None

    # -- loaders ---------------------------------------------------------------------------

    def iteration_begin(self, loader: int, facts: dict[str, object] | None = None) -> None:
        """A loader starts a new pass: for the training loader that is an epoch boundary."""
        if self.ring is None:
            self._start_before_steps(FIRST_BATCH)
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

    def fetch_begin(self, loader: int = 0) -> None:
        """`next()` on a loader (`loader`, where known) starts: the open step ends here, and
        so does an evaluation when the loader is the training loader."""
        depth = self.fetching = self.fetching + 1
        if depth > 1:  # a watched iterable whose own iterator is patched too
            return
        if (self.evaluating and loader and self._is_training_loader(loader)
                and self.end_evaluation is not None):
            self.end_evaluation()
        t = self._fetch_t0 = perf_counter_ns()
        self.phase_now = DATA
        if self.open:
            self._fetch_closed = True
            self._close(t)
        else:
            self._fetch_closed = False

    def fetch_end(self, loader: int, batch_size: int = NONE) -> None:
        """`next()` returned a batch: a new step opens, its data wait is the blocked time."""
        depth = self.fetching = self.fetching - 1
        if depth:
            return
        self.phase_now = HOST
        t0 = self._t_open = self._fetch_t0
        self._data = perf_counter_ns() - t0
        self.open = True
        self._loader = loader
        self._batch = batch_size
        if self.gpu is not None:
            with self._gpu_lock:
                self.gpu.step_opened(self._fetch_closed)

    def fetch_stop(self) -> None:
        """`next()` raised (StopIteration or an error): no step opens."""
        self.fetching = max(0, self.fetching - 1)
        if not self.fetching:
            self.phase_now = HOST

    # -- phases and explicit boundaries ----------------------------------------------------

    def add_phase(self, phase: int, ns: int) -> None:
        """Add `ns` to a phase of the open step (opening one when none is)."""
        if not self.open:
            self._open_implicit(perf_counter_ns() - ns)
        self.acc[phase] += ns or 1

    def auto_phase(self, phase: int, ns: int) -> None:
        """A phase timed by the torch patch; the program's own phase() calls take precedence."""
        if self.manual:
            self._trains = self._trains or (self.open and phase >= BACKWARD)
        elif self.open and not self.backward_closes:  # the common case: this runs every step
            self.acc[phase] += ns or 1
        else:
            self._phase_before_optimizer(phase, ns)

    def _phase_before_optimizer(self, phase: int, ns: int) -> None:
        """A phase timed by the torch patch while no optimizer step has been seen (or no step
        is open): a backward in a loader-less step that holds one closes that step where the
        new backward began and opens the next there, so the update between them and the next
        batch's input belong to the step of the backward before."""
        if (phase == BACKWARD and self.open and not self._loader and self.acc[BACKWARD]
                and self.phase_now != OPTIMIZER):  # not a closure's: its step holds them all
            t = perf_counter_ns() - ns
            self._close_flags = F_AT_BACKWARD
            try:
                self._close(t)
            finally:
                self._close_flags = 0
            self._open_implicit(t)
        self.add_phase(phase, ns)

    def auto_optimizer_done(self, ns: int) -> None:
        """An optimizer step timed by the torch patch (ignored under manual phases)."""
        if self.manual:
            self._trains = self._trains or self.open
        elif self.open and self._loader:  # the common case, as in auto_phase
            self.acc[OPTIMIZER] += ns or 1
        else:
            self.optimizer_done(ns)

    def optimizer_done(self, ns: int) -> None:
        """An optimizer step took `ns`; it ends a step that no loader opened, and the next
        step opens there (its input runs until the stepped model's forward)."""
        self.backward_closes = False
        self.add_phase(OPTIMIZER, ns)
        if not self._loader:
            t = perf_counter_ns()
            self._close(t)
            self._open_implicit(t)
            self._awaiting_forward = True
            self.phase_now = INPUT

    def forward_begin(self, t: int) -> bool:
        """The stepped model's forward starts at `t` (the torch patch, outermost calls);
        returns whether the open step lacks its batch size (no loader gave one), which the
        forward's input then gives (forward_batch)."""
        if self._awaiting_forward:
            self._end_input(t)
        return self.open and self._batch == NONE

    def forward_batch(self, size: int) -> None:
        """The open step's batch size, from the first dimension of its model's input."""
        self._batch = size

    def _end_input(self, t: int) -> None:
        """The first forward since an optimizer step: the input of a loader-less step ends
        (where the optimizer step began, for a closure's forward), less the device waits in it."""
        self._awaiting_forward = False
        if self.open and not self._loader and not self.manual:
            if self.phase_now == OPTIMIZER:
                t = max(self._t_open, self.optimizer_t0)
            self._data = max(0, t - self._t_open - self.sync)
            if self.gpu is not None:
                with self._gpu_lock:
                    self.gpu.step_opened(True)

    def forward_done(self, ns: int) -> None:
        """The stepped model's forward took `ns` (the program's own phase() calls win)."""
        if self.open and not self.manual:
            self.acc[FORWARD] += ns or 1

    def step_end(self, batch_size: int | None = None) -> None:
        """Close the open step now; without a loader the next step opens at once."""
        self.backward_closes = False  # the program marks its own boundaries
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
        if self.ring is None:
            self._start_before_steps(NO_STEP_YET)
        self._awaiting_forward = False
        self.open = True
        self._t_open = t
        self._data = NONE
        self._loader = 0
        self._batch = NONE

    def _close(self, t: int) -> None:
        self.open = False
        loader = self._loader
        acc = self.acc
        if (loader and loader == self._train_loader and self._in_epoch >= WARMUP_STEPS
                and (acc[BACKWARD] or acc[OPTIMIZER])):
            flags = F_OPTIMIZER  # a steady training step: the common case, decided at once
            self._trains = False
        else:
            flags = self._flags(loader, acc)
        t_open, data, sync = self._t_open, self._data, self.sync
        # host: the rest of the step (each phase is timed outside the others; nested ones,
        # a closure's inside its optimizer step, are taken out where they nest)
        host = t - t_open - (data if data > 0 else 0) - acc[0] - acc[1] - acc[2] - acc[3] - sync
        if self.manual and not (acc[FORWARD] and acc[BACKWARD] and acc[OPTIMIZER]):
            host = NONE  # the program times its own phases, not all of the model's: the rest
            # may be its model as well as its host code
        sampled = self.site_counts
        if sampled[0] != self._step:
            sampled = NO_SAMPLES
        record = (  # ring_format.PAYLOAD_FIELDS in order; the phases in PHASES order
            self._step, t_open, t - t_open, data, acc[0] or NONE, acc[1] or NONE,
            acc[2] or NONE, acc[3] or NONE, NONE, NONE, self._batch, self._epoch, flags, loader,
            host if host > 0 or host == NONE else 0, sync if self.sync_known else NONE,
            *sampled[1:],
        )
        if self.gpu is None:  # staged as stage() does, spelled out: this runs every step
            self._staged.append(record)
            if t >= self._publish_at or len(self._staged) >= STAGE_MAX:
                self.publish(t)
        elif self.enabled:
            self._closed_at = t
            with self._gpu_lock:
                self.gpu.step_closed(self, record)
        self._step += 1
        acc[0] = acc[1] = acc[2] = acc[3] = self.sync = 0

    def _flags(self, loader: int, acc: list[int]) -> int:
        """A step's flags in general: implicit, training, another loader's, warm-up."""
        if self._status_shown:
            self._clear_status()
        flags = self._close_flags | (
            0 if loader else F_IMPLICIT | (F_INPUT_OUTSIDE_MODEL if self._data != NONE else 0))
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
        return flags

    def publish(self, now: int | None = None, wait: bool = False) -> None:
        """Write every staged step to the ring (creating it on first use).

        Once the ring exists a publisher thread may be writing too: without `wait`, this
        returns at once when it is (the steps stay staged for the next publish).
        """
        lock = self._lock
        if lock is not None and not lock.acquire(wait):
            return
        try:
            staged = self._staged
            count = len(staged)  # the training thread may stage more meanwhile: keep those
            self._publish_at = (perf_counter_ns() if now is None else now) + PUBLISH_NS
            ring = self.ring
            if ring is None and self.enabled and count:  # a process with no steps has none
                ring = self._start_ring()
            if ring is not None and self.enabled:
                ring.append(staged[:count])
            del staged[:count]
        finally:
            if lock is not None:
                lock.release()

    def _publish_when_stalled(self) -> None:
        """The publisher thread: steps a paused trainer left staged reach the ring anyway,
        and so do steps still waiting for their GPU times once the GPU gets there."""
        poll_gpu = True
        while self.enabled:
            time.sleep(STALL_CHECK_S)
            gpu = self.gpu
            if poll_gpu and gpu is not None and perf_counter_ns() - self._closed_at >= PUBLISH_NS:
                try:
                    with self._gpu_lock:
                        gpu.poll(self)
                except Exception:  # a GPU error surfaces in the trainer's own calls, not here
                    poll_gpu = False
            if self._staged and perf_counter_ns() >= self._publish_at:
                self.publish(wait=True)

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
        """Merge facts into the metadata area (rewritten only when something changed).

        Never raises: a fact JSON cannot hold is kept as short text, and anything else
        going wrong costs one warning, not the program.
        """
        try:
            self.facts.update(plain_facts(facts))
            if self.ring is None and self.enabled and start:
                self._start_ring()
            self._write_facts()
        except Exception as exc:
            annotate_failed(exc)

    def _write_facts(self) -> None:
        with self._meta_lock:
            if self.ring is None or self.facts == self._facts_written:
                return
            self._facts_written = dict(self.facts)
            self.ring.set_meta(bounded_json(self.facts, ring_format.META_CAP))

    def set_sites(self, sites: dict[str, str]) -> None:
        """The stack sampler's site table (id -> "function (file:line)") into the metadata."""
        with self._meta_lock:
            self.facts[ring_format.META_SITES] = sites
        self._write_facts()

    def _start_before_steps(self, status: str) -> None:
        """Create the ring before any step closed, saying so (`status`) in the metadata: a
        program that iterates a loader or runs backward is probed before (or without) steps."""
        if self.enabled and not self._step and not self._staged:
            self.facts[ring_format.META_STATUS] = status
            self._status_shown = True
            self._start_ring()

    def _clear_status(self) -> None:
        """A step closed: the metadata no longer needs to say why none had."""
        self._status_shown = False
        self.facts.pop(ring_format.META_STATUS, None)
        self.annotate({}, start=False)

    def _start_ring(self) -> ring_format.RingWriter | None:
        """Create the ring on first use; when that fails, go quiet after one warning."""
        if os.getpid() != self.owner:
            self.enabled = False
            return None
        self.ring = self._open_ring()
        if self.ring is None:
            self.enabled = False
            return None
        self._write_facts()
        import threading

        self._lock = threading.Lock()
        threading.Thread(target=self._publish_when_stalled, name="gputop-probe-publisher",
                         daemon=True).start()
        if os.environ.get(SAMPLE_ENV) != "0":
            from gputop.probe.stack_sampler import start_sampling

            start_sampling(self)
        return self.ring

    # -- lifecycle -------------------------------------------------------------------------

    def forked(self) -> None:
        """In a forked child (a DataLoader worker): never write or unlink the parent's ring."""
        self.enabled = False
        if self.ring is not None:
            self.ring.closed = True  # the parent still owns the file
        self.ring = None
        self.gpu = None
        self._staged.clear()
        self._lock = None  # the publisher thread is not in the child; its lock may be held
        self._gpu_lock = allocate_lock()

    def close(self) -> None:
        """At exit: publish steps still waiting for GPU times, then unlink the ring."""
        if os.getpid() != self.owner:
            return
        if self.gpu is not None and self.ring is not None:
            with self._gpu_lock:
                self.gpu.flush(self)
        self.publish(wait=True)
        lock = self._lock
        if lock is not None:
            lock.acquire()  # the publisher thread is never mid-write when the ring goes
        try:
            self.enabled = False
            if self.ring is not None:
                with self._meta_lock:  # the sampler thread never writes its sites meanwhile
                    self.ring.close()
        finally:
            if lock is not None:
                lock.release()

    def stage(self, record: tuple[int, ...]) -> None:
        """Stage one record (the GPU hook calls this once the step's GPU times are known)."""
        self._staged.append(record)
        now = perf_counter_ns()
        if now >= self._publish_at or len(self._staged) >= STAGE_MAX:
            self.publish(now)


class GpuHook:
    """What the recorder needs from a GPU timer (implemented in gpu_timing.py)."""

    def step_opened(self, contiguous: bool) -> None:
        """A loader delivered a batch: the GPU part of a step starts here."""

    def step_closed(self, rec: Recorder, record: tuple[int, ...]) -> None:
        """A step closed (its record without GPU times); stage it once they are known."""

    def poll(self, rec: Recorder) -> None:
        """Write every waiting step whose GPU work has finished."""

    def flush(self, rec: Recorder) -> None:
        """Write every step still waiting, with unknown GPU times."""


def bounded_json(facts: dict[str, object], cap: int) -> bytes:
    """Facts as JSON of at most `cap` bytes, dropping the longest values first if needed."""
    import json

    clean = plain_facts(facts)
    while True:
        blob = json.dumps(clean, separators=(",", ":"), sort_keys=True).encode()
        if len(blob) <= cap or not clean:
            return blob if len(blob) <= cap else b"{}"
        longest = max(clean, key=lambda k: len(json.dumps(clean[k])))
        del clean[longest]


def plain_facts(facts: dict[str, object]) -> dict[str, object]:
    """Facts as JSON can always hold them: short text keys, bounded values (the sampler's site
    table a flat object of texts)."""
    return {_text(key, MAX_KEY): _plain_table(value) if key == ring_format.META_SITES
            and isinstance(value, dict) else _plain(value) for key, value in facts.items()}


def _plain_table(table: dict[object, object]) -> dict[str, str]:
    return {_text(key, MAX_KEY): _text(value, MAX_TEXT) for key, value in table.items()}


def _plain(value: object) -> object:
    """None, a bool, a float, an int of at most MAX_INT_BITS, or at most MAX_TEXT characters."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        bits = value.bit_length()  # str() of a huge int is slow, then refused (3.11+)
        return int(value) if bits <= MAX_INT_BITS else f"<int of {bits} bits>"
    if isinstance(value, float):
        return float(value)
    return _text(value, MAX_TEXT)


def _text(value: object, cap: int) -> str:
    """str(), else repr(), of `value`, cut to `cap`; lone surrogates written as escapes."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = str(value)
        except Exception:
            try:
                text = repr(value)
            except Exception:
                text = f"<unprintable {type(value).__name__}>"
    return text[:cap].encode("utf-8", "backslashreplace").decode("utf-8")


def annotate_failed(exc: Exception) -> None:
    """Say once that annotate() could not record something; later failures stay quiet."""
    global _annotate_warned
    if not _annotate_warned:
        _annotate_warned = True
        warn(f"annotate() could not record a fact ({type(exc).__name__}: "
             f"{_text(exc, MAX_TEXT)}); the program runs on")


def warn(message: str) -> None:
    """One line on stderr, prefixed so the user knows who speaks."""
    try:
        sys.stderr.write(f"gputop.probe: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass
