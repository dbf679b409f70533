"""The attach source classifies a step once, from every part it has (its host time too): the
analysis keeps the very record it made."""

from __future__ import annotations

from gputop.analysis import steps as step_analysis
from gputop.probe import ring as ring_format
from gputop.probe.reader import RawRecord
from gputop.sources.attach import to_step
from tests.helpers.probe import payload

MS = 1_000_000


def _host_heavy() -> RawRecord:
    """A loader-less step (nanoGPT's shape): most of it host time between the model's phases."""
    return RawRecord(0, *payload(
        step=5, start_ns=100 * MS, duration_ns=40 * MS, data_ns=2 * MS, forward_ns=4 * MS,
        backward_ns=6 * MS, optimizer_ns=1 * MS, batch_size=8, epoch=0, host_ns=27 * MS,
        sync_ns=0, flags=ring_format.F_OPTIMIZER | ring_format.F_IMPLICIT, loader=0))


def test_a_host_heavy_step_is_host_bound_as_made() -> None:
    step = to_step(_host_heavy(), step_analysis.verdict_of)
    assert step.host_ns == 27 * MS
    assert step.verdict == "host-bound" == step_analysis.classify(step)


def test_the_analysis_keeps_the_record_the_source_classified() -> None:
    calls: list[int] = []

    def counted(*fields: int | None) -> str:
        calls.append(1)
        return step_analysis.verdict_of(*fields)  # type: ignore[arg-type]

    step = to_step(_host_heavy(), counted)  # type: ignore[arg-type]
    assert calls == [1]
    assert step_analysis.with_verdict(step) is step  # its verdict stands: nothing is rebuilt
