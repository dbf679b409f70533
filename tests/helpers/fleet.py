"""A simulated fleet backfilled into a real Prometheus: each host's series are what gputop's own
exporter renders (FrameCollector, OpenMetrics) for a hand-built Frame, stamped over a time
range and written as one OpenMetrics file that `promtool tsdb create-blocks-from openmetrics`
turns into TSDB blocks.

Host i (node-000 ... ) has two GPUs and one probed trainer, rank i % 8 of an 8-host job named
by its rendezvous. Some hosts are made to want a look, by index: see `Shape`.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from gputop.core.model import Advice, Frame, MemoryBandwidthSample
from gputop.export.metrics import FrameCollector
from tests.helpers.builders import attached, frame, gpu, trainer_with_workers

PORT = 19400
JOB_HOSTS = 8
STEP_S = 15
PAST_S, FUTURE_S = 20 * 60, 10 * 60  # instant queries at "now" find a point within STEP_S
DOWN_FOR_S = 6 * 60  # longer than Prometheus's 5-minute lookback: a down host's series are stale
KEPT = {  # the families the fleet reads (histograms and summaries would only add bulk)
    "gputop_exporter", "gputop_gpu", "gputop_gpu_utilization_ratio",
    "gputop_gpu_memory_used_bytes", "gputop_gpu_memory_total_bytes", "gputop_trainer",
    "gputop_trainer_workers", "gputop_trainer_gpu_memory_bytes",
    "gputop_trainer_data_wait_ratio", "gputop_trainer_median_step_seconds",
    "gputop_trainer_samples_per_second", "gputop_trainer_verdict", "gputop_trainer_state",
    "gputop_trainer_job", "gputop_host_memory_bandwidth_pressure_ratio", "gputop_advice_active",
}


@dataclass(frozen=True)
class Shape:
    """What host `index` of the simulated fleet looks like."""

    index: int

    @property
    def name(self) -> str:
        """Its hostname."""
        return f"node-{self.index:03d}"

    @property
    def instance(self) -> str:
        """Its target, as Prometheus labels it."""
        return f"{self.name}:{PORT}"

    @property
    def down(self) -> bool:
        """Its exporter stopped answering DOWN_FOR_S ago."""
        return self.index % 100 == 42

    @property
    def straggler_job(self) -> bool:
        """Every fifth job has one rank that waits for input far longer than the others."""
        return (self.index // JOB_HOSTS) % 5 == 0

    @property
    def straggler(self) -> bool:
        """Rank 3 of a straggler job waits for input (43 % of its steps, the others 11 %)."""
        return self.straggler_job and self.index % JOB_HOSTS == 3

    @property
    def data_bound(self) -> bool:
        """Its trainer waits for data more than it computes (75 % of its steps), which also
        makes it an input straggler among its job's ranks."""
        return self.index % 7 == 3 and not self.straggler_job

    @property
    def idle_gpu_held(self) -> bool:
        """Its GPU 1 idles with memory held."""
        return self.index % 11 == 5

    @property
    def pressured(self) -> bool:
        """Its host memory bandwidth is under pressure."""
        return self.index % 13 == 7

    @property
    def rendezvous(self) -> str:
        """Its job across hosts."""
        job = self.index // JOB_HOSTS
        return f"job{job}@node-{job * JOB_HOSTS:03d}:29500"


def host_frame(shape: Shape) -> Frame:
    """The Frame host `shape` would sample."""
    pid = 4000 + shape.index
    rows, group = trainer_with_workers(pid, workers=4, worker_cpu=60.0)
    rows[0] = replace(rows[0], gpu_memory_bytes=30 * 2**30, gpu_indices=(0,), has_probe=True)
    data_ms = 120.0 if shape.data_bound else 60.0 if shape.straggler else 10.0
    state = attached(pid, data_ms=data_ms, compute_ms=40 if shape.data_bound else 80,
                     num_workers=4, batch_size=64, rank=shape.index % JOB_HOSTS,
                     world_size=JOB_HOSTS)
    state = replace(state, config=replace(state.config,
                                          extra=(("rendezvous", shape.rendezvous),)))
    gpus = (gpu(0, util=35 if shape.data_bound else 90, pids=((pid, 30),)),
            gpu(1, util=0 if shape.idle_gpu_held else 88, used_gib=20 if shape.idle_gpu_held
                else 40))
    membw = MemoryBandwidthSample(source="estimate", confidence="low",
                                  pressure=0.8 if shape.pressured else 0.2)
    f = frame(gpus=gpus, processes=rows, trainers=(group,), attach=(state,), membw=membw)
    advice = (Advice("loader-workers", "warn", "data-bound", "evidence", "action",
                     trainer_pid=pid),) if shape.data_bound else ()
    return replace(f, host=replace(f.host, hostname=shape.name), advice=advice)


def host_series(shape: Shape) -> Iterator[tuple[str, str, str]]:
    """(family, OpenMetrics type, sample line without value) for each series gputop serve
    renders for host `shape`, with the target labels Prometheus adds on scraping it."""
    collector = FrameCollector()
    collector.update(host_frame(shape))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    for family in text_string_to_metric_families(text):
        if family.name not in KEPT:
            continue
        for sample in family.samples:
            labels = {**sample.labels, "instance": shape.instance, "job": "gputop"}
            yield family.name, family.type, f"{sample.name}{{{_labels(labels)}}} {sample.value}"


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def openmetrics(hosts: int, now: float) -> Iterator[str]:
    """The fleet's series from PAST_S before `now` to FUTURE_S after it, every STEP_S, as
    OpenMetrics text (each family once, each series' points in time order), and `up`."""
    start = int(now) - PAST_S
    stamps = range(start, int(now) + FUTURE_S + 1, STEP_S)
    families: dict[str, tuple[str, list[tuple[Shape, str]]]] = {}
    for shape in map(Shape, range(hosts)):
        for name, kind, line in host_series(shape):
            families.setdefault(name, (kind, []))[1].append((shape, line))
    for name, (kind, series) in families.items():
        yield f"# TYPE {name} {kind}\n"
        for shape, line in series:
            until = now - DOWN_FOR_S if shape.down else float("inf")
            yield "".join(f"{line} {t}\n" for t in stamps if t <= until)
    yield "# TYPE up gauge\n"
    for shape in map(Shape, range(hosts)):
        up = f'up{{instance="{shape.instance}",job="gputop"}}'
        yield "".join(f"{up} {0 if shape.down and t > now - DOWN_FOR_S else 1} {t}\n"
                      for t in stamps)
    yield "# EOF\n"


def backfill(data_dir: Path, hosts: int, workdir: Path) -> float:
    """Write `hosts` simulated hosts into TSDB blocks under `data_dir`; the time they end
    around (now), which instant queries must be asked near."""
    promtool = shutil.which("promtool")
    assert promtool is not None
    now = time.time()
    source = workdir / "fleet.om"
    with source.open("w") as out:
        out.writelines(openmetrics(hosts, now))
    done = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(source),
                           str(data_dir)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    source.unlink()
    return now
