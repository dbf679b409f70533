"""The keys the modes share, each a Binding made once; a mode lists the ones it binds."""

from __future__ import annotations

from textual.binding import Binding

QUIT = Binding("q", "quit", "quit")
INTERRUPT = Binding("ctrl+c", "interrupt", "quit", show=False, priority=True)
HELP = Binding("question_mark", "help", "help", key_display="?")
PAUSE = Binding("p", "pause", "pause")
FILTER = Binding("slash", "filter", "filter", key_display="/", priority=True)

SORT = {
    "cpu": Binding("c", "sort('cpu')", "%CPU"),
    "rss": Binding("m", "sort('rss')", "RSS"),
    "gpu": Binding("g", "sort('gpu')", "GPU MEM"),
    "pid": Binding("n", "sort('pid')", "PID"),
    "time": Binding("t", "sort('time')", "TIME", show=False),
}
TABLE = (
    Binding("o", "only_gpu", "GPU only"),
    Binding("space", "fold", "fold"),
    Binding("z", "fold_all", "fold all", show=False),
    Binding("T", "tree", "tree", show=False),
    Binding("A", "advice", "advice", show=False),
)
# Priority, as `/` is: handled as the key is read, so a key that arrives with Enter or Esc in
# one read (a paste, a slow link) goes where that key sends the focus.
FILTER_LINE = (
    Binding("enter", "submit_filter", show=False, priority=True),
    Binding("escape", "clear_filter", "clear filter", show=False, priority=True),
)


def sorting(*columns: str) -> tuple[Binding, ...]:
    """The sort keys for `columns`, in that order."""
    return tuple(SORT[column] for column in columns)
