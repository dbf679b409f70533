"""The stack sampler, in-process: sites are the innermost frame of the user's program (library
frames skipped) named "function (file:line of its def)", interned once, in a table that stays
bounded in the ring's metadata; a late sample in a new phase counts for one; the signal
trigger samples the main thread and gives SIGURG back when it stops."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

import pytest

from gputop.probe import ring as ring_format
from gputop.probe.stack_sampler import (
    INTERVAL_S,
    MAX_SITES,
    META_SAMPLER,
    SIGNAL,
    SLOW_AFTER_S,
    SLOW_INTERVAL_S,
    TIMER_SIGNAL,
    StackSampler,
)
from gputop.probe.steps import FORWARD, HOST, SAMPLE_ENV, Recorder
from tests.helpers.sampler_sites import meta_sites, sampler_on

FILE = os.path.basename(__file__)


def user_function(sampler: StackSampler) -> int:
    return sampler.site_of(sys._getframe())


def called_back_by_the_standard_library(sampler: StackSampler) -> int:
    frames: list[FrameType] = []

    def hook(obj: dict[str, object]) -> dict[str, object]:
        frame = sys._getframe(1)  # json's own frame, below this function's
        frames.append(frame)
        return obj

    json.loads('{"a": 1}', object_hook=hook)
    return sampler.site_of(frames[0])


def test_a_site_is_the_innermost_user_function_by_its_def_line(rec: Recorder) -> None:
    sampler = sampler_on(rec)
    site = user_function(sampler)
    assert site == user_function(sampler)  # interned once
    line = user_function.__code__.co_firstlineno
    assert meta_sites(rec)[str(site)] == f"user_function ({FILE}:{line})"
    outer = called_back_by_the_standard_library(sampler)
    line = called_back_by_the_standard_library.__code__.co_firstlineno
    assert meta_sites(rec)[str(outer)] == f"called_back_by_the_standard_library ({FILE}:{line})"


def encodes_with_a_comprehension(sampler: StackSampler) -> tuple[int, int]:
    in_list = [sampler.site_of(sys._getframe()) for _ in range(1)].pop()
    in_generator = next(sampler.site_of(sys._getframe()) for _ in range(1))
    return in_list, in_generator


def test_a_comprehension_is_named_as_the_function_it_runs_in(rec: Recorder) -> None:
    sampler = sampler_on(rec)
    in_list, in_generator = encodes_with_a_comprehension(sampler)
    line = encodes_with_a_comprehension.__code__.co_firstlineno
    assert in_list == in_generator  # minGPT's `[self.stoi[s] for s in chunk]`: __getitem__
    assert meta_sites(rec)[str(in_list)] == f"encodes_with_a_comprehension ({FILE}:{line})"


def test_the_site_table_is_bounded(rec: Recorder) -> None:
    sampler = sampler_on(rec)
    ids = [sampler._intern(f"f{n} (x.py:{n})") for n in range(MAX_SITES + 10)]
    named = [i for i in ids if i != ring_format.NO_SITE]
    assert len(named) == len(set(named)) <= MAX_SITES
    assert ids[-1] == ring_format.NO_SITE
    sites = meta_sites(rec)
    assert len(sites) == len(named) and all(sites[str(i)].startswith("f") for i in named)


def test_counts_reach_the_recorder_for_the_step_sampled(rec: Recorder) -> None:
    sampler = sampler_on(rec)
    sampler.thread_id = threading.get_ident()
    rec.optimizer_done(1)  # a step opens
    rec.phase_now = HOST
    for _ in range(3):
        sampler.sample()
    _, samples, host, host_samples, data, data_samples, parts = rec.site_counts
    assert (samples, host_samples, data, data_samples) == (3, 3, ring_format.NO_SITE, 0)
    assert parts == ring_format.part_samples(3, 0)
    line = test_counts_reach_the_recorder_for_the_step_sampled.__code__.co_firstlineno
    assert meta_sites(rec)[str(host)] == (
        f"test_counts_reach_the_recorder_for_the_step_sampled ({FILE}:{line})")


def test_a_late_sample_in_a_new_phase_counts_for_one(rec: Recorder) -> None:
    sampler = sampler_on(rec)
    sampler.thread_id = threading.get_ident()
    rec.optimizer_done(1)  # a step opens
    rec.phase_now = FORWARD
    sampler.sample()
    late = 50
    rec.phase_now = HOST  # a handler held up by the model's C call runs in the host code after
    sampler.last -= late * INTERVAL_S
    sampler.sample()
    assert rec.site_counts[3] == 1
    sampler.last -= late * INTERVAL_S  # late again, in the phase of the sample before
    sampler.sample()
    assert late <= rec.site_counts[3] - 1 <= late + 1


def test_no_step_for_long_slows_the_sampler_and_a_step_speeds_it_up(rec: Recorder) -> None:
    sampler = sampler_on(rec)
    sampler.thread_id = threading.get_ident()
    sampler.sample()  # no step open: a trainer between epochs, or an idle notebook
    assert sampler.interval == INTERVAL_S
    assert sampler.idle_since is not None
    sampler.idle_since -= 2 * SLOW_AFTER_S
    sampler.sample()
    assert sampler.interval == SLOW_INTERVAL_S  # its wake-ups never make it read as busy
    rec.optimizer_done(1)  # a step opens
    rec.phase_now = HOST
    sampler.sample()
    assert sampler.interval == INTERVAL_S and sampler.idle_since is None


def pure_python_until(rec: Recorder, deadline: float) -> None:
    total = 0
    while rec.site_counts[3] < 3 and time.monotonic() < deadline:
        for n in range(500):
            total += n * n


def sigurg_at_default(deadline: float) -> bool:
    """Whether SIGURG is at its default by `deadline`, running Python meanwhile: a closed
    recorder's signal sampler gives it back at the next signal its handler sees."""
    while signal.getsignal(TIMER_SIGNAL) != signal.SIG_DFL and time.monotonic() < deadline:
        sum(n * n for n in range(500))
    return signal.getsignal(TIMER_SIGNAL) == signal.SIG_DFL


