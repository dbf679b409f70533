"""Builds what users run from the command-line choices: the one place sources are chosen and
child processes (the demo trainer, `gputop run`'s command) are started and stopped. The TUI
receives a ready sampler and never imports a source."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the sampler and subprocess load when used: the CLI imports this module
    import subprocess  # before the live view's first look (gputop.sources.first_sample)

    from gputop.app.children import RunCommand
    from gputop.app.signalling import ProcessSignaller
    from gputop.core.model import AttachState, Frame
    from gputop.export.http import Tls
    from gputop.export.scope import TrainerScope
    from gputop.frames.fleet_sampler import FleetSampler
    from gputop.frames.playback import Playback
    from gputop.frames.sampler import DeferredSources, Sampler
    from gputop.recording.writer_thread import Recorder, Retention
    from gputop.sources.first_sample import FirstSample
    from gputop.sources.host import ProcHostSource
    from gputop.sources.processes import ProcProcessSource


class BadInput(Exception):
    """A choice the user made that cannot be honoured; the CLI prints it and exits 2."""


def check_scenario(name: str) -> None:
    """Refuse an unknown simulated-GPU scenario with the list of known ones."""
    from gputop.sources import simulated

    try:
        simulated.check_scenario(name)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def check_gpu_count(count: int) -> int:
    """The number of simulated GPUs, if it is one the simulation offers."""
    from gputop.sources import simulated

    try:
        return simulated.check_count(count)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def check_attach(pid: int) -> None:
    """Refuse `--attach PID` when PID is gone, has no probe, or belongs to someone else."""
    from gputop.sources.attach import check_attachable

    reason = check_attachable(pid)
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


def check_in_scope(pid: int, scope: TrainerScope) -> None:
    """Refuse `--attach PID` of another user's trainer unless the scope takes every user's."""
    if not scope.takes(pid):
        raise BadInput(f"PID {pid} is another user's; add --all-users (root) to record it")


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


def start_probed(
    command: Sequence[str], log: str | None = None, new_log: bool = False,
    log_mode: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start `command` with the step probe installed, a log it makes with `log_mode` (default
    0600); a bad command or log is bad input."""
    from gputop.app.children import LogError, start_under_probe
    from gputop.core.safe_files import PRIVATE

    try:
        return start_under_probe(list(command), log=log, new_log=new_log,
                                 log_mode=PRIVATE if log_mode is None else log_mode)
    except LogError as exc:
        raise BadInput(str(exc)) from None
    except FileNotFoundError:
        raise BadInput(f"command not found: {command[0]}") from None
    except PermissionError:
        raise BadInput(f"command not executable: {command[0]}") from None
    except IsADirectoryError:
        raise BadInput(f"command is a directory: {command[0]}") from None
    except OSError as exc:
        raise BadInput(f"cannot start {command[0]}: {exc.strerror}") from None


def _all_ranks_open(attached: Sequence[AttachState]) -> bool:
    """Whether every rank of the job (by the world size it reports) has an open ring."""
    open_ = [a for a in attached if a.error is None]
    if not open_ or len(open_) < len(attached):
        return False
    return len(open_) >= max(a.config.world_size or 1 for a in open_)


def watch_child(child: subprocess.Popen[bytes], sampler: Sampler) -> Frame:
    """Sample `child` under the probe until it exits; the frame read right after it ended."""
    sampler.attach(child.pid)
    sampler.prime()
    rings = sampler.attach_source
    ring_open = rings is None
    while child.poll() is None:
        if ring_open:
            sampler.wait(min(sampler.interval_s, 0.5))
            sampler.sample()
        else:  # rings are unlinked when their process exits: open each as soon as it exists
            sampler.wait(0.02)
            attached = rings.sample() if rings is not None else ()
            ring_open = _all_ranks_open(attached)
    return sampler.sample()


def signaller(readonly: bool) -> ProcessSignaller | None:
    """What lets the TUI's `k` send signals; None under --readonly."""
    if readonly:
        return None
    from gputop.app.signalling import ProcessSignaller

    return ProcessSignaller()


