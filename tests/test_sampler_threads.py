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
            assert sampler.sample().threads == {}
            sampler.show_threads([proc.pid])
            frame = sampler.sample()
            assert {t.tid: t.comm for t in frame.threads[proc.pid]} == thread_names(proc.pid)
            assert all(t.cpu_percent is not None for t in sampler.sample().threads[proc.pid])
            sampler.show_threads(())
            assert sampler.sample().threads == {}
    finally:
        sampler.close()
