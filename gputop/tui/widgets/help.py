"""The help screen: every key, and what the marks in the table mean."""

from __future__ import annotations

import textwrap

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from gputop.tui.views.host import membw_why

HELP = """\
[b]gputop keys[/b] (htop's where they do not clash)

  [b]F1 ?[/b]         this help
  [b]F3 F4 /[/b]      filter by name, command, user or PID (Enter keeps, Esc
               clears); a badge in the table's title row names it
  [b]F5 t[/b]         the full process tree, or back to trainer groups
  [b]F6[/b]           sort by a column chosen from a list (or click its title)
  [b]P c[/b] [b]M m[/b] [b]T[/b]    sort by %CPU, by RSS, by TIME (again: reverse)
  [b]g n[/b]          sort by GPU MEM, by PID
  [b]H[/b]            each process's threads as dim rows beneath it (again: hide)
  [b]K[/b]            the kernel's threads too (hidden by default, as in htop)
  [b]o[/b]            only GPU processes, trainers and their workers
  [b]space z[/b]      fold the trainer group / every group (tree: branches)
  [b]F9 k[/b]         signal the process under the cursor or its whole trainer;
               asks first, naming each PID: [b]t[/b] SIGTERM [b]K[/b] SIGKILL [b]i[/b] SIGINT
               [b]w[/b] this process / whole trainer, [b]Esc[/b] cancel. Your own
               processes only unless root; --readonly turns it off
  [b]A[/b]            the advice whole, full width (Esc closes)
  [b]enter[/b]        attach to a trainer with a probe (◆), else fold it
  [b]a[/b]            attach to the trainer under the cursor
  [b]d[/b]            detach: stop showing the attached trainer
  [b]p[/b]            pause / resume sampling
  [b]↑ ↓ PgUp PgDn Home End[/b]  move the cursor
  [b]F10 q ctrl+c[/b] quit

[b]gputop run[/b], while the command runs
  [b]q[/b] or [b]d[/b]      ask first: [b]Q[/b] stop it, [b]d[/b] leave it running, [b]Esc[/b] stay
              (Q sends Ctrl-C, then SIGTERM if it still runs 10 s later)
  [b]ctrl+c[/b]      to the command (its KeyboardInterrupt runs); gputop quits
              after it

[b]gputop replay FILE[/b]
  [b]← →[/b]         pause and step one tick back / on
  [b]g G[/b]         the first / the newest tick (g does not sort here)
  [b]+ -[/b]         play faster / slower (0.25x to 64x the recorded pace)
  [b]p[/b]           play / pause

[b]Marks[/b]
  ▾ ▸   a trainer with its DataLoader workers (unfolded / folded); in the
        tree, a process with others beneath
  [Nw P% Tthr pin on|off]  workers, their summed %CPU, threads,
        pin-memory thread
  ◆     the process runs the gputop probe: attachable
  ·     a thread of the process above (H): its TID, name, %CPU and TIME
  n/a   not measured or not available; LOST: the GPU stopped answering

[dim]Esc, q, ? or F1 closes.[/dim]"""


class HelpScreen(ModalScreen[None]):
    """A modal listing the bindings."""

    BINDINGS = [
        Binding("escape,q,question_mark,f1", "dismiss", "close", show=False),
    ]

    def compose(self) -> ComposeResult:
        """The help text in a scrollable box, then why memory bandwidth is n/a when it is."""
        with VerticalScroll(id="help-box"):
            yield Static(HELP, id="help-text")
            why = membw_why(getattr(getattr(self.app, "frame", None), "memory_bandwidth", None))
            if why:
                yield Static(membw_section(why), id="help-membw")


def membw_section(why: str) -> Text:
    """The reason the `membw n/a` line points to (`? for why`), wrapped to the help's width."""
    wrapped = textwrap.fill(why, 74, initial_indent="  ", subsequent_indent="  ",
                            break_on_hyphens=False)
    return Text.assemble("\n", ("membw n/a", "bold"), ": no memory-bandwidth figure, because\n",
                         wrapped)
