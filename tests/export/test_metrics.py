"""The Prometheus collector on hand-built frames: names, labels, units, counters that count
each step once, bounded cardinality, vanished trainers, and failures shown like a source's."""

from __future__ import annotations

from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from gputop.core.model import Advice, Frame
from gputop.export import metrics
from gputop.export.metrics import FrameCollector
from tests.helpers.builders import GIB, attached, frame, gpu, process, trainer_with_workers


def _samples(collector: FrameCollector) -> list[Sample]:
    """Every sample of one scrape, read back through the OpenMetrics parser."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_openmetrics(registry).decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def _find(samples: list[Sample], name: str, **labels: str) -> list[Sample]:
    return [s for s in samples if s.name == name and labels.items() <= s.labels.items()]


def _trainer_frame(pid: int = 100, data_ms: float = 60, workers: int = 2) -> Frame:
    rows, group = trainer_with_workers(pid, workers=workers, worker_cpu=50.0)
    rows[0] = replace(rows[0], gpu_memory_bytes=30 * GIB, gpu_indices=(0,), has_probe=True)
    state = attached(pid, data_ms=data_ms, compute_ms=40, num_workers=workers, batch_size=64,
                     pin_memory=True, rank=0, world_size=1)
    return frame(gpus=(gpu(util=35, pids=((pid, 30),)),), processes=rows, trainers=(group,),
                 attach=(state,))


def _collected(*frames: Frame, per_worker: bool = False) -> list[Sample]:
    collector = FrameCollector(per_worker=per_worker)
    for f in frames:
        collector.update(f)
    return _samples(collector)


def test_gpu_series_carry_dcgm_exporter_labels_in_base_units() -> None:
    samples = _collected(_trainer_frame())
    (util,) = _find(samples, "gputop_gpu_utilization_ratio")
    assert util.labels == {"Hostname": "testhost", "gpu": "0", "UUID": "GPU-0"}
    assert util.value == pytest.approx(0.35)
    (clock,) = _find(samples, "gputop_gpu_sm_clock_hertz")
    assert clock.value == 1980e6
    (model,) = _find(samples, "gputop_gpu_info")
    assert model.labels["model_name"] == "Test GPU"
    (joined,) = _find(samples, "gputop_trainer_gpu", trainer="100")
    assert joined.labels["UUID"] == "GPU-0"


def test_unknown_values_are_no_samples_not_zeros() -> None:
    f = _trainer_frame()
    f = replace(f, gpu=replace(f.gpu, gpus=(replace(f.gpu.gpus[0], power_w=None),)))
    samples = _collected(f)
    assert not _find(samples, "gputop_gpu_power_watts")
    assert _find(samples, "gputop_gpu_temperature_celsius")


def test_a_probed_trainer_has_steps_phases_ratio_verdict_and_config() -> None:
    samples = _collected(_trainer_frame(data_ms=60))
    assert _find(samples, "gputop_trainer_steps_total", trainer="100")[0].value == 50
    assert _find(samples, "gputop_trainer_step_seconds_count", trainer="100")[0].value == 50
    data = _find(samples, "gputop_trainer_phase_seconds_sum", trainer="100", phase="data")
    assert data[0].value == pytest.approx(50 * 0.060)
    h2d = _find(samples, "gputop_trainer_phase_seconds_count", trainer="100", phase="h2d")
    assert h2d[0].value == 0  # never measured: no time counted, not zero-second steps
    assert _find(samples, "gputop_trainer_data_wait_ratio")[0].value == pytest.approx(0.6)
    verdict = {s.labels["gputop_trainer_verdict"]: s.value
               for s in _find(samples, "gputop_trainer_verdict", trainer="100")}
    assert verdict == {"data-bound": 1, "compute-bound": 0, "unknown": 0}
    (config,) = _find(samples, "gputop_trainer_config_info", trainer="100")
    assert (config.labels["num_workers"], config.labels["pin_memory"],
            config.labels["batch_size"]) == ("2", "true", "64")
    (job,) = _find(samples, "gputop_trainer_job_info", trainer="100")
    assert (job.labels["rank"], job.labels["world_size"]) == ("0", "1")
    assert _find(samples, "gputop_trainer_workers", trainer="100")[0].value == 2


def test_a_rank_of_a_job_across_hosts_carries_its_rendezvous() -> None:
    f = _trainer_frame()
    config = replace(f.attached[0].config, extra=(("rendezvous", "job42@node1:29500"),))
    samples = _collected(replace(f, attached=(replace(f.attached[0], config=config),)))
    (job,) = _find(samples, "gputop_trainer_job_info", trainer="100")
    assert job.labels["rendezvous"] == "job42@node1:29500"
    (alone,) = _find(_collected(_trainer_frame()), "gputop_trainer_job_info", trainer="100")
    assert alone.labels["rendezvous"] == ""


def test_steps_seen_again_in_the_next_window_count_once() -> None:
    first = _trainer_frame()
    state = first.attached[0]
    more = tuple(replace(s, step=s.step + 10) for s in state.steps)  # 10 new, 40 seen again
    second = replace(first, attached=(replace(state, steps=more),))
    samples = _collected(first, first, second)
    assert _find(samples, "gputop_trainer_steps_total")[0].value == 60


def test_workers_cpu_seconds_keep_growing_when_a_worker_exits() -> None:
    first = _trainer_frame(workers=2)
    later_rows = [replace(r, cpu_time_s=15.0) if r.role == "worker" else r
                  for r in first.processes]
    gone = [r for r in later_rows if r.pid != 102]  # worker 102 exited after 15 s of CPU
    group = replace(first.trainers[0], worker_pids=(101,))
    last = replace(first, processes=tuple(gone), trainers=(group,))
    samples = _collected(first, replace(first, processes=tuple(later_rows)), last)
    (total,) = _find(samples, "gputop_trainer_workers_cpu_seconds_total", trainer="100")
    assert total.value == 30.0  # both workers' 15 s, the exited one's included


def test_per_worker_series_only_when_asked() -> None:
    f = _trainer_frame(workers=3)
    assert not [s for s in _collected(f) if s.name.startswith("gputop_worker_")]
    per_worker = _find(_collected(f, per_worker=True), "gputop_worker_threads", trainer="100")
    assert sorted(s.labels["worker"] for s in per_worker) == ["101", "102", "103"]


def test_a_trainer_that_left_takes_its_series_with_it() -> None:
    with_trainer = _trainer_frame()
    without = replace(with_trainer, processes=(process(1),), trainers=(), attached=())
    samples = _collected(with_trainer, without)
    assert not [s for s in samples if s.labels.get("trainer") == "100"]
    exited = replace(with_trainer, attached=(replace(with_trainer.attached[0], alive=False,
                                                     state="exited"),))
    assert not _find(_collected(with_trainer, exited), "gputop_trainer_steps_total")


def test_advice_is_labelled_with_id_severity_and_trainer() -> None:
    f = replace(_trainer_frame(), advice=(
        Advice("num-workers-zero", "critical", "t", "e", "a", trainer_pid=100),
        Advice("swap", "warn", "t", "e", "a")))
    active = {(s.labels["id"], s.labels["severity"], s.labels["trainer"])
              for s in _find(_collected(f), "gputop_advice_active")}
    assert active == {("num-workers-zero", "critical", "100"), ("swap", "warn", "")}


def test_a_failing_section_is_counted_like_a_failing_source(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(view: metrics.View) -> list[metrics.Metric]:
        raise RuntimeError("boom")

    monkeypatch.setattr(metrics, "SECTIONS", (*metrics.SECTIONS[:1], broken,
                                              *metrics.SECTIONS[1:]))
    samples = _collected(_trainer_frame())
    (errors,) = _find(samples, "gputop_source_errors", source="exporter")
    assert errors.value == 1
    (why,) = _find(samples, "gputop_source_error_info", source="exporter")
    assert "RuntimeError: boom" in why.labels["message"]
    assert _find(samples, "gputop_gpu_utilization_ratio")  # the rest still renders


def test_a_source_error_in_the_frame_is_exported() -> None:
    from gputop.core.model import SourceError

    f = replace(_trainer_frame(), errors=(SourceError("gpu", "NVMLError: lost", 3, 4.0),))
    samples = _collected(f)
    assert _find(samples, "gputop_source_errors", source="gpu")[0].value == 3
    assert _find(samples, "gputop_source_errors", source="host")[0].value == 0
    (why,) = _find(samples, "gputop_source_error_info", source="gpu")
    assert why.labels["message"] == "NVMLError: lost"


def test_before_the_first_frame_a_scrape_is_valid_and_small() -> None:
    samples = _samples(FrameCollector())
    assert {s.name for s in samples} == {"gputop_source_errors"}


def test_text_format_escapes_label_values() -> None:
    rows, group = trainer_with_workers(100, workers=1, worker_cpu=1.0)
    rows[0] = replace(rows[0], name='a"b\\c\nd')  # printable() would escape \n; quotes stay
    registry = CollectorRegistry(auto_describe=False)
    collector = FrameCollector()
    registry.register(collector)
    collector.update(frame(processes=rows, trainers=(group,)))
    text = generate_latest(registry).decode()
    assert 'name="a\\"b\\\\c\\nd"' in text
