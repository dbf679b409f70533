"""`gputop serve`: a Prometheus exporter of /metrics, headless (it never loads the TUI)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from gputop.app import options
from gputop.app.options import BadInput

if TYPE_CHECKING:
    from gputop.export.http import Tls
    from gputop.export.scope import TrainerScope


def parser() -> argparse.ArgumentParser:
    """`gputop serve`'s options."""
    from gputop.export.serve import DEFAULT_HOST, DEFAULT_PORT

    parser = options.Parser(prog="gputop serve", description="Serve /metrics (Prometheus text "
                            "and OpenMetrics) from one sampler thread; every probed trainer of "
                            "yours on this host (root: --all-users for everyone's) is attached "
                            "as it appears.")
    parser.add_argument("--listen", default=f"{DEFAULT_HOST}:{DEFAULT_PORT}",
                        metavar="HOST:PORT", help=f"address to serve on (default "
                        f"{DEFAULT_HOST}:{DEFAULT_PORT}, loopback only; 0.0.0.0:PORT for all "
                        "interfaces, port 0 for any free one)")
    parser.add_argument("--interval", type=options.interval, default=1.0, metavar="SECONDS",
                        help="sampling period (default 1.0); a scrape never samples")
    parser.add_argument("--per-worker", action="store_true",
                        help="also one series per DataLoader worker process")
    parser.add_argument("--demo", nargs="?", const=options.DEFAULT_SCENARIO, metavar="SCENARIO",
                        help="simulated GPUs (labelled simulated in gputop_exporter_info) and "
                        "the demo trainer")
    parser.add_argument("--no-demo-trainer", action="store_true",
                        help="with --demo: simulated GPUs only, no demo trainer")
    parser.add_argument("--gpus", type=options.gpu_count, default=None, metavar="N",
                        help="number of simulated GPUs with --demo (1..16)")
    parser.add_argument("--membw", choices=options.MEMBW_SOURCES, default="auto",
                        help="host memory-bandwidth source (default auto)")
    parser.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate "
                        "(PEM; with --tls-key)")
    parser.add_argument("--tls-key", metavar="FILE", help="the certificate's private key (PEM)")
    parser.add_argument("--tls-client-ca", metavar="FILE",
                        help="require client certificates signed by this CA (mutual TLS)")
    parser.add_argument("--basic-auth-file", metavar="FILE",
                        help="require HTTP basic auth: user:password lines, in a file only "
                        "its owner can read")
    parser.add_argument("--all-users", action="store_true", help=options.ALL_USERS_HELP)
    return parser


def handle(args: argparse.Namespace) -> int:
    """Check the options, then serve until SIGTERM or SIGINT."""
    options.check_gpus_with_demo(args)
    if args.no_demo_trainer and args.demo is None:
        raise BadInput("--no-demo-trainer goes with --demo")
    from gputop.app.wiring import check_scenario, trainer_scope

    scope = trainer_scope(args.all_users)
    if args.demo is not None:
        check_scenario(args.demo)
    return run_serve(listen=args.listen, interval_s=args.interval, per_worker=args.per_worker,
                     demo=args.demo, gpus=args.gpus, membw=args.membw,
                     demo_trainer=not args.no_demo_trainer, tls=_tls(args),
                     users=_users(args.basic_auth_file), scope=scope)


def _users(path: str | None) -> dict[str, bytes] | None:
    """The basic-auth users, or None without --basic-auth-file."""
    if path is None:
        return None
    from gputop.export.http import AuthFileError, load_users

    try:
        return load_users(path)
    except AuthFileError as exc:
        raise BadInput(str(exc)) from None


def _tls(args: argparse.Namespace) -> Tls | None:
    """The TLS files, checked for presence; None for plain HTTP."""
    from gputop.export.http import Tls

    if args.tls_cert is None and args.tls_key is None:
        if args.tls_client_ca is not None:
            raise BadInput("--tls-client-ca goes with --tls-cert and --tls-key")
        return None
    if args.tls_cert is None or args.tls_key is None:
        raise BadInput("HTTPS needs both --tls-cert and --tls-key")
    for path in (args.tls_cert, args.tls_key, args.tls_client_ca):
        if path is not None and not os.path.isfile(path):
            raise BadInput(f"no such file: {path}")
    return Tls(args.tls_cert, args.tls_key, args.tls_client_ca)


def run_serve(
    *, listen: str, interval_s: float = 1.0, per_worker: bool = False, demo: str | None = None,
    gpus: int | None = None, membw: str = "auto", demo_trainer: bool = True,
    tls: Tls | None = None, users: dict[str, bytes] | None = None,
    scope: TrainerScope | None = None,
) -> int:
    """`gputop serve`: /metrics for Prometheus until SIGTERM or SIGINT, the trainers of
    `scope` (default: the caller's); with `demo`, simulated GPUs (and, unless
    `demo_trainer` is False, the demo trainer on GPU 0)."""
    from gputop.app.wiring import build_sampler
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
