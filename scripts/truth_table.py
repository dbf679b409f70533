"""Print the truth table of docs/advice.md: each trainer of tests/helpers/truth_trainers.py
run once under `python -m gputop.probe`, gputop's verdict beside its loop's hand timers over
the same steps (tests/helpers/truth.py). Run with `make truth-table`; `--only NAME` runs
that trainer alone (repeatable)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.helpers.truth import Row, run_trainer  # noqa: E402
from tests.helpers.truth_trainers import TRAINERS  # noqa: E402

HEADER = ("| trainer | truth (timers in the loop): part | share | top function | its share "
          "| gputop: verdict | share | function | its share | agrees |\n"
          "|---|---|---|---|---|---|---|---|---|---|")


def cell(value: float | str | None) -> str:
    """A table cell: a share as '61%', a function in backticks, '—' for none."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.0f}%"
    return f"`{value}`" if "(" in value else value


def line(row: Row) -> str:
    """One trainer's markdown row."""
    if row.not_run:
        return f"| {row.trainer} | not run here: {row.not_run} |" + " |" * 8
    values = (row.truth_part, row.truth_percent, row.truth_site, row.truth_site_percent,
              row.verdict, row.verdict_percent, row.site, row.site_percent)
    return (f"| {row.trainer} | " + " | ".join(map(cell, values))
            + f" | {'yes' if row.agrees else 'NO'} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=list(TRAINERS), metavar="NAME",
                        help=f"run only this trainer: {', '.join(TRAINERS)}")
    args = parser.parse_args()
    names = args.only or list(TRAINERS)
    print(HEADER, flush=True)
    agreed = True
    with tempfile.TemporaryDirectory(prefix="gputop-truth-") as folder:
        for name in names:
            row = run_trainer(name, TRAINERS[name], Path(folder) / name)
            agreed = agreed and (row.agrees or row.not_run is not None)
            print(line(row), flush=True)
    return 0 if agreed else 1


if __name__ == "__main__":
    sys.exit(main())
