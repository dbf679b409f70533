"""The fleet's trainer step figure, through gputop's own exporter scraped by a real
Prometheus: the mean the screens show, named as such, beside a median that stays the median."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, start_http_server

from gputop.analysis.steps import STEP_STATISTIC, step_figure
from gputop.core import fmt
from gputop.core.model import AttachState, FleetHostDetail, FleetTrainer, Frame, TrainerConfig
from gputop.export.metrics import FrameCollector
from gputop.sources.fleet import FleetSource
from gputop.sources.fleet_detail import MEAN_STEP_STATISTIC
from gputop.tui.views.fleet import trainer_line
from tests.helpers.builders import frame, gpu, steps, trainer_with_workers
from tests.helpers.prometheus import free_port, prometheus, wait_until

PID = 4242
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None,
                       reason="prometheus is not installed (.ci/run installs Debian's package)"),
]


def skewed_frame() -> Frame:
    """A host whose one trainer has many short steps and some long ones: its mean and its
    median differ."""
    short, long = steps(30, data_ms=2, compute_ms=8), steps(20, data_ms=2, compute_ms=23)
    recs = tuple(replace(s, step=i) for i, s in enumerate((*short, *long)))
    rows, group = trainer_with_workers(PID, workers=2, worker_cpu=40.0)
    rows[0] = replace(rows[0], gpu_memory_bytes=30 * 2**30, gpu_indices=(0,), has_probe=True)
    state = AttachState(pid=PID, config=TrainerConfig(num_workers=2), dropped_records=0,
                        steps=recs)
    return frame(gpus=(gpu(0, pids=((PID, 30),)),), processes=rows, trainers=(group,),
                 attach=(state,))


@contextmanager
def exporter(shown: Frame) -> Iterator[str]:
    """gputop's exporter serving `shown` on a loopback port; its target."""
    collector = FrameCollector()
    collector.update(shown)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    port = free_port()
    server, thread = start_http_server(port, "127.0.0.1", registry)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_the_fleet_shows_the_mean_step_named_and_keeps_the_median(tmp_path: Path) -> None:
    shown = skewed_frame()
    (state,) = shown.attached
    statistic, step_ns = step_figure(state.summary)
    median_ns = state.summary.median_step_ns
    assert statistic == STEP_STATISTIC == MEAN_STEP_STATISTIC
    assert step_ns is not None and median_ns is not None and step_ns != median_ns
    with exporter(shown) as target, prometheus(tmp_path, [target], interval_s=1.0) as server:
        source = FleetSource(server.base)

        def read() -> FleetHostDetail | None:
            detail = source.sample(detail=target).detail
            ok = detail is not None and detail.trainers and detail.trainers[0].step_s
            return detail if ok else None

        detail = wait_until(read, 60, what="the trainer's step time in the fleet detail")
    (trainer,) = detail.trainers
    assert trainer.pid == str(PID)
    assert trainer.step_statistic == STEP_STATISTIC
    assert trainer.step_s == pytest.approx(step_ns / 1e9)
    assert trainer.median_step_s == pytest.approx(median_ns / 1e9)  # the median, as named
    line = "".join(text for text, _ in trainer_line(trainer, 200))
    assert f"step {STEP_STATISTIC} {fmt.duration_ns(step_ns)}" in line, line
    assert fmt.duration_ns(median_ns) not in line, line


def test_an_older_exporters_median_is_shown_as_the_median() -> None:
    old = FleetTrainer("42", median_step_s=0.012, step_s=0.012, step_statistic="median")
    line = "".join(text for text, _ in trainer_line(old, 200))
    assert "step median 12.0 ms" in line, line
    assert "step" not in "".join(text for text, _ in trainer_line(FleetTrainer("43"), 200))
