"""The fleet screens: every host Prometheus scrapes, worst first (Enter drills in), and one
host's GPUs, trainers and advice (Esc goes back). Both render the Frame they are handed."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen

from gputop.core.model import FleetHost, FleetReport, Frame
from gputop.tui.lines import Line
from gputop.tui.messages import HostChosen
from gputop.tui.views.fleet import (
    fleet_columns,
    fleet_header_line,
    fleet_row_line,
    fleet_title_lines,
    host_lines,
)
from gputop.tui.views.footer import footer_line
from gputop.tui.widgets.linepane import LinePane
from gputop.tui.widgets.table import CursorTable

FOOTER = [Binding("enter", "", "host"), Binding("q", "", "quit"), Binding("p", "", "pause")]
HOST_FOOTER = [Binding("escape", "", "fleet", key_display="Esc"), *FOOTER[1:]]


class FleetTable(CursorTable):
    """One row per host, worst first; the cursor stays on its host across refreshes."""

    BINDINGS = [Binding("enter", "choose", "host", show=False)]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.hosts: tuple[FleetHost, ...] = ()
        self._cursor_instance: str | None = None
        self._empty_note = "asking Prometheus…"

    @property
    def selected(self) -> FleetHost | None:
        """The host under the cursor."""
        return self.hosts[self.cursor] if 0 <= self.cursor < len(self.hosts) else None

    def row_count(self) -> int:
        """How many hosts are listed."""
        return len(self.hosts)

    def show(self, hosts: tuple[FleetHost, ...], empty_note: str) -> None:
        """New hosts: the cursor keeps its host once the user has moved it."""
        self.hosts, self._empty_note = hosts, empty_note
        if self._following and self._cursor_instance is not None:
            for index, host in enumerate(hosts):
                if host.instance == self._cursor_instance:
                    self.cursor = index
                    break
        self._paint()

    def action_choose(self) -> None:
        """Enter: drill into the host under the cursor."""
        if self.selected is not None:
            self.post_message(HostChosen(self.selected.instance))

    def _paint(self) -> None:
        width = self.size.width
        if not width:
            return
        shown = self._visible()
        if self.hosts:
            self._cursor_instance = self.hosts[self.cursor].instance
        columns = fleet_columns(width)
        lines: list[Line] = [fleet_header_line(columns, width)]
        for index in shown:
            selected = index == self.cursor and self.has_focus
            lines.append(fleet_row_line(self.hosts[index], columns, width, selected))
        if not self.hosts:
            lines.append(((f"  {self._empty_note}", "dim"),))
        self.set_lines(lines)


class FrameScreen(Screen[None]):
    """A fleet screen: a title over what the newest fleet report says and a key line below,
    rendered once the screen is mounted and again on every resize. `NAME` prefixes the ids
    of its panes (NAME-title, NAME-footer); `KEYS` are the keys its footer names."""

    NAME = ""
    KEYS: list[Binding] = []

    def __init__(self) -> None:
        super().__init__()
        self.frame: Frame | None = None
        self.paused = False

    def show(self, frame: Frame | None, *, paused: bool) -> None:
        """Take `frame` and render it (later, if the screen is not mounted yet)."""
        self.frame, self.paused = frame, paused
        if self.is_mounted:
            self.render_frame()

    def on_resize(self) -> None:
        """Lines are cut to the width: cut them again."""
        self.call_after_refresh(self.render_frame)

    def render_frame(self) -> None:
        """Paint the frame held (no report: still asking)."""
        width = self.size.width
        report = self.frame.fleet if self.frame is not None else None
        interval = self.frame.interval_s if self.frame is not None else 0.0
        self.query_one(f"#{self.NAME}-title", LinePane).set_lines(
            fleet_title_lines(report, width, interval, paused=self.paused))
        self.render_report(report, width)
        self.query_one(f"#{self.NAME}-footer", LinePane).set_lines(
            [footer_line(self.KEYS, width)])

    def render_report(self, report: FleetReport | None, width: int) -> None:
        """Paint what lies between the title and the keys."""
        raise NotImplementedError


class FleetScreen(FrameScreen):
    """The fleet table under a title line that names the source and its error, if any."""

    NAME = "fleet"
    KEYS = FOOTER

    def compose(self) -> ComposeResult:
        """Title, hosts, keys."""
        yield LinePane(id="fleet-title")
        yield FleetTable(id="fleet-table")
        yield LinePane(id="fleet-footer")

    def on_mount(self) -> None:
        """The keys go to the table; show what arrived before the screen was up."""
        self.query_one(FleetTable).focus()
        self.render_frame()

    def render_report(self, report: FleetReport | None, width: int) -> None:
        """Every host, worst first, or why there are none."""
        note = ("asking Prometheus…" if report is None else
                "no answer from Prometheus yet" if report.error is not None else
                "no gputop serve target in the last hour")
        self.query_one(FleetTable).show(report.hosts if report else (), note)


class FleetHostScreen(FrameScreen):
    """One host in detail; refreshed with each frame while it is shown."""

    BINDINGS = [Binding("escape", "dismiss", "fleet", show=False)]
    NAME = "host"
    KEYS = HOST_FOOTER

    def __init__(self, instance: str) -> None:
        super().__init__()
        self.instance = instance  # the host shown

    def compose(self) -> ComposeResult:
        """Title, the host's lines in a scrolling box, keys."""
        yield LinePane(id="host-title")
        with VerticalScroll(id="host-box"):
            yield LinePane(id="host-detail")
        yield LinePane(id="host-footer")

    def on_mount(self) -> None:
        """The arrow keys scroll the host's lines; show the frame handed over so far."""
        self.query_one("#host-box", VerticalScroll).focus()
        self.render_frame()

    def render_report(self, report: FleetReport | None, width: int) -> None:
        """This host's GPUs, trainers and advice, unless Prometheus stopped answering."""
        if report is None or report.error is None:
            host = next((h for h in report.hosts if h.instance == self.instance),
                        None) if report is not None else None
            detail = report.detail if report is not None else None
            lines = host_lines(self.instance, host, detail, width - 1)
        else:
            lines = [(("waiting for Prometheus to answer again", "dim"),)]
        self.query_one("#host-detail", LinePane).set_lines(lines)