def test_a_closed_recorders_signal_sampler_gives_sigurg_back(tmp_path: Path) -> None:
    assert threading.current_thread() is threading.main_thread()
    assert sigurg_at_default(time.monotonic() + 60)  # a recorder of an earlier test
    rec = Recorder(lambda: ring_format.RingWriter(
        ring_format.ring_path(os.getpid(), directory=str(tmp_path))))
    rec.annotate({})  # its ring, and with it its sampler
    assert rec.facts[META_SAMPLER] == SIGNAL
    handler = signal.getsignal(TIMER_SIGNAL)
    assert isinstance(getattr(handler, "__self__", None), StackSampler)
    rec.close()
    assert sigurg_at_default(time.monotonic() + 60)


def test_the_signal_trigger_samples_the_main_thread_and_gives_sigurg_back(
    rec: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert threading.current_thread() is threading.main_thread()
    assert sigurg_at_default(time.monotonic() + 60)  # a recorder of an earlier test
    monkeypatch.setenv(SAMPLE_ENV, "0")  # its ring starts no sampler of its own
    sampler = sampler_on(rec)
    assert sampler.start(SIGNAL) == SIGNAL
    try:
        assert signal.getsignal(TIMER_SIGNAL) is sampler.handler
        rec.optimizer_done(1)  # a step opens
        rec.phase_now = HOST
        pure_python_until(rec, time.monotonic() + 60)
    finally:
        sampler.stop()
    assert signal.getsignal(TIMER_SIGNAL) == signal.SIG_DFL
    assert sampler.timer is None
    _, _, host, host_samples, _, _, _ = rec.site_counts
    assert host_samples >= 3
    line = pure_python_until.__code__.co_firstlineno
    assert meta_sites(rec)[str(host)] == f"pure_python_until ({FILE}:{line})"
    assert rec.facts[META_SAMPLER] == SIGNAL
