"""One fleet host in detail (its GPUs, trainers and advice), from one PromQL selector over
its exporter's series; and the PromQL that names input stragglers across hosts.

Series name a trainer by its `trainer` label, a hash stable across restarts;
`gputop_trainer_info` gives its PID (`pid`), which the detail shows. An older exporter's
`trainer` label is the PID itself, and its enums label the value with the metric's name.

A rank straggles across hosts when its job (the `rendezvous` label: torchrun's run id and
MASTER_ADDR:MASTER_PORT, shared by every rank of the job whatever its host) has another
rank, and its data-wait ratio is more than twice the mean of the other ranks' and at least
10 %: the same bar as one host's exporter sets for its ranks, over window ratios.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gputop.core.model import FleetAdvice, FleetGpu, FleetHostDetail, FleetTrainer
from gputop.core.printable import printable

Query = Callable[[str], list[dict[str, Any]]]
Labels = dict[str, str]

STRAGGLER_FACTOR = 2.0
STRAGGLER_MIN_RATIO = 0.10
_RANKS = ("(gputop_trainer_data_wait_ratio * on (instance, trainer) group_left (rendezvous) "
          'gputop_trainer_job_info{rendezvous!=""})')
_OTHERS_MEAN = (f"((sum by (rendezvous) {_RANKS} - on (rendezvous) group_right () {_RANKS}) "
                f"/ on (rendezvous) group_left () (count by (rendezvous) {_RANKS} - 1 > 0))")
STRAGGLERS_ACROSS_HOSTS = (f"{_RANKS} > {STRAGGLER_FACTOR} * {_OTHERS_MEAN} "
                           f"and {_RANKS} >= {STRAGGLER_MIN_RATIO}")
_DETAIL = '{{__name__=~"gputop_(gpu|trainer)_.+|gputop_advice_active", instance={instance}}}'
_TRAINER_VALUES = {  # FleetTrainer field -> its gauge
    "workers": "gputop_trainer_workers", "data_wait_ratio": "gputop_trainer_data_wait_ratio",
    "median_step_s": "gputop_trainer_median_step_seconds",
    "mean_step_s": "gputop_trainer_mean_step_seconds",
    "samples_per_s": "gputop_trainer_samples_per_second",
    "gpu_memory_bytes": "gputop_trainer_gpu_memory_bytes",
}
MEAN_STEP_STATISTIC = "mean"  # gputop_trainer_mean_step_seconds: analysis.steps.STEP_STATISTIC
_GPU_VALUES = {"util_ratio": "gputop_gpu_utilization_ratio",
               "memory_used_bytes": "gputop_gpu_memory_used_bytes",
               "memory_total_bytes": "gputop_gpu_memory_total_bytes"}


def promql_string(text: str) -> str:
    """`text` as a PromQL string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def host_detail(query: Query, instance: str) -> FleetHostDetail:
    """Host `instance`'s GPUs, trainers (stragglers marked) and active advice."""
    series = [_parsed(s) for s in query(_DETAIL.format(instance=promql_string(instance)))]
    rows = [s for s in series if s is not None]
    across = {labels.get("trainer", "") for labels, _ in
              (p for p in map(_parsed, query(STRAGGLERS_ACROSS_HOSTS)) if p is not None)
              if labels.get("instance") == instance}
    pids = {labels["trainer"]: labels["pid"] for labels, _ in rows
            if labels["__name__"] == "gputop_trainer_info" and labels.get("pid")
            and "trainer" in labels}
    return FleetHostDetail(
        instance=printable(instance), gpus=_gpus(rows), trainers=_trainers(rows, across, pids),
        advice=tuple(sorted(
            (FleetAdvice(printable(labels.get("id", "")), printable(labels.get("severity", "")),
                         printable(_pid(pids, labels.get("trainer", ""))))
             for labels, value in rows
             if labels["__name__"] == "gputop_advice_active" and value == 1),
            key=lambda a: (a.severity != "critical", a.severity != "warn", a.id, a.trainer))),
    )