def run_live(
    *, interval_s: float = 1.0, demo: str | None = None, gpus: int | None = None,
    membw: str = "auto", attach_pid: int | None = None, ascii: bool = False,
    record: str | None = None, retention: Retention | None = None, readonly: bool = False,
    on_exit: Callable[[Frame], None] | None = None, first_sample: FirstSample | None = None,
    scope: TrainerScope | None = None, mode: int | None = None,
) -> int:
    """The live TUI; with `demo`, simulated GPUs plus the real demo trainer on GPU 0;
    `ascii` draws with ASCII characters only; `record` also writes what it shows there (a
    new file with `mode`), the trainers of `scope` only (default: the caller's);
    `readonly` sends no signals; `on_exit`
    gets the last frame, with the advice then on screen, once the terminal is back;
    `first_sample`: the CLI's, taken as it started."""
    from gputop.export.scope import ScopedSink, TrainerScope
    from gputop.tui import run_tui

    scope = scope or TrainerScope.of_caller()
    recorder = (open_recorder(record, retention, scope.label, mode) if record is not None
                else None)
    trainer = None
    if demo is not None:
        from gputop.app.children import start_demo_trainer
        from gputop.app.demo_trainer import NO_TRAINER

        if demo not in NO_TRAINER:  # the trainer behaves as the scenario's GPUs look
            trainer = start_demo_trainer(extra_args=("--scenario", demo))
    try:
        sampler = build_sampler(demo=demo, gpus=gpus, membw=membw, interval_s=interval_s,
                                defer=True, owner_pids=[trainer.pid] if trainer else (),
                                early=True, first_sample=first_sample)
        if recorder is not None:
            sampler.add_sink(ScopedSink(recorder, scope))
        target = attach_pid if attach_pid is not None else (trainer.pid if trainer else None)
        return run_tui(sampler, attach_pid=target, ascii=ascii, signaller=signaller(readonly),
                       on_exit=on_exit)
    finally:
        if trainer is not None:
            trainer.stop()
        if recorder is not None:
            recorder.close()


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


def run_record(
    path: str, *, interval_s: float = 1.0, attach_pids: Sequence[int] = (),
    membw: str = "auto", retention: Retention | None = None, duration_s: float | None = None,
    demo: str | None = None, gpus: int | None = None, scope: TrainerScope | None = None,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    mode: int | None = None,
) -> int:
    """`gputop record`: sample without a screen and write every tick to `path` (a new file
    with `mode`) until Ctrl-C, SIGTERM, SIGHUP or `duration_s`; every probed trainer of
    `scope` (default: the caller's) seen is attached, so all its steps are kept. 0 when
    stopped, 1 when the recording itself had to stop."""
    from gputop.export.scope import ScopedSink, TrainerScope

    scope = scope or TrainerScope.of_caller()
    recorder = open_recorder(path, retention, scope.label, mode)
    trainer = None
    if demo is not None:
        from gputop.app.children import start_demo_trainer

        trainer = start_demo_trainer()
    done = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: done.set())
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    sampler: Sampler | None = None
    try:
        sampler = build_sampler(demo=demo, gpus=gpus, membw=membw, interval_s=interval_s,
                                owner_pids=[trainer.pid] if trainer else ())
        follow = ProbedTrainers(sampler, attach_pids, scope)

        def on_frame(frame: Frame) -> None:
            follow.attach_new(frame)
            if recorder.stopped:
                done.set()

        sampler.add_sink(ScopedSink(recorder, scope))
        say(f"gputop: recording to {path} every {interval_s:g} s (Ctrl-C stops)")
        sampler.start(on_frame)
        done.wait(duration_s)
    finally:
        if sampler is not None:
            sampler.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        recorder.close()
        if trainer is not None:
            trainer.stop()
    if recorder.stopped and recorder.error is not None:
        say(f"gputop: recording stopped: {recorder.error.message}")
        return 1
    say(f"gputop: recorded {recorder.writer.frames_written} ticks and "
        f"{recorder.writer.steps_written} steps to {path}")
    return 0


def open_playback(path: str, speed: float = 1.0) -> Playback:
    """A replay of the recording at `path`; a file that is not one is bad input."""
    from gputop.frames.playback import Playback, ReplayTickError
    from gputop.recording.reader import Recording, ReplayError

    try:
        recording = Recording(path)
    except ReplayError as exc:
        raise BadInput(str(exc)) from None
    if not len(recording):
        recording.close()
        raise BadInput(f"{path} holds no ticks yet")
    playback = Playback(recording, speed=speed)
    try:
        playback.frame_at(0)
    except ReplayTickError as exc:
        recording.close()
        raise BadInput(f"cannot replay {path}: {exc}") from None
    return playback


def run_replay(path: str, *, speed: float = 1.0, ascii: bool = False) -> int:
    """`gputop replay`: the live view's TUI, fed by a recording instead of the machine."""
    from gputop.tui import run_tui

    return run_tui(open_playback(path, speed), ascii=ascii)


