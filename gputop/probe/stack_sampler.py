"""Names where a step's host and data time goes: a daemon thread that, at most every
INTERVAL_S, looks at the phase the training thread is in and, in host or data time, at its
Python stack (sys._current_frames(), standard library only).

The site of a sample is the innermost frame of the user's program (not the standard library,
not site-packages or dist-packages, not the probe, not torch): "function (file:line)" with the
file's base name and the line of the function's def (of the current line at module level).
Sites are interned as small ids; the id -> text table goes to the ring's metadata under
META_SITES when a site first appears (bounded: MAX_SITES, SITES_BYTES). Each sample hands
the recorder the open step's counts as one new tuple (Recorder.site_counts): the training
thread reads it when the step closes, without a lock. Counts are in samples of INTERVAL_S:
a late or slowed sample counts for the time it stands for, so a site's share of the samples
is its share of the time.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
import time
from types import CodeType, FrameType

from gputop.probe import ring as ring_format
from gputop.probe.steps import DATA, HOST, INPUT, Recorder

INTERVAL_S = 0.01  # ~100 Hz at most
# A step open this long is sampled every SLOW_INTERVAL_S (a long LBFGS step, or a hung trainer
# that must read as using no CPU); a sample then counts for the INTERVAL_S it stands for.
SLOW_AFTER_S = 2.0
SLOW_INTERVAL_S = 0.5
MAX_WEIGHT = round(2 * SLOW_INTERVAL_S / INTERVAL_S)
MAX_SITES = 64
SITES_BYTES = 1536  # the table's share of the metadata area (META_CAP bytes in all)
SITE_TEXT = 120  # characters of one site's text
MAX_CODES = 4096  # code objects classified before the cache starts over
LIBRARY = -1  # a frame of the standard library, a package, the probe or torch
MODULE = -2  # a module's top level: named by its current line


def start_sampling(rec: Recorder) -> StackSampler:
    """Start sampling the main thread for `rec` (a daemon thread that stops with the ring)."""
    sampler = StackSampler(rec, threading.main_thread().ident or 0)
    threading.Thread(target=sampler.run, name="gputop-probe-sampler", daemon=True).start()
    return sampler


class StackSampler:
    """The sampler's state: the interned sites and the counts of the step it samples."""

    def __init__(self, rec: Recorder, thread_id: int) -> None:
        self.rec = rec
        self.thread_id = thread_id
        self.codes: dict[object, int] = {}  # code (or (code, line)) -> site id or LIBRARY
        self.table: dict[str, str] = {}
        self.table_bytes = 2
        self.step = -1
        self.step_seen = 0.0  # when the sampler first saw the step it samples
        self.last = time.monotonic()  # when it last woke
        self.interval = INTERVAL_S
        self.samples = 0
        self.host: dict[int, int] = {}
        self.data: dict[int, int] = {}
        self.library = library_prefixes()
        self.running = True  # False: the thread ends at its next wake-up

    def run(self) -> None:
        """Sample until the recorder or `running` stops; an error ends sampling, never the
        program."""
        rec = self.rec
        while rec.enabled and self.running:
            time.sleep(self.interval)
            try:
                self.sample()
            except Exception:
                return

    def sample(self) -> None:
        """One sample of the open step (or of the fetch that opens the next)."""
        rec = self.rec
        now = time.monotonic()
        weight = min(MAX_WEIGHT, max(1, round((now - self.last) / INTERVAL_S)))
        self.last = now
        if not (rec.open or rec.fetching):
            self.interval = INTERVAL_S
            return
        phase = rec.phase_now
        step = rec._step
        if step != self.step:
            self.step, self.samples, self.step_seen = step, 0, now
            self.host, self.data = {}, {}
            weight = 1
        self.interval = SLOW_INTERVAL_S if now - self.step_seen > SLOW_AFTER_S else INTERVAL_S
        self.samples += weight
        if phase in (HOST, DATA, INPUT):
            frame = sys._current_frames().get(self.thread_id)
            site = self.site_of(frame) if frame is not None else ring_format.NO_SITE
            if site:
                counts = self.host if phase == HOST else self.data
                counts[site] = counts.get(site, 0) + weight
        rec.site_counts = (step, self.samples, *_top(self.host), *_top(self.data))

    def site_of(self, frame: FrameType | None) -> int:
        """The site id of the innermost frame of the user's program (NO_SITE: none, or one
        the full table cannot name)."""
        codes = self.codes
        while frame is not None:
            code = frame.f_code
            site = codes.get(code)
            if site is None:
                site = self._classify(code)
            if site == MODULE:
                return self._module_site(code, frame.f_lineno)
            if site != LIBRARY:
                return site
            frame = frame.f_back
        return ring_format.NO_SITE

    def _classify(self, code: CodeType) -> int:
        if len(self.codes) >= MAX_CODES:
            self.codes.clear()  # ids stay: the table keeps them
        filename = code.co_filename
        if self._is_library(filename):
            site = LIBRARY
        elif code.co_name == "<module>":
            site = MODULE
        else:
            site = self._intern(f"{code.co_name} ({os.path.basename(filename)}:"
                                f"{code.co_firstlineno})")
        self.codes[code] = site
        return site

    def _module_site(self, code: CodeType, line: int | None) -> int:
        key = (code, line)
        site = self.codes.get(key)
        if site is None:
            site = self.codes[key] = self._intern(
                f"<module> ({os.path.basename(code.co_filename)}:{line or 0})")
        return site

    def _intern(self, text: str) -> int:
        """The id of a site's text; a new one goes to the metadata (NO_SITE once full)."""
        text = text[:SITE_TEXT]
        for key, known in self.table.items():
            if known == text:
                return int(key)
        size = len(text.encode("utf-8", "backslashreplace")) + 16
        if len(self.table) >= MAX_SITES or self.table_bytes + size > SITES_BYTES:
            return ring_format.NO_SITE
        site = len(self.table) + 1
        self.table[str(site)] = text
        self.table_bytes += size
        self.rec.set_sites(dict(self.table))
        return site

    def _is_library(self, filename: str) -> bool:
        if filename.startswith("<") or filename.startswith(self.library):
            return True
        if "/site-packages/" in filename or "/dist-packages/" in filename:
            return True
        torch = sys.modules.get("torch")
        where = getattr(torch, "__file__", None)
        return bool(where) and filename.startswith(os.path.dirname(str(where)) + os.sep)


def library_prefixes() -> tuple[str, ...]:
    """Directories whose code is not the user's: the standard library's, the installed
    packages', the probe's."""
    paths = sysconfig.get_paths()
    dirs = {paths.get(name) for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    dirs.add(os.path.dirname(os.__file__))
    # the probe's own code: the only gputop code that runs inside a user's trainer (the demo
    # trainers under gputop/app play the user's program, and are named as one would be)
    dirs.add(os.path.dirname(os.path.abspath(__file__)))
    found = set()
    for d in dirs:
        if d:
            found.add(d.rstrip(os.sep) + os.sep)
            found.add(os.path.realpath(d).rstrip(os.sep) + os.sep)
    return tuple(sorted(found))


def _top(counts: dict[int, int]) -> tuple[int, int]:
    """The most sampled site and its samples, (NO_SITE, 0) when none."""
    if not counts:
        return ring_format.NO_SITE, 0
    site = max(counts, key=counts.__getitem__)
    return site, counts[site]
