"""raise-batch-size speaks only for a gain it can predict: the part of each step a larger
batch does not lengthen, shared by more samples (hand-built frames; followed on a real
trainer in test_follow_advice_real.py)."""

from __future__ import annotations

from dataclasses import replace

from gputop.advice import evaluate
from gputop.advice.context import Context
from gputop.core.model import Advice, AttachState, Frame
from tests.helpers.builders import MS, attached, frame, gpu


def _advice(f: Frame, history: dict[int, tuple[float, ...]] | None = None) -> dict[str, Advice]:
    return {a.id: a for a in evaluate(Context(f, history or {}))}


def _on_a_gpu(util: float, used_gib: float = 32.0) -> Frame:
    """A compute-bound CUDA trainer with batch 128 on an 80 GiB GPU at `util` %."""
    return frame(gpus=(gpu(util=util, used_gib=used_gib, total_gib=80, pids=((5, used_gib),)),),
                 attach=(attached(5, data_ms=1, compute_ms=40, batch_size=128,
                                  device="cuda:0"),))


def _on_the_cpu(forward: float, backward: float, optimizer: float, loop: float) -> AttachState:
    """A compute-bound CPU trainer (batch 16, 1 ms data wait) with these phase means in ms."""
    state = attached(5, data_ms=1, compute_ms=1, batch_size=16, device="cpu")
    step = 1 + forward + backward + optimizer + loop
    records = tuple(replace(s, duration_ns=int(step * MS), forward_ns=int(forward * MS),
                            backward_ns=int(backward * MS), optimizer_ns=int(optimizer * MS))
                    for s in state.steps)
    return replace(state, steps=records)


def _with_memory(state: AttachState, used_gib: float = 28.0) -> Frame:
    return frame(gpus=(gpu(util=97, used_gib=used_gib, total_gib=80, pids=((5, used_gib),)),),
                 attach=(state,))


def test_a_busy_gpu_with_memory_to_spare_gets_no_batch_advice_it_cannot_back() -> None:
    # Kernels back to back: a larger batch's kernels take longer in proportion, as far as
    # anything gputop measures can say.
    assert "raise-batch-size" not in _advice(_on_a_gpu(util=97), {0: (97.0,) * 10})


def test_a_gpu_idling_between_kernels_predicts_the_gain_of_a_larger_batch() -> None:
    found = _advice(_on_a_gpu(util=50), {0: (50.0,) * 10})["raise-batch-size"]
    # Half of a 41 ms step the GPU idles; less the 1 ms input: 19.5 ms that stays.
    assert found.evidence == (
        "compute-bound (2% input) with GPU 0 memory at 40% and batch_size=128; GPU 0 idles "
        "50% of the time (kernel launches and host work, the same for any batch): 19.5 ms of "
        "the mean step 41.0 ms over the last 50 steps does not grow with the batch")
    floor = 2.25 * 41 / (19.5 + 2.25 * 21.5)
    assert found.action.startswith("Try batch_size ≈ 288 ")
    assert (f"2.25x the samples a step for 19.5 + 2.25 x 21.5 ms predicts at least "
            f"{floor:.2f}x the samples/s (2.2x where compute barely grows, more where larger "
            "matmuls run their kernels fuller).") in found.action


def test_on_the_cpu_the_optimizer_and_the_loop_are_the_part_that_stays() -> None:
    found = _advice(_with_memory(_on_the_cpu(forward=2, backward=3, optimizer=5, loop=1))
                    )["raise-batch-size"]
    assert ("optimizer.step takes 5.0 ms and the loop's own code 1.0 ms: 6.0 ms of the mean "
            "step 12.0 ms over the last 50 steps does not grow with the batch") in found.evidence
    grow = 41 / 16  # 28 of 80 GiB: 16 x 0.9 / 0.35 = 41
    assert f"predicts at least {grow * 12 / (6 + grow * 6):.2f}x" in found.action


def test_on_the_cpu_steps_of_batch_sized_compute_get_no_batch_advice() -> None:
    state = _on_the_cpu(forward=15, backward=25, optimizer=0.2, loop=0.1)
    assert "raise-batch-size" not in _advice(_with_memory(state))


def test_without_an_optimizer_phase_there_is_no_prediction_and_no_advice() -> None:
    state = _on_the_cpu(forward=2, backward=3, optimizer=5, loop=1)
    state = replace(state, steps=tuple(replace(s, optimizer_ns=None) for s in state.steps))
    assert "raise-batch-size" not in _advice(_with_memory(state))
