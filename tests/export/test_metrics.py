"""The Prometheus collector on hand-built frames: names, labels, units, counters that count
each step once, bounded cardinality, vanished trainers, and failures shown like a source's."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from typing import Any

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


def _trainer(samples: list[Sample], pid: int = 100) -> str:
    """The `trainer` label of PID `pid`, as its gputop_trainer_info says."""
    (info,) = _find(samples, "gputop_trainer_info", pid=str(pid))
    return info.labels["trainer"]


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
    t = _trainer(samples)
    (util,) = _find(samples, "gputop_gpu_utilization_ratio")
    assert util.labels == {"Hostname": "testhost", "gpu": "0", "UUID": "GPU-0"}
    assert util.value == pytest.approx(0.35)
    (clock,) = _find(samples, "gputop_gpu_sm_clock_hertz")
    assert clock.value == 1980e6
    (model,) = _find(samples, "gputop_gpu_info")
    assert model.labels["model_name"] == "Test GPU"
    (joined,) = _find(samples, "gputop_trainer_gpu", trainer=t)
    assert joined.labels["UUID"] == "GPU-0"


def test_unknown_values_are_no_samples_not_zeros() -> None:
    f = _trainer_frame()
    f = replace(f, gpu=replace(f.gpu, gpus=(replace(f.gpu.gpus[0], power_w=None),)))
    samples = _collected(f)
    assert not _find(samples, "gputop_gpu_power_watts")
    assert _find(samples, "gputop_gpu_temperature_celsius")


def test_a_probed_trainer_has_steps_phases_ratio_verdict_and_config() -> None:
    samples = _collected(_trainer_frame(data_ms=60))
    t = _trainer(samples)
    assert _find(samples, "gputop_trainer_steps_total", trainer=t)[0].value == 50
    assert _find(samples, "gputop_trainer_step_seconds_count", trainer=t)[0].value == 50
    data = _find(samples, "gputop_trainer_phase_seconds_sum", trainer=t, phase="data")
    assert data[0].value == pytest.approx(50 * 0.060)
    h2d = _find(samples, "gputop_trainer_phase_seconds_count", trainer=t, phase="h2d")
    assert h2d[0].value == 0  # never measured: no time counted, not zero-second steps
    assert _find(samples, "gputop_trainer_data_wait_ratio")[0].value == pytest.approx(0.6)
    verdict = {s.labels["verdict"]: s.value
               for s in _find(samples, "gputop_trainer_verdict", trainer=t)}
    assert verdict == {"data-bound": 1, "compute-bound": 0, "host-bound": 0, "cpu-starved": 0,
                       "unknown": 0}
    (config,) = _find(samples, "gputop_trainer_config_info", trainer=t)
    assert (config.labels["num_workers"], config.labels["pin_memory"],
            config.labels["batch_size"]) == ("2", "true", "64")
    (job,) = _find(samples, "gputop_trainer_job_info", trainer=t)
    assert (job.labels["rank"], job.labels["world_size"]) == ("0", "1")
    assert _find(samples, "gputop_trainer_workers", trainer=t)[0].value == 2


def test_a_rank_of_a_job_across_hosts_carries_its_rendezvous() -> None:
    f = _trainer_frame()
    config = replace(f.attached[0].config, extra=(("rendezvous", "job42@node1:29500"),))
    samples = _collected(replace(f, attached=(replace(f.attached[0], config=config),)))
    t = _trainer(samples)
    (job,) = _find(samples, "gputop_trainer_job_info", trainer=t)
    assert job.labels["rendezvous"] == "job42@node1:29500"
    samples = _collected(_trainer_frame())
    t = _trainer(samples)
    (alone,) = _find(samples, "gputop_trainer_job_info", trainer=t)
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
    t = _trainer(samples)
    (total,) = _find(samples, "gputop_trainer_workers_cpu_seconds_total", trainer=t)
    assert total.value == 30.0  # both workers' 15 s, the exited one's included


def test_per_worker_series_only_when_asked() -> None:
    f = _trainer_frame(workers=3)
    assert not [s for s in _collected(f) if s.name.startswith("gputop_worker_")]
    samples = _collected(f, per_worker=True)
    t = _trainer(samples)
    per_worker = _find(samples, "gputop_worker_threads", trainer=t)
    assert sorted(s.labels["worker"] for s in per_worker) == ["101", "102", "103"]


def test_a_trainer_that_left_takes_its_series_with_it() -> None:
    with_trainer = _trainer_frame()
    without = replace(with_trainer, processes=(process(1),), trainers=(), attached=())
    t = _trainer(_collected(with_trainer))
    samples = _collected(with_trainer, without)
    assert not [s for s in samples if s.labels.get("trainer") == t]
    exited = replace(with_trainer, attached=(replace(with_trainer.attached[0], alive=False,
                                                     state="exited"),))
    assert not _find(_collected(with_trainer, exited), "gputop_trainer_steps_total")


def test_advice_is_labelled_with_id_severity_and_trainer() -> None:
    f = replace(_trainer_frame(), advice=(
        Advice("num-workers-zero", "critical", "t", "e", "a", trainer_pid=100),
        Advice("swap", "warn", "t", "e", "a")))
    samples = _collected(f)
    t = _trainer(samples)
    active = {(s.labels["id"], s.labels["severity"], s.labels["trainer"])
              for s in _find(samples, "gputop_advice_active")}
    assert active == {("num-workers-zero", "critical", t), ("swap", "warn", "")}


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


def _restarted(f: Frame, pid: int, **row: Any) -> Frame:
    """Frame `f` with its trainer (and everything naming it) under PID `pid`."""
    (state,) = f.attached
    rows = [replace(r, pid=pid, start_ticks=pid, **row) if r.role == "trainer"
            else replace(r, trainer_pid=pid) for r in f.processes]
    return replace(f, processes=tuple(rows), trainers=(replace(f.trainers[0], pid=pid),),
                   attached=(replace(state, pid=pid),))


def test_a_restarted_trainer_keeps_its_trainer_label_and_its_pid_moves_to_info() -> None:
    first = _collected(_trainer_frame(pid=100))
    again = _collected(_restarted(_trainer_frame(pid=100), 900))
    assert _trainer(first, 100) == _trainer(again, 900)
    assert not [s for s in first + again if s.labels.get("trainer") in ("100", "900")]
    (info,) = _find(again, "gputop_trainer_info", pid="900")
    assert info.labels["command"] == "python train.py"


def test_trainers_with_other_commands_or_ranks_have_other_labels() -> None:
    base = _trainer_frame(pid=100)
    other = _restarted(base, 100, cmdline=("python", "finetune.py"))
    assert _trainer(_collected(base)) != _trainer(_collected(other))
    ranks = [replace(base, attached=(replace(base.attached[0], config=replace(
        base.attached[0].config, rank=rank, world_size=2)),)) for rank in (0, 1)]
    assert _trainer(_collected(ranks[0])) != _trainer(_collected(ranks[1]))


def test_the_label_hashes_the_masked_command_which_info_shows_masked() -> None:
    secret = _restarted(_trainer_frame(), 100, cmdline=("python", "train.py", "--token", "s1"))
    other = _restarted(_trainer_frame(), 100, cmdline=("python", "train.py", "--token", "s2"))
    samples = _collected(secret)
    assert _trainer(samples) == _trainer(_collected(other))
    (info,) = _find(samples, "gputop_trainer_info")
    assert info.labels["command"] == "python train.py --token ***"


def test_two_live_trainers_with_one_command_get_two_labels_the_older_keeps_its_own() -> None:
    alone = _collected(_trainer_frame(pid=100))
    rows, group = trainer_with_workers(200, workers=1, worker_cpu=1.0)
    f = _trainer_frame(pid=100)
    both = replace(f, processes=(*f.processes, *rows), trainers=(*f.trainers, group))
    samples = _collected(both)
    assert _trainer(samples, 100) == _trainer(alone, 100)
    assert _trainer(samples, 200) != _trainer(samples, 100)
    labels = [tuple(sorted(s.labels.items())) for s in samples
              if s.name == "gputop_trainer_threads"]
    assert len(labels) == len(set(labels)) == 2


def test_verdict_state_and_band_are_enums_with_one_series_per_value() -> None:
    from typing import get_args

    from gputop.core.model import Band, TrainerState, Verdict

    f = _trainer_frame(data_ms=60)
    samples = _collected(replace(f, attached=(replace(f.attached[0], state="saving"),)))
    t = _trainer(samples)
    for name, label, values, current in (
            ("gputop_trainer_verdict", "verdict", get_args(Verdict), "data-bound"),
            ("gputop_trainer_state", "state", get_args(TrainerState), "saving"),
            ("gputop_trainer_input_band", "band", get_args(Band), "highly")):
        series = {s.labels[label]: s.value for s in _find(samples, name, trainer=t)}
        assert series == {v: int(v == current) for v in values}, name
        assert not [s for s in samples if name in s.labels]  # no stateset label named after it


def test_the_step_time_is_the_mean_the_screen_shows() -> None:
    f = _trainer_frame()
    state = f.attached[0]
    summary = replace(state.summary, mean_step_ns=123_000_000, median_step_ns=100_000_000)
    samples = _collected(replace(f, attached=(replace(state, summary=summary),)))
    (mean,) = _find(samples, "gputop_trainer_mean_step_seconds")
    assert mean.value == pytest.approx(0.123)
    (median,) = _find(samples, "gputop_trainer_median_step_seconds")
    assert median.value == pytest.approx(0.100)


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool is not installed (.ci/run installs Debian's prometheus "
                    "package)")
def test_promtool_lints_every_family_clean() -> None:
    from gputop.core.model import MemoryBandwidthSample

    f = replace(_trainer_frame(), advice=(Advice("swap", "warn", "t", "e", "a", trainer_pid=100),),
                memory_bandwidth=MemoryBandwidthSample(source="estimate", confidence="low",
                                                       pressure=0.5))
    registry = CollectorRegistry(auto_describe=False)
    collector = FrameCollector(per_worker=True)
    registry.register(collector)
    collector.update(f)
    text = generate_latest(registry).decode()
    assert "gputop_worker_threads{" in text and "gputop_advice_active{" in text
    checked = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                             capture_output=True, timeout=60)
    assert (checked.returncode, checked.stdout + checked.stderr) == (0, "")
