"""What the trainer does between its steps: evaluating its model, or saving (torch.save).

Evaluation is forward passes of the stepped model that do not train (under no_grad or
inference_mode, or with the model in eval mode), two in a row with no backward between:
a single such forward (a target network's, a frozen-BatchNorm model's training forward)
is part of a training step. It ends at the training loader's next fetch (steps.py calls
end_evaluation), or else at the next training forward or backward.

The state goes to the ring's metadata (META_ACTIVITY, and META_SINCE: when it began on
perf_counter_ns, the readers' CLOCK_MONOTONIC) only when it changes, never per forward.
"""

from __future__ import annotations

from time import perf_counter_ns

from gputop.probe.steps import Recorder

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

META_ACTIVITY = "activity"  # "evaluating" or "saving"; null while training
META_SINCE = "activity_since_ns"
EVALUATING, SAVING = "evaluating", "saving"
ACTIVITIES = (EVALUATING, SAVING)


class Activity:
    """The trainer's activity, noted in the metadata at each change."""

    __slots__ = ("first_ns", "grad_enabled", "mark", "progress", "rec", "since", "state")

    def __init__(self, rec: Recorder, grad_enabled: Callable[[], bool]) -> None:
        self.rec = rec
        self.grad_enabled = grad_enabled
        self.state: str | None = None  # EVALUATING, SAVING, or None: training
        self.since = 0
        self.progress = 0  # backward passes seen
        self.mark = -1  # `progress` at the last forward that did not train (-1: it trained)
        self.first_ns = 0  # when that forward began
        rec.end_evaluation = self.end_evaluation

    def forward_pre(self, inner: Callable[..., None]) -> Callable[..., None]:
        """The stepped model's forward pre-hook `inner`, noting evaluation first."""
        grad_enabled = self.grad_enabled

        def pre(module: Any, args: Any, kwargs: Any = None) -> None:
            if module.training and grad_enabled():
                if self.state is EVALUATING:
                    self.change(None, 0)
                self.mark = -1
            elif self.state is None:
                self.not_training()
            inner(module, args, kwargs)

        return pre

    def end_evaluation(self) -> None:
        """The training loader fetches again: the evaluation is over (a single forward that
        does not train after it is a training step's again)."""
        if self.state is EVALUATING:
            self.change(None, 0)
        self.mark = -1

    def not_training(self) -> None:
        """A forward that does not train: the second in a row with no backward between
        begins an evaluation, dated from the first."""
        if self.mark == self.progress:
            self.change(EVALUATING, self.first_ns)
        else:
            self.mark = self.progress
            self.first_ns = perf_counter_ns()

    def backward(self) -> None:
        """A backward pass: training goes on."""
        self.progress += 1
        if self.state is EVALUATING:
            self.change(None, 0)

    def saving(self, save: Callable[..., Any]) -> Callable[..., Any]:
        """torch.save, noting the saving while it runs (then the activity before it)."""

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            before = self.state, self.since
            self.change(SAVING, perf_counter_ns())
            try:
                return save(*args, **kwargs)
            finally:
                self.change(*before)

        wrapped.__wrapped__ = save  # type: ignore[attr-defined]
        wrapped.__doc__ = save.__doc__
        return wrapped

    def change(self, state: str | None, since: int) -> None:
        self.state, self.since = state, since
        self.rec.evaluating = state is EVALUATING
        self.rec.annotate({META_ACTIVITY: state, META_SINCE: since if state else None},
                          start=False)
