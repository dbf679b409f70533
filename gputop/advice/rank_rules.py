"""Rules across the ranks of one job: a rank every other rank waits for."""

from __future__ import annotations

from gputop.advice.context import Context
from gputop.core.model import Advice


def input_straggler_rank(ctx: Context) -> list[Advice]:
    """One rank waits for input far longer than the rest; the all-reduce makes all wait."""
    straggler = ctx.frame.straggler
    if straggler is None:
        return []
    who = straggler.who
    return [Advice(
        id="input-straggler",
        severity="warn",
        title=f"{who} is slowest: every rank waits for its input",
        evidence=straggler.evidence,
        action=f"Look at {who}'s input path alone: its DataLoader workers and the cores they "
        "get, its shard of the data (bigger or costlier samples), and the disk or network it "
        "reads from. Give it what the fast ranks have, or balance the shards.",
    )]