class ProbedTrainers:
    """Attaches the sampler to the PIDs asked for and to every probed process of `scope`
    (default: every user's) that appears (a trainer already read as part of an attached job
    is left to that job)."""

    def __init__(self, sampler: Sampler, pids: Sequence[int] = (),
                 scope: TrainerScope | None = None) -> None:
        from gputop.export.scope import TrainerScope

        self.sampler = sampler
        self.scope = scope or TrainerScope(None)
        self.asked: set[int] = set()
        for pid in pids:
            self._attach(pid)

    def attach_new(self, frame: Frame) -> None:
        """Attach to probed processes of `frame` in the scope that nothing reads yet."""
        read = {a.pid for a in frame.attached}
        for process in frame.processes:
            if (process.has_probe and process.pid not in read and process.pid not in self.asked
                    and self.scope.takes(process.pid, process.start_ticks)):
                self._attach(process.pid)

    def _attach(self, pid: int) -> None:
        self.asked.add(pid)
        self.sampler.attach(pid)


def run_attached_child(
    command: RunCommand, *, interval_s: float = 1.0, membw: str = "auto", ascii: bool = False,
    readonly: bool = False,
) -> Frame | None:
    """`gputop run`: the TUI attached to `command`, which it may interrupt, stop or leave
    running; the frame to summarise at the end (None if none was shown). Ending a command
    that is still running is the caller's (`RunCommand.finish`). `readonly`: `k` is off."""
    from gputop.tui import run_tui

    final: list[Frame] = []
    sampler = build_sampler(membw=membw, interval_s=interval_s, defer=True)
    run_tui(sampler, attach_pid=command.pid, command=command, on_exit=final.append,
            ascii=ascii, signaller=signaller(readonly))
    return final[-1] if final else None


def run_serve(
    *, listen: str, interval_s: float = 1.0, per_worker: bool = False, demo: str | None = None,
    gpus: int | None = None, membw: str = "auto", demo_trainer: bool = True,
    tls: Tls | None = None, users: dict[str, bytes] | None = None,
    scope: TrainerScope | None = None,
) -> int:
    """`gputop serve`: /metrics for Prometheus until SIGTERM or SIGINT, the trainers of
    `scope` (default: the caller's); with `demo`, simulated GPUs (and, unless
    `demo_trainer` is False, the demo trainer on GPU 0)."""
    from gputop.export.metrics import FrameCollector
    from gputop.export.scope import TrainerScope
    from gputop.export.serve import (
        ListenError,
        Server,
        parse_listen,
        say_stderr,
        serve_until_stopped,
    )

    try:
        where = parse_listen(listen)
    except ListenError as exc:
        raise BadInput(str(exc)) from None
    trainer = None
    if demo is not None and demo_trainer:
        from gputop.app.children import start_demo_trainer

        trainer = start_demo_trainer()
    try:
        sampler = build_sampler(demo=demo, gpus=gpus, membw=membw, interval_s=interval_s,
                                owner_pids=[trainer.pid] if trainer else ())
        scope = scope or TrainerScope.of_caller()
        collector = FrameCollector(per_worker=per_worker, scenario=demo,
                                   trainers_of=scope.label)
        try:
            server = Server(sampler, collector, where, tls, users, scope)
        except ListenError as exc:
            sampler.close()
            raise BadInput(str(exc)) from None
        serve_until_stopped(server, say_stderr)
    finally:
        if trainer is not None:
            trainer.stop()
    return 0


def fleet_sampler(url: str, interval_s: float | None = None,
                  timeout_s: float | None = None) -> FleetSampler:
    """The fleet that the Prometheus server at `url` scrapes, refreshed every `interval_s`
    (None: at Prometheus's scrape interval), each request given up after `timeout_s`."""
    from gputop.frames.fleet_sampler import FleetSampler
    from gputop.sources.fleet import TIMEOUT_S, FleetSource, PrometheusClient
    from gputop.sources.host import ProcHostSource

    client = PrometheusClient(url, TIMEOUT_S if timeout_s is None else timeout_s)
    return FleetSampler(FleetSource(url, client), ProcHostSource(), interval_s)


def fleet_frame_once(url: str, interval_s: float | None = None,
                     timeout_s: float | None = None) -> Frame:
    """One Frame carrying the fleet that the Prometheus server at `url` scrapes."""
    return fleet_sampler(url, interval_s, timeout_s).sample()


def run_fleet(url: str, *, interval_s: float | None = None, ascii: bool = False,
              timeout_s: float | None = None) -> int:
    """The fleet screen: every host Prometheus scrapes, worst first; Enter drills in."""
    from gputop.tui import run_tui

    return run_tui(fleet_sampler(url, interval_s, timeout_s), ascii=ascii, splash=False)
