"""What the commands share: the one place sources are chosen (`build_sampler`), checks of
the user's choices, whose trainers a command takes, the recorder and the signaller. The TUI
receives a ready sampler and never imports a source."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gputop.app.options import BadInput

if TYPE_CHECKING:  # each function loads what it uses: a check loads no sampler, nor a
    # live view the recorder
    from gputop.app.signalling import ProcessSignaller
    from gputop.export.scope import TrainerScope
    from gputop.frames.sampler import DeferredSources, Sampler
    from gputop.recording.writer_thread import Recorder, Retention
    from gputop.sources.first_sample import FirstSample
    from gputop.sources.host import ProcHostSource
    from gputop.sources.processes import ProcProcessSource


def check_scenario(name: str) -> None:
    """Refuse an unknown simulated-GPU scenario with the list of known ones."""
    from gputop.sources import simulated

    try:
        simulated.check_scenario(name)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def check_attach(pid: int) -> None:
    """Refuse `--attach PID` when PID is gone, has no probe, or belongs to someone else; one
    under the probe with no ring yet is attached, its state says so (and its children's
    rings, spawned trainers', join as they appear)."""
    from gputop.sources.attach import check_attachable

    reason = check_attachable(pid, accept_pending=True)
    if reason is not None:
        raise BadInput(reason)


def trainer_scope(all_users: bool) -> TrainerScope:
    """Whose trainers record and serve take: the caller's, or with `all_users` (root only:
    no one else may read other users' rings) everyone's."""
    import os

    from gputop.export.scope import TrainerScope

    if all_users and os.geteuid() != 0:
        raise BadInput("--all-users needs root: only root may read other users' trainers")
    return TrainerScope.of_caller(all_users)


def build_sampler(
    *,
    demo: str | None = None,
    gpus: int | None = None,
    membw: str = "auto",
    interval_s: float = 1.0,
    advice_after: int = 2,
    defer: bool = False,
    owner_pids: Sequence[int] = (),
    early: bool = False,
    first_sample: FirstSample | None = None,
) -> Sampler:
    """The sampler for real hardware, or simulated GPUs when `demo` names a scenario.

    With `defer`, memory bandwidth, attach and advice wait for
    `Sampler.add_deferred_sources()`: a
    live view paints its first frame from GPUs, host and processes alone. With `early`,
    the host and the processes get a first look before the GPU source opens (NVML takes
    a while to start): the live view's first frame then needs no priming sample. A
    `first_sample` (taken before gputop loaded) serves as that look.
    """
    from gputop.frames.sampler import Sampler, look_early
    from gputop.sources.host import ProcHostSource
    from gputop.sources.processes import ProcProcessSource

    host, processes = ProcHostSource(), ProcProcessSource()
    if first_sample is not None:
        looked_at: float | None = _seed(host, processes, first_sample)
    else:
        looked_at = look_early(host, processes) if early else None
    from gputop.sources.gpu import open_gpu_source

    gpu = (open_gpu_source(simulate=demo, owner_pids=owner_pids) if gpus is None
           else open_gpu_source(demo, count=gpus, owner_pids=owner_pids))
    sampler = Sampler(gpu=gpu, host=host, processes=processes, interval_s=interval_s,
                      looked_at=looked_at)
    sampler.defer_sources(lambda: _deferred_sources(membw, advice_after))
    if not defer:
        sampler.add_deferred_sources()
    return sampler


def _seed(host: ProcHostSource, processes: ProcProcessSource, look: FirstSample) -> float:
    """Make `look` the host's and the processes' previous sample; when it was taken."""
    host.seed(look.host_stat)
    processes.seed(look)
    return look.monotonic


def _deferred_sources(membw: str, advice_after: int) -> DeferredSources:
    from gputop.advice import Advisor
    from gputop.analysis.steps import verdict_of
    from gputop.frames.sampler import DeferredSources
    from gputop.sources.attach import RingAttachSource
    from gputop.sources.membw import open_membw_source

    return DeferredSources(membw=open_membw_source(membw),
                           attach=RingAttachSource(verdict_of=verdict_of),
                           advisor=Advisor(on_after=advice_after))


def signaller(readonly: bool) -> ProcessSignaller | None:
    """What lets the TUI's `k` send signals; None under --readonly."""
    if readonly:
        return None
    from gputop.app.signalling import ProcessSignaller

    return ProcessSignaller()


def check_record_path(path: str) -> None:
    """What can be said of a recording's path before a file is made: bad input now."""
    from gputop.recording.writer import RecordError, refuse_directory

    try:
        refuse_directory(path)
    except RecordError as exc:
        raise BadInput(str(exc)) from None


def open_recorder(path: str, retention: Retention | None = None,
                  trainers_of: str | None = None, mode: int | None = None) -> Recorder:
    """A recorder writing to `path` (a new file with `mode`, default 0600), its `meta` saying
    whose trainers it holds when `trainers_of` does; a file that cannot be a recording is bad
    input."""
    from gputop.core.safe_files import PRIVATE
    from gputop.recording.writer import RecordError, note_trainers_of
    from gputop.recording.writer_thread import Recorder

    try:
        recorder = Recorder(path, retention, mode=PRIVATE if mode is None else mode)
    except RecordError as exc:
        raise BadInput(str(exc)) from None
    if trainers_of is not None:  # before any frame: the writer's thread is idle
        note_trainers_of(recorder.db, trainers_of)
    return recorder
