"""Advice on the loop's own code: its Python outside the model and the loader (host-bound),
or its own fetch before the forward where there is no DataLoader (data-bound, input outside
the model), is the step's largest part; the function the probe sampled most there is named
with what helps and what that would give. A function the probe found waiting on another
thread (a prefetch thread's queue, say) is told to give that work more hands, never to
prefetch again."""

from __future__ import annotations

from gputop.advice.context import Context, figure
from gputop.analysis.steps import STEP_STATISTIC
from gputop.core.model import Advice, AttachState, StepSummary
from gputop.probe.ring import WAITING

# How following the advice changes the step: the work leaves it (done less often), overlaps
# it in one background thread, or is shared by two producers feeding a loop that waits.
LEAVES, OVERLAPS, SHARED = "leaves", "overlaps", "shared"
PRODUCERS = 2

# What helps, by the words in the named function: (words, what it is, what to do, how the
# step changes). Only a collate or dataset function is the DataLoader's own work: only there
# do its words appear.
_SHAPES: tuple[tuple[tuple[str, ...], str, str, str], ...] = (
    (("collate", "__getitem__", "dataset"), "batch assembly on the main thread",
     "move it into the DataLoader's workers (num_workers > 0, the collate_fn runs there) so "
     "batches are built while the model computes", LEAVES),
    (("item", "tolist", "numpy", "synchronize", "cpu"), "device-to-host syncs",
     "keep the values on the device and read them every N steps (fewer `.item()` / `.cpu()` "
     "calls: each one waits for the device)", LEAVES),
    (("log", "print", "write", "add_scalar", "wandb", "flush"), "logging",
     "log every N steps instead of every step, and read the loss with one `.item()` then",
     LEAVES),
    (("save", "checkpoint", "pickle"), "checkpointing",
     "checkpoint less often, or hand the copy to a background thread", LEAVES),
)
_FETCH = ("fetching the next batch",
          "prefetch the next batch in a background thread (a `threading.Thread` filling a "
          "`queue.Queue` of a few batches) so it overlaps the model's forward and backward "
          "(reads, numpy and torch release the GIL: the thread runs beside the model)",
          OVERLAPS)
# The loop waits on its own thread (a prefetch already followed, say): that thread sets the
# pace, and another one beside the model would only wait with it.
_WAITS = ("the loop waits for its own thread, which sets the pace",
          "give that work more hands: two prefetch threads filling the queue where the fetch "
          "releases the GIL (reads, numpy, torch), a DataLoader with workers (num_workers > 0) "
          "where it is CPU-bound Python; or make the fetch itself cheaper",
          SHARED)


def host_bound(ctx: Context, state: AttachState) -> list[Advice]:
    """The window says host-bound (the loop's own Python), or data-bound with its input
    outside the model (the loop's own fetch before the forward: no DataLoader to tune): name
    the function, say what helps for its kind, and what that would give, from the summary's
    own step time."""
    s = state.summary
    if not s.steps or not s.mean_step_ns:
        return []
    if s.verdict == "host-bound" and s.host_percent is not None:
        return [_advice(s, state.pid, "host-bound", "The loop's own Python",
                        "host code (Python outside the model and the data loading)",
                        s.host_percent, s.host_site, s.host_site_percent)]
    if s.verdict == "data-bound" and s.input_outside_model and s.input_bound_percent is not None:
        return [_advice(s, state.pid, "own-fetch", "The loop's own input code",
                        "input outside the model (the loop's own code before the forward, no "
                        "DataLoader)", s.input_bound_percent, s.data_site, s.data_site_percent)]
    return []


def _advice(s: StepSummary, pid: int, advice_id: str, who: str, part: str, percent: float,
            site_text: str | None, site_percent: float | None) -> Advice:
    """The item for the part of the step that is `percent` of it, its top site named."""
    step_ms = s.mean_step_ns / 1e6 if s.mean_step_ns else 0.0
    kind, action, pace = _shape(site_text)
    # what the prediction turns on: the part itself, or for a wait the wait alone
    share = (site_percent if pace == SHARED and site_percent is not None else percent) / 100.0
    predicted_ms = max(_predicted_share(share, pace) * step_ms, 1e-3)
    site = (f"; {site_text} takes {site_percent:.0f}% of step time (the probe's stack "
            "samples of that part)" if site_text and site_percent is not None else
            "; no stack samples name the function yet")
    where = f"{site_text}: " if site_text else ""
    return Advice(
        id=advice_id,
        severity="warn",
        title=f"{who} is the largest part of the step ({kind})",
        evidence=f"{part} is {percent:.0f}% of step time over the last {s.steps} steps, "
        f"{STEP_STATISTIC} step {figure(step_ms)} ms{site}",
        action=f"{where}{action[0].upper()}{action[1:]}. {_outcome(share * 100.0, pace)}, "
        f"a step would take ~{figure(predicted_ms)} ms instead of {STEP_STATISTIC} "
        f"{figure(step_ms)} ms ({_rate(s, step_ms / predicted_ms)}).",
        trainer_pid=pid,
    )


def _shape(site: str | None) -> tuple[str, str, str]:
    """What the named site's work is, what typically helps it, and how that changes the
    step (LEAVES, OVERLAPS or SHARED)."""
    if site and WAITING in site:
        return _WAITS
    function = (site or "").split(" (", 1)[0].lower()
    for words, kind, action, pace in _SHAPES:
        if any(word in function for word in words):
            return kind, action, pace
    return _FETCH


def _predicted_share(share: float, pace: str) -> float:
    """The step left, as a share of today's: without the host time (done less often);
    overlapped in one background thread, the longer of the host time and the rest (the
    thread brings one batch per host time however fast the model is); with PRODUCERS
    feeding a loop that waits `share` of its step, the longer of the rest and today's step
    over PRODUCERS (today's step is one producer's pace)."""
    if pace == SHARED:
        return max(1.0 - share, 1.0 / PRODUCERS)
    return max(share, 1.0 - share) if pace == OVERLAPS else 1.0 - share


def _outcome(percent: float, pace: str) -> str:
    """What the prediction assumes, in words."""
    if pace == SHARED:
        return (f"With {PRODUCERS} producers the pace is the longer of the rest of the step "
                f"(the step less its {percent:.0f}% wait) and today's step / {PRODUCERS}")
    if pace == LEAVES:
        return f"Without its {percent:.0f}%"
    if percent > 50.0:
        return (f"Overlapped with the model, its {percent:.0f}% sets the pace (one "
                "thread brings one batch in that time)")
    return f"With its {percent:.0f}% overlapped with the model"


def _rate(s: StepSummary, gain: float) -> str:
    """'x1.40 the samples/s, ~640 instead of 455' (the figure only where it is known)."""
    text = f"x{gain:.2f} the samples/s"
    if s.samples_per_s is not None:
        text += f", ~{s.samples_per_s * gain:.0f} instead of {s.samples_per_s:.0f}"
    return text
