"""A source that raises stops nothing: the tick goes on, the error shows, the source backs off."""

from __future__ import annotations

import queue
import threading
from pathlib import Path

import pytest

from gputop.core.model import Frame, MemoryBandwidthSample
from gputop.frames.sampler import Sampler
from gputop.sources.base import AttachSource, MemoryBandwidthSource
from gputop.sources.gpu import open_gpu_source
from gputop.sources.host import ProcHostSource
from gputop.sources.processes import ProcProcessSource
from gputop.tui.views.header import error_lines

GOOD = MemoryBandwidthSample(source="test", confidence="measured", pressure=0.25)


class FailsFromThirdCall:
    """A memory-bandwidth source whose counters vanish on its third read."""

    def __init__(self) -> None:
        self.calls = 0

    def sample(self) -> MemoryBandwidthSample:
        self.calls += 1
        if self.calls >= 3:
            raise RuntimeError("uncore counter vanished")
        return GOOD

    def close(self) -> None:
        pass


class RecordsAttachThread:
    """An attach source that notes which thread asked it to attach."""

    def __init__(self) -> None:
        self.attached: list[tuple[int, str]] = []

    def probe_pids(self) -> frozenset[int]:
        return frozenset()

    def remove_dead_rings(self) -> None:
        pass

    def attach(self, pid: int) -> None:
        self.attached.append((pid, threading.current_thread().name))

    def detach(self, pid: int) -> None:
        pass

    def sample(self) -> tuple[()]:
        return ()

    def close(self) -> None:
        pass


def _sampler(membw: MemoryBandwidthSource | None = None,
             attach: AttachSource | None = None) -> Sampler:
    return Sampler(gpu=open_gpu_source(simulate="idle"), host=ProcHostSource(),
                   processes=ProcProcessSource(), membw=membw, attach=attach, interval_s=0.02)


def _frames(sampler: Sampler, count: int) -> list[Frame]:
    """`count` frames from the sampler's own thread (never more than 30 s each)."""
    got: queue.Queue[Frame] = queue.Queue()
    sampler.start(got.put, first_gap_s=0.02)
    try:
        return [got.get(timeout=30) for _ in range(count)]
    finally:
        sampler.stop()


def test_a_source_raising_on_the_third_tick_stops_nothing_and_shows_the_error() -> None:
    membw = FailsFromThirdCall()
    frames = _frames(_sampler(membw=membw), 14)
    assert frames[0].errors == () and frames[0].memory_bandwidth == GOOD
    later = frames[2:]  # the priming sample was call 1, the first frame call 2
    assert all(f.error("membw") is not None for f in later)
    assert [f.time for f in later] == sorted({f.time for f in later})  # fresh ticks, in order
    assert all(f.processes and f.gpu.gpus and f.host.cpu_count for f in later)  # the rest goes on
    assert all(f.memory_bandwidth == GOOD for f in later)  # the last good sample, said so
    err = later[-1].error("membw")
    assert err is not None and err.message == "RuntimeError: uncore counter vanished"
    assert "showing its last good sample" in err.line()
    assert membw.calls < 2 + len(later)  # it backs off instead of failing every tick
    shown = ["".join(text for text, _ in line) for line in error_lines(later[-1], 120, "membw")]
    assert shown == [f" {err.line()}"]


def test_debug_mode_logs_the_traceback_to_a_private_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUTOP_DEBUG", "1")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    sampler = _sampler(membw=FailsFromThirdCall())
    for _ in range(3):
        sampler.sample()
    sampler.close()
    log = tmp_path / "gputop" / "debug.log"
    assert "Traceback" in log.read_text() and "uncore counter vanished" in log.read_text()
    assert log.stat().st_mode & 0o777 == 0o600


def test_a_failure_outside_the_sources_is_shown_on_the_last_frame() -> None:
    sampler = _sampler()
    sampler._last_frame = sampler.sample()
    calls = 0

    def broken_advisor(frame: Frame) -> tuple[()]:
        nonlocal calls
        calls += 1
        raise ValueError("rule bug")

    sampler.advisor = broken_advisor
    frame = sampler.sample()
    err = frame.error("advice")
    assert err is not None and "ValueError: rule bug" in err.message and frame.advice == ()
    sampler.close()


def test_attach_requests_run_on_the_sampling_thread() -> None:
    source = RecordsAttachThread()
    sampler = _sampler(attach=source)
    sampler.attach(4242)  # from this (the UI's) thread
    assert source.attached == []  # nothing touched the source from here
    _frames(sampler, 2)
    assert source.attached == [(4242, "gputop-sampler")]


def test_an_attach_waiting_for_the_deferred_sources_ticks_as_soon_as_they_join() -> None:
    """At a one-hour interval, the frame after the deferred sources join comes only from the
    wake-up they give an attach that waited for them."""
    from gputop.frames.sampler import DeferredSources

    source = RecordsAttachThread()
    sampler = _sampler()
    sampler.interval_s = 3600.0
    sampler.defer_sources(lambda: DeferredSources(attach=source))
    sampler.attach(4242)
    got: queue.Queue[Frame] = queue.Queue()
    sampler.start(got.put, first_gap_s=0.02)
    try:
        got.get(timeout=30)
        sampler.add_deferred_sources()
        got.get(timeout=30)
    finally:
        sampler.stop()
    assert source.attached == [(4242, "gputop-sampler")]
