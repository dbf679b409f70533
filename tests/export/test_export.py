"""The --once text and JSON exports on hand-built frames: units, n/a, advice, no NaN."""

from __future__ import annotations

import json
from dataclasses import replace

from gputop.core import fmt
from gputop.core.model import Advice
from gputop.export.snapshot import dumps
from gputop.export.text import render
from tests.helpers.builders import GIB, attached, frame, gpu, trainer_with_workers


def test_units_and_not_available() -> None:
    assert fmt.size(1536) == "1.5 KiB" and fmt.size(512) == "512 B" and fmt.size(None) == "n/a"
    assert fmt.rate(2.5e9) == "2.5 GB/s" and fmt.rate(None) == "n/a"
    assert fmt.duration_ns(1_500_000) == "1.5 ms" and fmt.duration_ns(None) == "n/a"
    assert fmt.cpu_time(3725.5) == "1:02:05" and fmt.cpu_time(65.25) == "1:05.25"
    assert fmt.uptime(93784) == "1d 2h03m"
    assert fmt.scaled(3 * GIB, 1024, ("B", "K", "M", "G"), 1024) == (3.0, "G")


def test_text_shows_trainers_attach_and_advice() -> None:
    rows, group = trainer_with_workers(100, workers=2, worker_cpu=90.0)
    f = frame(gpus=(gpu(util=3, used_gib=70, pids=((100, 70),)),), processes=rows,
              trainers=(group,), attach=(attached(100, data_ms=60, compute_ms=40, num_workers=2),))
    f = replace(f, advice=(Advice("num-workers-zero", "critical", "Batches load in the trainer",
                                  "input is 60%", "Try num_workers=4"),))
    text = render(f)
    assert "SIMULATED GPUs" in text and "Test GPU" in text
    assert "worker PIDs: 101 102" in text and "workers %CPU 180" in text
    assert ("ATTACHED 100: verdict data-bound over the last 50 steps, input-bound 60.0% of "
            "step time (high)") in text
    assert "[critical] Batches load in the trainer" in text and "try: Try num_workers=4" in text


def test_text_without_gpus_says_cpu_only_and_na() -> None:
    f = frame()
    f = replace(f, gpu=replace(f.gpu, gpus=(replace(gpu(), temperature_c=None, power_w=None),),
                               source="nvml"))
    text = render(frame())
    assert "CPU-only mode — no NVIDIA driver" in text
    assert " n/a " in render(f)


def test_json_turns_nan_into_null() -> None:
    f = frame(gpus=(replace(gpu(), util_percent=float("nan"), power_w=float("inf")),))
    doc = json.loads(dumps(f))
    assert doc["gpus"][0]["util_percent"] is None and doc["gpus"][0]["power_w"] is None
    assert doc["schema"] == "gputop.snapshot/1" and doc["simulated"] is True
