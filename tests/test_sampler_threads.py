"""The sampler reads the threads of the processes the table asks for (htop's H), on its own
thread, into the Frame; none while none are asked for."""

from __future__ import annotations

from gputop.frames.sampler import Sampler
from gputop.sources.gpu import open_gpu_source
from gputop.sources.host import ProcHostSource
from gputop.sources.processes import ProcProcessSource
from tests.helpers.threaded import named_threads, thread_names


def _sampler() -> Sampler:
    return Sampler(gpu=open_gpu_source(simulate="mixed", count=1), host=ProcHostSource(),
                   processes=ProcProcessSource())


def test_the_frame_carries_the_threads_asked_for_and_none_once_no_longer_asked() -> None:
    sampler = _sampler()
    try:
        with named_threads(("s-one", "s-two")) as proc:
            assert not sampler.sample().threads
            sampler.show_threads([proc.pid])
            shown = sampler.sample().threads
            assert shown is not None
            assert {t.tid: t.comm for t in shown[proc.pid]} == thread_names(proc.pid)
            again = sampler.sample().threads
            assert again is not None and all(t.cpu_percent is not None for t in again[proc.pid])
            sampler.show_threads(())
            assert not sampler.sample().threads
    finally:
        sampler.close()
