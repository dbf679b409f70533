"""`gputop --fleet URL [--once [--json]]`: every `gputop serve` host a Prometheus server
scrapes, on a screen that refreshes at its scrape interval, or printed once."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gputop.app import options
from gputop.app.options import BadInput

if TYPE_CHECKING:
    from gputop.core.model import Frame
    from gputop.frames.fleet_sampler import FleetSampler


def add_options(parser: argparse.ArgumentParser) -> None:
    """--fleet and --fleet-timeout, options of the main command."""
    parser.add_argument("--fleet", "--prometheus", dest="fleet", metavar="URL",
                        help="the fleet: every `gputop serve` host this Prometheus server "
                        "scrapes (e.g. http://prometheus:9090), worst first, Enter for one "
                        "host; with --once, printed once")
    parser.add_argument("--fleet-timeout", type=options.seconds_between(0.1, 600, "must be"),
                        default=None, metavar="SECONDS", help="with --fleet: the most one "
                        "request to Prometheus may take, all of it (default 10)")


def handle(args: argparse.Namespace) -> int:
    """The fleet screen, or with --once the fleet printed once."""
    if args.demo is not None or args.attach is not None:
        raise BadInput("--fleet reads the fleet from Prometheus; it takes no "
                       "--demo or --attach")
    _check_url(args.fleet)
    if not args.once:
        options.need_terminal()
        try:
            return run_fleet(args.fleet, interval_s=args.interval, ascii=args.ascii,
                             timeout_s=args.fleet_timeout)
        except KeyboardInterrupt:
            return options.EXIT_OK
    frame = fleet_frame_once(args.fleet, args.interval, timeout_s=args.fleet_timeout)
    assert frame.fleet is not None
    from gputop.export import fleet
    from gputop.export.text import ascii_text, write_text

    if frame.fleet.error is not None:  # an answer refused as input is bad input
        print(f"gputop: {frame.fleet.error}", file=sys.stderr)
        return options.EXIT_USAGE if frame.fleet.answer_refused else options.EXIT_INTERNAL
    text = fleet.dumps(frame.fleet) + "\n" if args.json else fleet.render(frame.fleet)
    write_text(ascii_text(text) if args.ascii else text, sys.stdout)
    return options.EXIT_OK


def _check_url(text: str) -> None:
    """Refuse a fleet URL that cannot name a Prometheus server, before any screen opens."""
    from urllib.parse import urlsplit

    try:
        url = urlsplit(text)
        port = url.port  # a port that is no number raises here
    except ValueError as exc:
        raise BadInput(f"--fleet wants an http(s):// URL, got {text!r}: {exc}") from None
    if url.scheme not in ("http", "https") or not url.hostname:
        raise BadInput(f"--fleet wants an http(s):// URL, got {text!r}")
    if port == 0 or any(ch.isspace() for ch in text):
        raise BadInput(f"--fleet wants an http(s):// URL, got {text!r}")
    if "@" in url.netloc:  # a password in argv is every user's to read in ps
        raise BadInput("--fleet takes no user:password@ in its URL")
    if url.query or url.fragment or text.endswith(("?", "#")):
        raise BadInput(f"--fleet takes a URL with no ?query or #fragment, got {text!r}")


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