def _parsed(series: dict[str, Any]) -> tuple[Labels, float | None] | None:
    """A result series as its labels and value (None for NaN or an infinity); None when
    malformed."""
    try:
        labels = {str(k): str(v) for k, v in series["metric"].items()}
        value = float(series["value"][1])
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return None
    labels.setdefault("__name__", "")
    return labels, value if math.isfinite(value) else None


def _gpus(rows: list[tuple[Labels, float | None]]) -> tuple[FleetGpu, ...]:
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for labels, value in rows:
        name = labels["__name__"]
        if not name.startswith("gputop_gpu_") or "gpu" not in labels:
            continue
        fields = found.setdefault((labels["gpu"], labels.get("UUID", "")), {})
        if name == "gputop_gpu_info":
            fields["name"] = printable(labels.get("model_name", ""))
        for field, metric in _GPU_VALUES.items():
            if name == metric:
                fields[field] = value
    return tuple(FleetGpu(printable(index), printable(uuid), **fields)
                 for (index, uuid), fields in sorted(found.items(), key=_gpu_order))


def _gpu_order(item: tuple[tuple[str, str], object]) -> tuple[int, str]:
    index = item[0][0]
    return (int(index) if index.isdigit() else 1 << 30, index)


def _pid(pids: dict[str, str], trainer: str) -> str:
    """The PID of the trainer labelled `trainer` (an older exporter's label is the PID)."""
    return pids.get(trainer, trainer)


def _trainers(rows: list[tuple[Labels, float | None]], across: set[str],
              pids: dict[str, str]) -> tuple[FleetTrainer, ...]:
    found: dict[str, dict[str, Any]] = {}
    for labels, value in rows:
        name, trainer = labels["__name__"], labels.get("trainer")
        if trainer is None or not name.startswith("gputop_trainer_"):
            continue
        fields = found.setdefault(trainer, {})
        _trainer_field(fields, name, labels, value)
    for trainer in across & found.keys():
        found[trainer]["straggler"] = True
    for fields in found.values():
        _step_figure(fields)
    shown = {_pid(pids, trainer): fields for trainer, fields in found.items()}
    return tuple(FleetTrainer(printable(pid), **fields) for pid, fields in
                 sorted(shown.items(), key=lambda item: _trainer_order(item[0], item[1])))


def _step_figure(fields: dict[str, Any]) -> None:
    """The step time the screens show, with its statistic: the exporter's mean; from an
    exporter too old to publish it, its median, named so."""
    mean = fields.pop("mean_step_s", None)
    if mean is not None:
        fields.update(step_s=mean, step_statistic=MEAN_STEP_STATISTIC)
    elif fields.get("median_step_s") is not None:
        fields.update(step_s=fields["median_step_s"], step_statistic="median")


def _trainer_field(fields: dict[str, Any], name: str, labels: Labels,
                   value: float | None) -> None:
    """Take what series `name` says about its trainer into `fields`."""
    if name == "gputop_trainer_info":
        fields.update(name=printable(labels.get("name", "")),
                      user=printable(labels.get("user", "")), probed=labels.get("probe") == "true")
    elif name == "gputop_trainer_job_info":
        fields.update(rank=printable(labels.get("rank", "")),
                      world_size=printable(labels.get("world_size", "")),
                      rendezvous=printable(labels.get("rendezvous", "")))
    elif name in ("gputop_trainer_verdict", "gputop_trainer_state") and value == 1:
        field = name.removeprefix("gputop_trainer_")
        fields[field] = printable(labels.get(field) or labels.get(name, ""))
    elif name == "gputop_trainer_input_straggler" and value == 1:
        fields["straggler"] = True
    for field, metric in _TRAINER_VALUES.items():
        if name == metric:
            fields[field] = int(value) if field == "workers" and value is not None else value


def _trainer_order(pid: str, fields: dict[str, Any]) -> tuple[bool, bool, float, str]:
    """Stragglers, then data-bound trainers, then the longest data wait first."""
    return (not fields.get("straggler", False), fields.get("verdict") != "data-bound",
            -(fields.get("data_wait_ratio") or 0.0), pid)
