"""An in-process stack sampler on a test's Recorder, and the site table it writes to the ring."""

from __future__ import annotations

from gputop.probe import ring as ring_format
from gputop.probe.reader import RingReader
from gputop.probe.stack_sampler import StackSampler
from gputop.probe.steps import Recorder


def sampler_on(rec: Recorder) -> StackSampler:
    """A StackSampler of `rec`'s, its ring opened so the site table has somewhere to go."""
    rec.annotate({})
    return StackSampler(rec, 0)


def meta_sites(rec: Recorder) -> dict[str, str]:
    """The site table in the ring's metadata: site id (as text) -> "function (file:line)"."""
    assert rec.ring is not None
    reader = RingReader(rec.ring.path)
    try:
        sites = reader.read_meta().get(ring_format.META_SITES)
    finally:
        reader.close()
    assert isinstance(sites, dict)
    return sites
