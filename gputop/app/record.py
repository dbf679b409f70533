"""`gputop record [FILE]`: sample without a screen and record every tick, and every step of
every probed trainer in scope, to a SQLite file until Ctrl-C, SIGTERM or --duration."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from gputop.app import options
from gputop.app.options import BadInput

if TYPE_CHECKING:
    from gputop.core.model import Frame
    from gputop.export.scope import TrainerScope
    from gputop.frames.sampler import Sampler
    from gputop.recording.writer_thread import Retention


def parser() -> argparse.ArgumentParser:
    """`gputop record`'s options."""
    parser = options.Parser(prog="gputop record",
                            description="sample without a screen and record every tick, and "
                            "every step of every probed trainer of yours (root: --all-users for "
                            "everyone's), to a SQLite file (schema gputop.record/1); `gputop "
                            "replay FILE` shows it again; secret-looking command-line values "
                            "are masked")
    parser.add_argument("file", nargs="?", metavar="FILE",
                        help="where to record (default gputop-YYYYmmdd-HHMMSS.sqlite here); "
                        "an existing recording is appended to")
    parser.add_argument("--interval", type=options.interval, default=1.0, metavar="SECONDS",
                        help="sampling period (default 1.0)")
    parser.add_argument("--attach", type=options.pid, nargs="+", default=[], metavar="PID",
                        help="trainers to attach to from the start (every probed process "
                        "found later is attached too)")
    parser.add_argument("--duration", type=options.duration, metavar="DURATION",
                        help="stop after DURATION (e.g. 8h); default: until Ctrl-C or SIGTERM")
    parser.add_argument("--membw", choices=options.MEMBW_SOURCES, default="auto")
    parser.add_argument("--demo", nargs="?", const=options.DEFAULT_SCENARIO, metavar="SCENARIO",
                        help="simulated GPUs + the built-in demo trainer")
    parser.add_argument("--gpus", type=options.gpu_count, default=None, metavar="N")
    parser.add_argument("--all-users", action="store_true", help=options.ALL_USERS_HELP)
    options.add_retention(parser)
    options.add_mode(parser, "a recording")
    return parser


def handle(args: argparse.Namespace) -> int:
    """Headless, until Ctrl-C, SIGTERM or --duration."""
    options.check_gpus_with_demo(args)
    from gputop.app.wiring import check_attach, check_scenario, trainer_scope

    scope = trainer_scope(args.all_users)
    if args.demo is not None:
        check_scenario(args.demo)
    for pid in args.attach:
        check_attach(pid)
        check_in_scope(pid, scope)
    path = args.file or time.strftime("gputop-%Y%m%d-%H%M%S.sqlite")
    return run_record(path, interval_s=args.interval, attach_pids=args.attach,
                      membw=args.membw, retention=options.retention(args),
                      duration_s=args.duration, demo=args.demo, gpus=args.gpus, scope=scope,
                      mode=args.mode)


def check_in_scope(pid: int, scope: TrainerScope) -> None:
    """Refuse `--attach PID` of another user's trainer unless the scope takes every user's."""
    if not scope.takes(pid):
        raise BadInput(f"PID {pid} is another user's; add --all-users (root) to record it")


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
    from gputop.app.wiring import build_sampler, open_recorder
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
