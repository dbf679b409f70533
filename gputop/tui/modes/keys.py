"""The keys the modes share, each a Binding made once; a mode lists the ones it binds.

htop's keys work where they do not clash: F1 help, F3/F4 filter, F5 or t tree, F6 sort by,
F9 kill, F10 quit, M/P/T sort by memory/CPU/time, H user threads, K kernel threads. The
footer names the F-keys as htop's does.
"""

from __future__ import annotations

from textual.binding import Binding

QUIT = Binding("q,f10", "quit", "quit", key_display="F10")
INTERRUPT = Binding("ctrl+c", "interrupt", "quit", show=False, priority=True)
HELP = Binding("question_mark,f1", "help", "help", key_display="F1")
PAUSE = Binding("p", "pause", "pause")
FILTER = Binding("slash,f3,f4", "filter", "filter", key_display="F3", priority=True)

SORT = {
    "cpu": Binding("c,P", "sort('cpu')", "%CPU", show=False),
    "rss": Binding("m,M", "sort('rss')", "RSS", show=False),
    "gpu": Binding("g", "sort('gpu')", "GPU MEM", show=False),
    "pid": Binding("n", "sort('pid')", "PID", show=False),
    "time": Binding("T", "sort('time')", "TIME", show=False),
}
TABLE = (
    Binding("t,f5", "tree", "tree", key_display="F5"),
    Binding("f6", "sort_chooser", "sort by", key_display="F6"),
    Binding("o", "only_gpu", "GPU only"),
    Binding("space", "fold", "fold"),
    Binding("z", "fold_all", "fold all", show=False),
    Binding("K", "kernel_threads", "kernel threads", show=False),
    Binding("H", "user_threads", "threads", show=False),
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
