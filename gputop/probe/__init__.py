"""The step probe that runs inside a training process (standard library only).

    import gputop.probe as probe
    for batch in probe.watch(loader):          # time blocked in next() = data wait
        with probe.phase("h2d"): ...
        with probe.phase("forward"): ...
        with probe.phase("backward"): ...
        with probe.phase("optimizer"): ...

Or without touching the code: `python -m gputop.probe train.py` / `gputop run -- ...`.
When no ring can be created the probe warns once and the program runs on untouched.
"""

from __future__ import annotations

import itertools
import os
import sys
from time import perf_counter_ns

from gputop.probe import ring as _ring
from gputop.probe.steps import PHASES, Recorder, annotate_failed, warn

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at import; the probe must start fast
    from collections.abc import Callable, Iterable, Iterator
    from typing import Any, TypeVar

    T = TypeVar("T")

__all__ = ["annotate", "install", "install_inherited", "phase", "step_end", "unlink_ring",
           "watch"]
LOADER_FACTS = ("num_workers", "pin_memory", "batch_size", "prefetch_factor",
                "persistent_workers")

_rec: Recorder | None = None
_loaders: dict[int, tuple[int, Callable[[], object]]] = {}
_next_id = itertools.count(1)


def watch(loader: Iterable[T], batch_size: int | None = None) -> Iterator[T]:
    """Iterate `loader`; each next() closes the open step and opens the next one."""
    rec = recorder()
    lid = loader_id(loader)
    facts = loader_facts(loader)
    if batch_size is None and isinstance(facts.get("batch_size"), int):
        batch_size = facts["batch_size"]  # type: ignore[assignment]
    return _watched(rec, loader, lid, facts, -1 if batch_size is None else batch_size)


def _watched(
    rec: Recorder, loader: Iterable[T], lid: int, facts: dict[str, object], batch_size: int
) -> Iterator[T]:
    rec.iteration_begin(lid, facts)
    it = iter(loader)
    begin, end, stop = rec.fetch_begin, rec.fetch_end, rec.fetch_stop
    while True:
        begin(lid)
        try:
            item = next(it)
        except StopIteration:
            stop()
            return
        except BaseException:
            stop()
            raise
        end(lid, batch_size)
        yield item


class _Phase:
    """A reusable context manager timing one phase of the open step (kept lean: it runs
    four times a step)."""

    __slots__ = ("_acc", "_index", "_prev", "_rec", "_t0")

    def __init__(self, rec: Recorder, index: int) -> None:
        self._rec = rec
        self._acc = rec.acc
        self._index = index
        self._t0 = 0
        self._prev = 0

    def __enter__(self) -> _Phase:
        rec = self._rec
        self._prev, rec.phase_now = rec.phase_now, self._index  # for the stack sampler
        self._t0 = perf_counter_ns()
        return self

    def __exit__(self, kind: object, value: object, tb: object) -> None:
        ns = perf_counter_ns() - self._t0
        self._rec.phase_now = self._prev
        if self._rec.open:
            self._acc[self._index] += ns or 1  # 0 means "not seen", as in add_phase
        else:
            self._rec.add_phase(self._index, ns)


class _PhaseTable(dict[str, "_Phase"]):
    """name -> the recorder's _Phase; a name's first lookup validates it and marks the
    program as timing its own phases."""

    def __missing__(self, name: str) -> _Phase:
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}; use one of {', '.join(PHASES)}")
        rec = recorder()
        rec.manual = True
        rec.times_own_training = rec.times_own_training or name in ("backward", "optimizer")
        ctx = self[name] = _Phase(rec, PHASES[name])
        return ctx


_phase_table = _PhaseTable()
# phase(name) times one phase of the open step: "h2d", "forward", "backward" or
# "optimizer". It runs four times a step, so it is a C-level dict lookup once warm.
phase: Callable[[str], _Phase] = _phase_table.__getitem__


def step_end(batch_size: int | None = None) -> None:
    """Close the open step now (optional with watch(); the step boundary without it)."""
    rec = recorder()
    rec.manual = True
    rec.step_end(batch_size)


def annotate(**facts: Any) -> None:
    """Record facts about the run (num_workers, pin_memory, batch_size, device, rank, ...).

    Never raises into the program: odd values are kept as short text (see Recorder.annotate).
    """
    try:
        recorder().annotate(facts)
    except Exception as exc:
        annotate_failed(exc)


def recorder() -> Recorder:
    """The process's recorder, created (with its exit and fork handlers) on first use."""
    global _rec
    if _rec is None:
        _use(Recorder(_open_ring))
        assert _rec is not None
        _rec.annotate(env_facts(), start=False)
        import atexit

        atexit.register(_rec.close)
        os.register_at_fork(after_in_child=_rec.forked)
        from gputop.probe.hook import watch_for_torch

        watch_for_torch(_rec)
    return _rec


