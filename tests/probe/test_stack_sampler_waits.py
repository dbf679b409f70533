"""The stack sampler, in-process, on a thread blocked in a wait on another thread or process:
outside a loader's next() its site is the user's function named with the wait it called
("blocked_in (file:line) waiting in queue.Queue.get"), a site of its own beside the plain
one; in a loader's next() (DATA) it stays the plain site, the DataLoader's wait being the
DataLoader advice's."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from types import FrameType

import pytest

from gputop.probe.ring import WAITING
from gputop.probe.steps import DATA, HOST, INPUT, Recorder
from tests.helpers.sampler_sites import meta_sites, sampler_on

FILE = os.path.basename(__file__)
BLOCKED_WAIT_S = 60.0  # how long a thread may take to reach its wait (a bound, not a speed)


def blocked_in(wait: Callable[[], object]) -> None:
    wait()


def _frame_in(thread: threading.Thread, function: str) -> FrameType:
    """The thread's innermost frame once blocked_in has called `function` (its wait)."""
    deadline = time.monotonic() + BLOCKED_WAIT_S
    while time.monotonic() < deadline:
        innermost = frame = sys._current_frames().get(thread.ident or 0)
        inner = []
        while frame is not None and frame.f_code is not blocked_in.__code__:
            inner.append(frame.f_code.co_name)
            frame = frame.f_back
        if innermost is not None and frame is not None and function in inner:
            return innermost
        time.sleep(0.01)
    raise AssertionError(f"the thread never reached {function}")


@contextmanager
def blocked(wait: Callable[[], object], release: Callable[[], object]) -> Iterator[
        threading.Thread]:
    """A daemon thread in blocked_in(wait), released and joined afterwards."""
    thread = threading.Thread(target=blocked_in, args=(wait,), daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        release()
        thread.join(BLOCKED_WAIT_S)


def _queue() -> tuple[Callable[[], object], Callable[[], object]]:
    q: queue.Queue[int] = queue.Queue()
    return q.get, lambda: q.put(1)


def _event() -> tuple[Callable[[], object], Callable[[], object]]:
    event = threading.Event()
    return event.wait, event.set


def _join() -> tuple[Callable[[], object], Callable[[], object]]:
    event = threading.Event()
    other = threading.Thread(target=event.wait, daemon=True)
    other.start()
    return other.join, event.set


def _future() -> tuple[Callable[[], object], Callable[[], object]]:
    future: concurrent.futures.Future[int] = concurrent.futures.Future()
    return future.result, lambda: future.set_result(1)


def _futures_wait() -> tuple[Callable[[], object], Callable[[], object]]:
    future: concurrent.futures.Future[int] = concurrent.futures.Future()
    return partial(concurrent.futures.wait, [future]), lambda: future.set_result(1)


def _process_queue() -> tuple[Callable[[], object], Callable[[], object]]:
    q: multiprocessing.Queue[int] = multiprocessing.get_context("spawn").Queue()
    return q.get, lambda: q.put(1)


# (how to block and release, the function the thread is in once blocked, the wait named)
WAITS = [
    (_queue, "get", "queue.Queue.get"),
    (_event, "wait", "threading.Event.wait"),
    (_join, "join", "threading.Thread.join"),
    (_future, "result", "concurrent.futures.Future.result"),
    (_futures_wait, "wait", "concurrent.futures.wait"),
    (_process_queue, "get", "multiprocessing.Queue.get"),
]


@pytest.mark.parametrize(("make", "function", "named"), WAITS,
                         ids=[named for _, _, named in WAITS])
def test_a_site_blocked_in_a_wait_names_it(
    rec: Recorder, make: Callable[[], tuple[Callable[[], object], Callable[[], object]]],
    function: str, named: str,
) -> None:
    sampler = sampler_on(rec)
    wait, release = make()
    with blocked(wait, release) as thread:
        frame = _frame_in(thread, function)
        waiting = sampler.site_of(frame, waits=True)
        assert sampler.site_of(frame, waits=True) == waiting  # interned once
        plain = sampler.site_of(frame)
    line = blocked_in.__code__.co_firstlineno
    sites = meta_sites(rec)
    assert sites[str(plain)] == f"blocked_in ({FILE}:{line})"
    assert sites[str(waiting)] == f"blocked_in ({FILE}:{line}){WAITING}{named}"


def test_a_wait_is_named_outside_a_loaders_next_only(rec: Recorder) -> None:
    sampler = sampler_on(rec)
    wait, release = _queue()
    with blocked(wait, release) as thread:
        _frame_in(thread, "get")
        sampler.thread_id = thread.ident or 0  # the thread trigger's view of it
        seen = {}
        for phase in (HOST, INPUT, DATA):
            rec.optimizer_done(1)  # a step of its own for each phase's one sample
            rec.phase_now = phase
            sampler.sample()
            _, _, host, _, data, _ = rec.site_counts[:6]
            seen[phase] = host if phase == HOST else data
    sites = meta_sites(rec)
    line = blocked_in.__code__.co_firstlineno
    waiting = f"blocked_in ({FILE}:{line}){WAITING}queue.Queue.get"
    assert sites[str(seen[HOST])] == waiting
    assert sites[str(seen[INPUT])] == waiting  # a loader-less step's own fetch
    assert sites[str(seen[DATA])] == f"blocked_in ({FILE}:{line})"
