"""Names where a step's host and data time goes: at most every INTERVAL_S, a look at the
phase the training (main) thread is in and, in host or data time, at its Python stack.

Two triggers drive the same state. "signal" (the default where it can be had): a POSIX timer
sends SIGURG to the main thread (signal_timer.py), and a Python handler there gets the frame
it interrupted. It samples pure Python as often as a C call that lets go of the GIL, where a
thread must wait for the GIL and so sees the C calls far more often than their time says.
It is used only from the main thread, where SIGURG is at its default (never a signal the
program uses; ignored by default, so a late one after exit is harmless), and hands over to
"thread" when the program installs its own SIGURG handler later. "thread": a daemon thread
reading sys._current_frames(); the fallback, and what GPUTOP_PROBE_SAMPLER=thread asks for.

The site of a sample is the innermost frame of the user's program (not the standard library,
not site-packages or dist-packages, not the probe, not torch): "function (file:line)" with the
file's base name and the line of the function's def (of the current line at module level).
Outside a loader's next() (host time, a loader-less step's input), a site that called a
blocking wait on another thread or process (WAITS: queue.Queue.get, Thread.join, ...) names
it: "next_batch (train.py:40) waiting in queue.Queue.get", a site of its own; the wait's
code objects are resolved once from the modules imported, never matched by name per sample.
Sites are interned as small ids; the id -> text table goes to the ring's metadata under
META_SITES when a site first appears (bounded: MAX_SITES, SITES_BYTES). Each sample hands
the recorder the open step's counts as one new tuple (Recorder.site_counts): the training
thread reads it when the step closes, without a lock. Counts are in samples of INTERVAL_S:
a late or slowed sample counts for the time it stands for, so a site's share of the samples
is its share of the time; a sample in another phase than the one before counts for one (a
late handler must not give the model's long C call to the host code after it).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import sysconfig
import threading
import time
from types import CodeType, FrameType

from gputop.probe import ring as ring_format
from gputop.probe.steps import DATA, HOST, INPUT, Recorder

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gputop.probe.signal_timer import ThreadTimer

INTERVAL_S = 0.01  # ~100 Hz at most
# A step open this long, or no step for this long, is sampled every SLOW_INTERVAL_S (a long
# LBFGS step, a hung trainer or an idle one that must read as using no CPU); a sample then
# counts for the INTERVAL_S it stands for.
SLOW_AFTER_S = 2.0
SLOW_INTERVAL_S = 0.5
MAX_WEIGHT = round(2 * SLOW_INTERVAL_S / INTERVAL_S)
MAX_SITES = 64
SITES_BYTES = 1536  # the table's share of the metadata area (META_CAP bytes in all)
SITE_TEXT = 120  # characters of one site's text
MAX_CODES = 4096  # code objects classified before the cache starts over
LIBRARY = -1  # a frame of the standard library, a package, the probe or torch
MODULE = -2  # a module's top level: named by its current line
# Library functions that block until another thread or process hands something over:
# (module, qualified name, the name a site gives it). The i-th is FIRST_WAIT - i in the cache.
WAITS = (
    ("queue", "Queue.get", "queue.Queue.get"),
    ("threading", "Condition.wait", "threading.Condition.wait"),
    ("threading", "Event.wait", "threading.Event.wait"),
    ("threading", "Thread.join", "threading.Thread.join"),
    ("concurrent.futures._base", "Future.result", "concurrent.futures.Future.result"),
    ("concurrent.futures._base", "wait", "concurrent.futures.wait"),
    ("concurrent.futures._base", "as_completed", "concurrent.futures.as_completed"),
    ("multiprocessing.queues", "Queue.get", "multiprocessing.Queue.get"),
    ("multiprocessing.queues", "SimpleQueue.get", "multiprocessing.SimpleQueue.get"),
    ("multiprocessing.connection", "wait", "multiprocessing.connection.wait"),
)
WAIT_MODULES = tuple(sorted({module for module, _, _ in WAITS}))
FIRST_WAIT = -3
# comprehensions and generator expressions: code objects of their own on 3.11, part of the
# function that holds them to the user who wrote them
_INLINE = frozenset(("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"))
SAMPLER_ENV = "GPUTOP_PROBE_SAMPLER"  # "thread": the thread sampler even where "signal" runs
META_SAMPLER = ring_format.META_SAMPLER  # the metadata's key: SIGNAL or THREAD
SIGNAL, THREAD = "signal", "thread"
TIMER_SIGNAL = signal.SIGURG
WATCH_S = 1.0  # how often the signal trigger checks that SIGURG is still its own
NO_PHASE = -1


def start_sampling(rec: Recorder) -> StackSampler:
    """Start sampling the main thread for `rec` (stops with the ring): by signal where it can
    be had and the environment does not ask for the thread."""
    sampler = StackSampler(rec, threading.main_thread().ident or 0)
    sampler.start(THREAD if os.environ.get(SAMPLER_ENV) == THREAD else SIGNAL)
    return sampler


class StackSampler:
    """The sampler's state: the interned sites and the counts of the step it samples."""

    def __init__(self, rec: Recorder, thread_id: int) -> None:
        self.rec = rec
        self.thread_id = thread_id
        self.codes: dict[object, int] = {}  # code (or (code, line)) -> site id or LIBRARY
        self.table: dict[str, str] = {}
        self.table_bytes = 2
        self.sites_unwritten = False  # the table grew where its lock could not be taken
        self.step = -1
        self.step_seen = 0.0  # when the sampler first saw the step it samples
        self.last = time.monotonic()  # when it last woke
        self.last_phase = NO_PHASE
        self.idle_since: float | None = None  # since when no step is open (None: one is)
        self.interval = INTERVAL_S
        self.samples = 0
        self.host: dict[int, int] = {}
        self.data: dict[int, int] = {}
        self.library = library_prefixes()
        self.waits: dict[CodeType, int] = {}  # WAITS' code objects -> their marks
        self.wait_modules = 0  # how many of WAIT_MODULES were imported when resolved
        self.waiting: dict[tuple[int, int], int] = {}  # (site, wait mark) -> site id
        self.trigger = THREAD
        self.timer: ThreadTimer | None = None
        self.handler = self._on_signal  # one object: signal.getsignal() tells it apart
        self.in_handler = False
        self.stopped = threading.Event()  # set: the thread of the latest start() ends
        self.exit_registered = False

    # -- triggers --------------------------------------------------------------------------

    def start(self, trigger: str = SIGNAL) -> str:
        """Sample by `trigger` (SIGNAL falls back to THREAD where it cannot be had); the
        trigger that runs, which the metadata records too."""
        stopped = self.stopped = threading.Event()
        if trigger != SIGNAL or not self._arm_signal():
            trigger = THREAD
        self.trigger = trigger
        self.rec.annotate({META_SAMPLER: trigger}, start=False)
        threading.Thread(target=self.watch if trigger == SIGNAL else self.run, args=(stopped,),
                         name="gputop-probe-sampler", daemon=True).start()
        return trigger

    def stop(self) -> None:
        """Stop sampling (from the main thread, to give SIGURG back as it was)."""
        self.stopped.set()
        self._disarm_signal()

    def run(self, stopped: threading.Event) -> None:
        """The thread trigger: sample until the recorder stops or `stopped` is set; an error
        ends sampling, never the program."""
        rec = self.rec
        while rec.enabled and not stopped.wait(self.interval):
            try:
                self.sample()
            except Exception:
                return

    def watch(self, stopped: threading.Event) -> None:
        """Beside the signal trigger: write a table the handler could not, and hand over to
        the thread trigger once the program has put its own handler on SIGURG."""
        rec = self.rec
        while rec.enabled and not stopped.wait(WATCH_S):
            timer = self.timer
            if timer is None:
                return
            if self.sites_unwritten:
                self._write_sites()
            if signal.getsignal(TIMER_SIGNAL) is not self.handler:
                timer.delete()  # the program's handler: never called 100 times a second
                self.timer = None
                self.trigger = THREAD
                rec.annotate({META_SAMPLER: THREAD}, start=False)
                self.run(stopped)
                return
        if not rec.enabled:
            self._disarm_signal()  # closed (stop() has disarmed it already)

    def _arm_signal(self) -> bool:
        """Take SIGURG and start its timer, where it is at its default and this is the main
        thread; False where it cannot be had."""
        if threading.current_thread() is not threading.main_thread():
            return False
        try:
            from gputop.probe.signal_timer import ThreadTimer

            if signal.getsignal(TIMER_SIGNAL) != signal.SIG_DFL:
                return False  # the program's, or a library's: never ours to take
            signal.signal(TIMER_SIGNAL, self.handler)
            signal.siginterrupt(TIMER_SIGNAL, False)  # SA_RESTART: restartable calls restart
            try:
                self.timer = ThreadTimer(TIMER_SIGNAL, threading.get_native_id(), self.interval)
            except OSError:
                signal.signal(TIMER_SIGNAL, signal.SIG_DFL)
                return False
        except (ImportError, OSError, ValueError):
            return False
        if not self.exit_registered:
            self.exit_registered = True
            atexit.register(self._at_exit)
            os.register_at_fork(after_in_child=self._forked)
        return True

    def _disarm_signal(self) -> None:
        """Delete the timer; in the main thread, give SIGURG back its default where our
        handler still holds it."""
        timer, self.timer = self.timer, None
        if timer is not None:
            timer.delete()
        if threading.current_thread() is threading.main_thread():
            try:
                if signal.getsignal(TIMER_SIGNAL) is self.handler:
                    signal.signal(TIMER_SIGNAL, signal.SIG_DFL)  # as it was: taken only so
            except (OSError, ValueError, TypeError):
                pass

    def _at_exit(self) -> None:
        """Before the recorder closes (atexit runs the later registered first): the timer
        goes, and the sites the last steps name reach the metadata."""
        if self.rec.owner != os.getpid():
            return  # a forked child: the timer is the parent's, never inherited
        self.stopped.set()
        self._disarm_signal()
        if self.sites_unwritten and self.rec.enabled:
            self._write_sites()

    def _forked(self) -> None:
        """In a forked child: no timer came along, so nothing is deleted; SIGURG is at its
        default again, for the child's program (and a probe of its own) to have."""
        self.timer = None
        self.stopped.set()
        try:
            if signal.getsignal(TIMER_SIGNAL) is self.handler:
                signal.signal(TIMER_SIGNAL, signal.SIG_DFL)
        except (OSError, ValueError, TypeError):
            pass

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """The signal trigger's handler, run by the main thread between two bytecodes: one
        sample of `frame`. Never raises into the program; takes no lock it could wait on."""
        rec = self.rec
        if self.in_handler or self.timer is None or rec.owner != os.getpid():
            return  # nested; or stopped with a signal still pending; or a forked child
        if not rec.enabled:
            self._disarm_signal()
            return
        self.in_handler = True
        try:
            self.sample(frame)
        except Exception:
            self._disarm_signal()  # as the thread trigger ends at an error
        finally:
            self.in_handler = False

    def _set_interval(self, interval: float) -> None:
        if interval != self.interval:
            self.interval = interval
            timer = self.timer
            if timer is not None:
                timer.set_period(interval)

    # -- samples ---------------------------------------------------------------------------

    def sample(self, frame: FrameType | None = None) -> None:
        """One sample of the open step (or of the fetch that opens the next): of `frame`,
        else of the sampled thread's current frame."""
        rec = self.rec
        now = time.monotonic()
        weight = min(MAX_WEIGHT, max(1, round((now - self.last) / INTERVAL_S)))
        self.last = now
        if not (rec.open or rec.fetching):
            # between steps: slowed once it lasts (an idle notebook, a finished run) so the
            # probe's wake-ups never make a process that does nothing read as busy
            self.last_phase = NO_PHASE
            if self.idle_since is None:
                self.idle_since = now
            self._set_interval(SLOW_INTERVAL_S if now - self.idle_since > SLOW_AFTER_S
                               else INTERVAL_S)
            return
        self.idle_since = None
        phase = rec.phase_now
        step = rec._step
        if step != self.step:
            self.step, self.samples, self.step_seen = step, 0, now
            self.host, self.data = {}, {}
            weight = 1
        if phase != self.last_phase:
            self.last_phase = phase
            weight = 1
        self._set_interval(SLOW_INTERVAL_S if now - self.step_seen > SLOW_AFTER_S
                           else INTERVAL_S)
        self.samples += weight
        if phase in (HOST, DATA, INPUT):
            if frame is None:
                frame = sys._current_frames().get(self.thread_id)
            site = (self.site_of(frame, phase != DATA) if frame is not None
                    else ring_format.NO_SITE)
            if site:
                counts = self.host if phase == HOST else self.data
                counts[site] = counts.get(site, 0) + weight
        if self.sites_unwritten:
            self._write_sites()
        rec.site_counts = (step, self.samples, *_top(self.host), *_top(self.data),
                           ring_format.part_samples(sum(self.host.values()),
                                                    sum(self.data.values())))

    def site_of(self, frame: FrameType | None, waits: bool = False) -> int:
        """The site id of the innermost frame of the user's program (NO_SITE: none, or one
        the full table cannot name); with `waits`, as waiting in the outermost of WAITS
        that it called, where it called one."""
        codes = self.codes
        wait = 0
        while frame is not None:
            code = frame.f_code
            site = codes.get(code)
            if site is None:
                site = self._classify(code)
            if site == LIBRARY or site <= FIRST_WAIT:  # the library's: on to its caller
                if waits and site <= FIRST_WAIT:
                    wait = site  # one of WAITS, the outermost so far
                frame = frame.f_back
                continue
            if site == MODULE:
                site = self._module_site(code, frame.f_lineno)
            if not wait:
                return site
            found = self.waiting.get((site, wait))
            return self._waiting(site, wait) if found is None else found
        return ring_format.NO_SITE

    def _classify(self, code: CodeType) -> int:
        if len(self.codes) >= MAX_CODES:
            self.codes.clear()  # ids stay: the table keeps them
        filename = code.co_filename
        if self._is_library(filename):
            site = self._wait_mark(code)
        elif code.co_name in _INLINE:
            site = LIBRARY  # named as the function it runs in (where 3.12 inlines it)
        elif code.co_name == "<module>":
            site = MODULE
        else:
            site = self._intern(f"{code.co_name} ({os.path.basename(filename)}:"
                                f"{code.co_firstlineno})")
        self.codes[code] = site
        return site

    def _wait_mark(self, code: CodeType) -> int:
        """A library code's mark: FIRST_WAIT - i for the i-th of WAITS, else LIBRARY; the
        waits are resolved again only once more of their modules are imported."""
        imported = sum(module in sys.modules for module in WAIT_MODULES)
        if imported != self.wait_modules:
            self.wait_modules, self.waits = imported, wait_codes()
        return self.waits.get(code, LIBRARY)

    def _waiting(self, site: int, wait: int) -> int:
        """The id of `site` waiting in the wait marked `wait`, interned (the wait's name kept
        whole where the text is cut) and cached in self.waiting."""
        plain = self.table.get(str(site))
        suffix = ring_format.WAITING + WAITS[FIRST_WAIT - wait][2]
        found = self.waiting[site, wait] = (
            self._intern(plain[:SITE_TEXT - len(suffix)] + suffix) if plain is not None
            else ring_format.NO_SITE)
        return found

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
        self._write_sites()
        return site

    def _write_sites(self) -> None:
        """The table into the metadata; later where the metadata's lock is held. The signal
        handler may have interrupted the very code that holds it: it must never wait on it."""
        lock = self.rec._meta_lock
        if not lock.acquire(False):
            self.sites_unwritten = True
            return
        lock.release()  # free, so neither this thread nor the one it interrupted holds it
        self.sites_unwritten = False
        self.rec.set_sites(dict(self.table))

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


def wait_codes() -> dict[CodeType, int]:
    """The code objects of WAITS in the modules imported so far, each to its mark."""
    found: dict[CodeType, int] = {}
    for i, (module, qualname, _) in enumerate(WAITS):
        obj: object = sys.modules.get(module)
        for part in qualname.split("."):
            obj = getattr(obj, part, None)
        code = getattr(obj, "__code__", None)
        if isinstance(code, CodeType):
            found[code] = FIRST_WAIT - i
    return found


def _top(counts: dict[int, int]) -> tuple[int, int]:
    """The most sampled site and its samples, (NO_SITE, 0) when none."""
    if not counts:
        return ring_format.NO_SITE, 0
    site = max(counts, key=counts.__getitem__)
    return site, counts[site]
