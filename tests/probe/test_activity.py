"""The probe names evaluation and torch.save in the metadata, at their changes only, and the
reader turns them into states: evaluating while it computes, stalled when it hangs, saving."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import replace
from time import perf_counter_ns
from typing import Any

import pytest

from gputop.analysis.steps import STALL_MIN_S, trainer_state
from gputop.core.model import Activity
from gputop.export.snapshot import dumps
from gputop.export.text import render
from gputop.probe import torch as probe_torch
from gputop.probe.activity import META_ACTIVITY, META_SINCE
from gputop.probe.steps import Recorder
from gputop.sources.attach import activity_of, config_from_meta
from gputop.tui.views.steps import step_lines
from tests.helpers.builders import attached, frame

torch = pytest.importorskip("torch")
S = 1_000_000_000


@pytest.fixture
def model(rec: Recorder) -> Iterator[Any]:
    """A model whose forwards the probe's activity watch sees, as the stepped model's."""
    undo = len(probe_torch._undo)
    forward = probe_torch._ModelForward(rec)
    probe_torch._patch_backward(rec, torch, probe_torch._watch_activity(rec, torch, forward))
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8))
    handles = [net.register_forward_pre_hook(forward.pre), forward._post_hook(net)]
    try:
        yield net
    finally:
        for handle in handles:
            handle.remove()
        while len(probe_torch._undo) > undo:
            probe_torch._undo.pop()()


def _train(net: Any, steps: int = 3) -> None:
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    for _ in range(steps):
        net(torch.randn(16, 4)).sum().backward()
        opt.step()


def _activity(rec: Recorder) -> tuple[object, object]:
    return rec.facts.get(META_ACTIVITY), rec.facts.get(META_SINCE)


def test_forwards_that_do_not_train_begin_an_evaluation_dated_from_the_first(
        rec: Recorder, model: Any) -> None:
    _train(model)
    assert _activity(rec) == (None, None)
    model.eval()
    with torch.no_grad():
        before = perf_counter_ns()
        model(torch.randn(16, 4))
        after = perf_counter_ns()
        assert _activity(rec) == (None, None)  # one such forward is a step's, not evaluation
        model(torch.randn(16, 4))
        state, since = _activity(rec)
        assert state == "evaluating" and isinstance(since, int) and before <= since <= after
        for _ in range(5):
            model(torch.randn(16, 4))
        assert _activity(rec) == ("evaluating", since)  # not rewritten per forward
    model.train()
    model(torch.randn(16, 4))
    assert _activity(rec) == (None, None)


def test_inference_mode_alone_is_evaluation_and_a_backward_ends_it(
        rec: Recorder, model: Any) -> None:
    _train(model)
    with torch.inference_mode():
        model(torch.randn(16, 4))
        model(torch.randn(16, 4))
    assert _activity(rec)[0] == "evaluating"
    _train(model, 1)
    assert _activity(rec) == (None, None)


def test_training_in_eval_mode_or_a_target_forward_is_never_evaluation(
        rec: Recorder, model: Any) -> None:
    """Frozen BatchNorm with gradient accumulation; a no_grad forward of the same model
    beside each training forward (a target network's)."""
    model.eval()
    seen = []
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(4):
        for _ in range(3):
            model(torch.randn(16, 4)).sum().backward()
            seen.append(_activity(rec)[0])
        opt.step()
    model.train()
    for _ in range(4):
        with torch.no_grad():
            model(torch.randn(16, 4))
        seen.append(_activity(rec)[0])
        model(torch.randn(16, 4)).sum().backward()
        opt.step()
    assert seen == [None] * len(seen)


class _Watched(io.BytesIO):
    """A file that notes the activity the metadata says while it is written."""

    def __init__(self, rec: Recorder) -> None:
        super().__init__()
        self.rec = rec
        self.seen: set[object] = set()

    def write(self, data: Any) -> int:
        self.seen.add(self.rec.facts.get(META_ACTIVITY))
        return super().write(data)


def test_torch_save_is_saving_while_it_writes_then_what_was_before(
        rec: Recorder, model: Any) -> None:
    _train(model)
    sink = _Watched(rec)
    torch.save(model.state_dict(), sink)
    assert sink.seen == {"saving"} and _activity(rec) == (None, None)
    model.eval()
    with torch.no_grad():
        model(torch.randn(16, 4))
        model(torch.randn(16, 4))
    evaluating = _activity(rec)
    torch.save(model.state_dict(), _Watched(rec))
    assert _activity(rec) == evaluating


@pytest.mark.parametrize("meta", [
    {}, {META_ACTIVITY: None, META_SINCE: None}, {META_ACTIVITY: "evaluating"},
    {META_ACTIVITY: "evaluating", META_SINCE: "12"},
    {META_ACTIVITY: "evaluating", META_SINCE: True},
    {META_ACTIVITY: "sleeping", META_SINCE: 12}, {META_ACTIVITY: ["saving"], META_SINCE: 12},
])
def test_metadata_without_a_known_activity_reads_as_training(meta: dict[str, object]) -> None:
    assert activity_of(meta, 10 * S) is None


def test_the_activity_is_read_with_its_age_and_is_no_setting() -> None:
    meta: dict[str, object] = {META_ACTIVITY: "saving", META_SINCE: 4 * S, "num_workers": 2}
    assert activity_of(meta, 10 * S) == ("saving", 6.0)
    assert activity_of(meta, 3 * S) == ("saving", 0.0)  # a clock read before the probe's
    config = config_from_meta(meta)
    assert config.num_workers == 2 and config.extra == ()


def test_an_evaluation_is_a_state_until_it_hangs_and_saving_until_it_ends() -> None:
    now = 1000 * S
    base = attached(7, data_ms=20, compute_ms=20, num_workers=0)
    last = replace(base.steps[-1], end_ns=now - 40 * S)
    quiet = replace(base, steps=(*base.steps[:-1], last))
    evaluating = replace(quiet, activity="evaluating", activity_s=40.0)
    assert trainer_state(evaluating, now, busy_ns=now - S) == ("evaluating", 40.0)
    assert trainer_state(evaluating, now) == ("stalled", 40.0)  # no CPU seen: it hangs
    begun = replace(evaluating, activity_s=STALL_MIN_S / 2)
    assert trainer_state(begun, now) == ("evaluating", 40.0)
    assert trainer_state(replace(begun, steps=()), now) == ("evaluating", None)
    saving = replace(quiet, activity="saving", activity_s=40.0)
    assert trainer_state(saving, now) == ("saving", 40.0)  # it waits on I/O
    assert trainer_state(replace(saving, alive=False), now) == ("exited", 40.0)


@pytest.mark.parametrize("kind", ["evaluating", "saving"])
def test_the_text_and_the_step_pane_name_the_state_and_its_time(kind: Activity) -> None:
    state = replace(attached(7, data_ms=20, compute_ms=20, num_workers=0), state=kind,
                    activity=kind, activity_s=31.25, idle_s=31.3)
    shown = replace(frame(), attached=(state,))  # as derived: the state stands
    text = render(shown)
    pane = "".join(text for line in step_lines([state], 120, 8) for text, _ in line)
    assert f"({kind} for 31.2 s)" in text and "STALLED" not in text
    assert f"{kind} for 31.2 s" in pane and "STALLED" not in pane
    doc = json.loads(dumps(shown))["attach"]
    doc = doc[0] if isinstance(doc, list) else doc
    assert (doc["state"], doc["activity"], doc["activity_s"]) == (kind, kind, 31.25)
