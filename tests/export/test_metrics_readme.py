"""The metrics reference (docs/prometheus.md, linked from the README) lists exactly the
metrics `gputop serve` exposes, with their types, so the reference cannot drift from the
code."""

from __future__ import annotations

import re
from dataclasses import replace

from gputop.core.model import Advice, MemoryBandwidthSample
from gputop.export.metrics import FrameCollector
from tests.helpers.builders import attached, frame, gpu, trainer_with_workers
from tests.helpers.probe import ROOT

ROW = re.compile(r"^\| `(gputop_[a-z0-9_]+)` \| (\w+) \|", re.MULTILINE)
SUFFIX = {"counter": "_total", "info": "_info"}


def _documented() -> dict[str, str]:
    return dict(ROW.findall((ROOT / "docs" / "prometheus.md").read_text()))


def _exposed() -> dict[str, str]:
    rows, group = trainer_with_workers(100, workers=2, worker_cpu=50.0)
    f = frame(gpus=(gpu(),), processes=rows, trainers=(group,),
              attach=(attached(100, data_ms=60, compute_ms=40),),
              membw=MemoryBandwidthSample(source="estimate", confidence="low", pressure=0.5))
    f = replace(f, advice=(Advice("swap", "warn", "t", "e", "a"),))
    collector = FrameCollector(per_worker=True)
    collector.update(f)
    return {family.name + SUFFIX.get(family.type, ""): family.type
            for family in collector.collect()}


def test_the_readme_table_lists_every_exposed_metric_with_its_type() -> None:
    documented, exposed = _documented(), _exposed()
    assert sorted(exposed.keys() - documented.keys()) == [], "exposed but not in docs/prometheus.md"
    assert sorted(documented.keys() - exposed.keys()) == [], "in docs/prometheus.md but not exposed"
    assert {n: t for n, t in documented.items() if exposed[n] != t} == {}
