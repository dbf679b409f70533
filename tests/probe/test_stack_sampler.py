"""The stack sampler's sites, in-process: the innermost frame of the user's program (library
frames skipped) named "function (file:line of its def)", interned once, and a table that
stays bounded in the ring's metadata."""

from __future__ import annotations

import json
import os
import sys
import threading
from types import FrameType

from gputop.probe import ring as ring_format
from gputop.probe.reader import RingReader
from gputop.probe.stack_sampler import MAX_SITES, StackSampler
from gputop.probe.steps import HOST, Recorder

FILE = os.path.basename(__file__)


def _sampler(rec: Recorder) -> StackSampler:
    rec.annotate({})  # the ring, so the table has somewhere to go
    return StackSampler(rec, 0)


def _meta_sites(rec: Recorder) -> dict[str, str]:
    assert rec.ring is not None
    reader = RingReader(rec.ring.path)
    try:
        sites = reader.read_meta().get(ring_format.META_SITES)
    finally:
        reader.close()
    assert isinstance(sites, dict)
    return sites


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
    sampler = _sampler(rec)
    site = user_function(sampler)
    assert site == user_function(sampler)  # interned once
    line = user_function.__code__.co_firstlineno
    assert _meta_sites(rec)[str(site)] == f"user_function ({FILE}:{line})"
    outer = called_back_by_the_standard_library(sampler)
    line = called_back_by_the_standard_library.__code__.co_firstlineno
    assert _meta_sites(rec)[str(outer)] == f"called_back_by_the_standard_library ({FILE}:{line})"


def test_the_site_table_is_bounded(rec: Recorder) -> None:
    sampler = _sampler(rec)
    ids = [sampler._intern(f"f{n} (x.py:{n})") for n in range(MAX_SITES + 10)]
    named = [i for i in ids if i != ring_format.NO_SITE]
    assert len(named) == len(set(named)) <= MAX_SITES
    assert ids[-1] == ring_format.NO_SITE
    sites = _meta_sites(rec)
    assert len(sites) == len(named) and all(sites[str(i)].startswith("f") for i in named)


def test_counts_reach_the_recorder_for_the_step_sampled(rec: Recorder) -> None:
    sampler = _sampler(rec)
    sampler.thread_id = threading.get_ident()
    rec.optimizer_done(1)  # a step opens
    rec.phase_now = HOST
    for _ in range(3):
        sampler.sample()
    _, samples, host, host_samples, data, data_samples = rec.site_counts
    assert (samples, host_samples, data, data_samples) == (3, 3, ring_format.NO_SITE, 0)
    line = test_counts_reach_the_recorder_for_the_step_sampled.__code__.co_firstlineno
    assert _meta_sites(rec)[str(host)] == (
        f"test_counts_reach_the_recorder_for_the_step_sampled ({FILE}:{line})")