def _use(rec: Recorder) -> None:
    """Make `rec` the process's recorder (phases bind to it on their next lookup)."""
    global _rec
    _rec = rec
    _phase_table.clear()


def install() -> Recorder:
    """Zero-code mode: patch torch (now or once the program imports it), create the ring."""
    return recorder()


def install_inherited() -> None:
    """The probe in a Python child of a probed program (its sitecustomize): installed, but a
    multiprocessing forkserver, which trains nothing, leaves it to the processes it forks
    (a recorder of its own would be a DataLoader worker's, disabled, in each of them)."""
    from gputop.probe.inherit import is_forkserver

    if is_forkserver():
        os.register_at_fork(after_in_child=_install_in_forked_process)
    else:
        install()


def _install_in_forked_process() -> None:
    """In a process a forkserver forked: its own probe; nothing in the processes it forks in
    turn (they have a recorder: its fork handler disables it)."""
    if _rec is not None:
        return
    install()
    from multiprocessing.util import register_after_fork

    register_after_fork(_close_with_multiprocessing, _close_with_multiprocessing)


def _close_with_multiprocessing(_: object) -> None:
    """Run by multiprocessing as the forked process starts its target: it will leave by
    os._exit, which skips atexit, so the ring goes with multiprocessing's exit handlers."""
    from multiprocessing.util import Finalize

    if _rec is not None:
        Finalize(None, _rec.close, exitpriority=-100)  # the last of them: after its children


def _open_ring() -> _ring.RingWriter | None:
    path = _ring.ring_path(os.getpid())
    _unlink_on_sigterm()  # first: a SIGTERM while the file is being made must remove it too
    try:
        writer = _ring.RingWriter(path)
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        warn(f"cannot create {path} ({reason}); step timing is off, the program runs on")
        return None
    if writer.squatter is not None:
        taken, owner = writer.squatter
        warn(f"{taken} is taken by a file of uid {owner}; the ring is {writer.path} instead")
    return writer


def _unlink_on_sigterm() -> None:
    """Remove the ring when SIGTERM kills us, where the program leaves SIGTERM at its default:
    a handler of its own (now or later) wins, and atexit covers every normal exit."""
    import signal

    if os.getpid() == 1:
        # PID 1 of a namespace: the kernel drops a SIGTERM it has no handler for, so the
        # program runs on; a handler would make the signal land and take the ring from it.
        return
    try:
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _die_of_sigterm)
    except (ValueError, OSError):  # not the main thread: only it may set handlers
        return


def _die_of_sigterm(signum: int, frame: object) -> None:
    """Unlink the ring (in the process that created it), then die of SIGTERM as by default."""
    import signal

    unlink_ring()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def unlink_ring() -> None:
    """Remove this process's ring now, taking no lock (safe in a signal handler), for a
    program about to leave with os._exit(); steps not yet published are lost."""
    _ring.unlink_created()  # also a ring still being made, before the recorder holds it


def env_facts() -> dict[str, object]:
    """Rank and world size as torchrun and friends put them in the environment."""
    out: dict[str, object] = {}
    for key, name in (("RANK", "rank"), ("WORLD_SIZE", "world_size"),
                      ("LOCAL_RANK", "local_rank")):
        value = os.environ.get(key, "")
        if value.isdigit():
            out[name] = int(value)
    rendezvous = _rendezvous()
    if rendezvous is not None:
        out["rendezvous"] = rendezvous
    out["argv"] = " ".join(sys.argv)[:200]
    return out


LOOPBACK_NAMES = ("localhost", "127.", "::1")


def _rendezvous() -> str | None:
    """The job across hosts as torchrun's ranks all see it (run id, MASTER_ADDR:MASTER_PORT);
    None without one, or for a loopback address, which names no job beyond this host."""
    addr, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    if not addr or not port or addr.startswith(LOOPBACK_NAMES):
        return None
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    return ((f"{run_id}@" if run_id and run_id != "none" else "") + f"{addr}:{port}")[:200]


def loader_facts(loader: object) -> dict[str, object]:
    """The DataLoader-style settings an object carries (read by name, no torch needed)."""
    facts: dict[str, object] = {}
    for name in LOADER_FACTS:
        value = getattr(loader, name, None)
        if isinstance(value, (bool, int)):
            facts[name] = value
    return facts


def loader_id(loader: object) -> int:
    """A small number per loader object, stable while the object lives."""
    key = id(loader)
    entry = _loaders.get(key)
    if entry is not None and entry[1]() is loader:
        return entry[0]
    import weakref

    ref: Callable[[], object]
    try:
        ref = weakref.ref(loader)
    except TypeError:  # lists and tuples: keep them alive so the id is never reused
        ref = _Strong(loader)
    lid = next(_next_id)
    _loaders[key] = (lid, ref)
    return lid


class _Strong:
    """A strong reference with weakref.ref's calling convention."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __call__(self) -> object:
        return self.obj
