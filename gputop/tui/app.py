"""The live TUI: renders the Frames a sampler delivers from its own thread; never samples itself."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import operator
import signal
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar, cast

from textual.actions import SkipAction
from textual.app import App, ComposeResult
from textual.widget import Widget
from textual.widgets import Input

from gputop.core.model import Advice, Frame
from gputop.tui import paint, textual_adapter
from gputop.tui.feeds import FrameFeed, ThreadFeed
from gputop.tui.history import History
from gputop.tui.lines import Line
from gputop.tui.messages import HeaderClicked, HostChosen, RowActivated
from gputop.tui.modes import Command, Signaller, controller_for
from gputop.tui.slot import FrameSlot
from gputop.tui.splash import Splash
from gputop.tui.terminal_caps import PLAIN
from gputop.tui.views.advice import advice_lines
from gputop.tui.views.footer import footer_line
from gputop.tui.views.gpus import gpu_line_count, gpu_lines
from gputop.tui.views.header import error_lines, header_lines
from gputop.tui.views.host import host_lines
from gputop.tui.views.processes import Row, Rows, TableState, fold_pid, table_rows
from gputop.tui.views.steps import HEAD_LINES, step_lines
from gputop.tui.widgets.advice_page import AdvicePage
from gputop.tui.widgets.help import HelpScreen
from gputop.tui.widgets.linepane import LinePane
from gputop.tui.widgets.table import ProcessTable

W = TypeVar("W", bound=Widget)

_DEFAULT_ASCENDING = {"pid": True}
MAX_THREAD_PIDS = 64  # processes whose threads H has the sampler read, at most
FULL_GC_EVERY_S = 30.0
FREEZE_AT_FRAME = 3  # by then Textual, the views and the deferred sources are all imported


class GputopApp(App[int]):
    """GPUs, host, processes grouped by trainer, attached steps and advice, one Frame at a time."""

    CSS_PATH = "gputop.tcss"
    TITLE = "gputop"
    ENABLE_COMMAND_PALETTE = False
    # no BINDINGS: each mode's controller binds its keys (gputop/tui/modes)

    def __init__(self, sampler: FrameFeed, *, attach_pid: int | None = None,  # still to attach
                 slot: FrameSlot | None = None, command: Command | None = None,
                 signaller: Signaller | None = None, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.sampler = sampler
        self._thread_feed = sampler if isinstance(sampler, ThreadFeed) else None
        self.attach_pid = attach_pid
        self.frame: Frame | None = None
        self.history = History()
        # each pane drawn only on a new frame: what it was last drawn from (see _draw_pane)
        self._drawn_from: dict[str, tuple[tuple[object, ...], tuple[object, ...]]] = {}
        self.state = TableState()
        self.attach_error: str | None = None
        self._want_attach = attach_pid
        self.slot = slot or FrameSlot()
        self.splash: Splash | None = None  # the driver takes the terminal over from it
        self._frames_shown = 0
        self._live_advice: tuple[Advice, ...] = ()  # the advice while a trainer ran
        self.final_advice: tuple[Advice, ...] | None = None  # kept once every trainer exited
        self.look = PLAIN  # how the terminal draws (build_app sets it; the driver reads it)
        self._frame_loop: asyncio.AbstractEventLoop | None = None  # on_mount sets both
        self._frame_context: contextvars.Context | None = None
        self._found: dict[str, Widget] = {}  # looked up once: a query a pane a frame cost
        self.mode = controller_for(self, command, signaller)
        textual_adapter.bind_keys(self, self.mode.BINDINGS)

    # ---- frames from the sampler thread ----------------------------------------------------

    def _wake(self) -> None:
        """On the sampler thread: have the app's loop show the parked frame in its next turn,
        a plain callback (a message would take the app's queue, its task and a dispatch)."""
        loop, context = self._frame_loop, self._frame_context
        if loop is None or context is None or textual_adapter.closing(self):
            return
        with contextlib.suppress(RuntimeError):  # the loop closed as the app ends
            loop.call_soon_threadsafe(self._show_parked, context=context)

    def _show_parked(self) -> None:
        """Take the newest parked frame and show it; a bug ends the app as a message
        handler's would (its traceback shown), never silently. Once the app is leaving (its
        screens may be closed already) the frame is dropped."""
        try:
            frame = self.slot.take()
            if frame is not None and textual_adapter.can_draw(self):
                self.show_frame(frame)
        except Exception as error:
            textual_adapter.fail(self, error)

    def show_frame(self, frame: Frame) -> None:
        """Show one Frame, as the mode shows its Frames."""
        self.frame = frame
        self._frames_shown += 1
        if self._frames_shown == FREEZE_AT_FRAME:
            self.freeze_startup_heap()
        self.mode.show(frame)

    def draw(self, frame: Frame) -> None:
        """Render a new Frame (already in the history) into every pane."""
        self._keep_final_advice(frame)
        if self._want_attach is not None:
            self._attach_pending(self._want_attach)
        with paint.together(self.screen):
            self.draw_panes()

    def _keep_final_advice(self, frame: Frame) -> None:
        """Once every attached trainer has exited, keep the advice it last had (the advisor
        drops items that stop firing) until the user moves on."""
        attached = frame.attached
        if attached and all(a.state == "exited" for a in attached):
            if self.final_advice is None:
                self.final_advice = self._live_advice
        else:
            self.final_advice = None
            self._live_advice = frame.advice if attached else ()

    def shown_advice(self) -> tuple[Advice, ...]:
        """The advice on screen: the final advice of trainers that exited, else the frame's."""
        if self.final_advice:
            return self.final_advice
        return self.frame.advice if self.frame is not None else ()

    def summary_frame(self) -> Frame | None:
        """The last frame with the advice on screen, for the summary printed at exit."""
        if self.frame is None:
            return None
        return replace(self.frame, advice=self.shown_advice())

    def _attach_pending(self, pid: int) -> None:
        """Attach to the job we were started for once the sampler reads rings; its rings
        (the command's own, or its ranks' under a launcher) are found as they appear."""
        try:
            self.sampler.attach(pid)
        except ValueError:  # the ring reader is still starting
            return
        except OSError as exc:
            self.attach_error = f"cannot attach to {pid}: {exc}"
        self._want_attach = None

    # ---- layout ----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        """Header, GPUs, host, steps, advice, processes, filter, footer."""
        yield LinePane(id="header")
        yield LinePane(id="gpus")
        yield LinePane(id="host")
        yield LinePane(id="steps")
        yield LinePane(id="advice")
        yield ProcessTable(id="procs")
        yield Input(placeholder="filter: name, command, user or PID", id="filter")
        yield LinePane(id="footer")

    def on_mount(self) -> None:
        """Focus the table, route SIGHUP/SIGTERM to a clean exit, show any early frame."""
        self._frame_loop = asyncio.get_running_loop()
        self._filter().display = False
        self._table().focus()
        self._install_signal_handlers()
        # Textual's own strips (the filter Input's, an open page's) keep themselves in their
        # divide cache and layouts leave small cycles: only a full collection frees them, and
        # left to chance their garbage lifts the resident size (the panes' strips have no cycle).
        self.set_interval(FULL_GC_EVERY_S, self.collect_garbage)
        self.mode.mounted()
        self._frame_context = contextvars.copy_context()  # the app's: Textual finds it there
        frame = self.slot.listen(self._wake)
        if frame is not None:
            self.show_frame(frame)
        else:
            self.refresh_panes()

    def freeze_startup_heap(self) -> None:
        """Move what startup made (modules, Textual's app, CSS and widgets: ~50k objects) out
        of the collector's reach, once: a full collection then walks only what was made
        since, not the tens of thousands of startup objects. Startup's garbage goes first."""
        gc.collect()
        gc.freeze()

    def collect_garbage(self) -> None:
        """A full collection (Textual counts a callback's parameters: gc.collect has no
        inspectable signature, so it is called from here)."""
        gc.collect()

    def on_resize(self) -> None:
        """Panes are cut to the size; re-cut them."""
        self.call_after_refresh(self.refresh_panes)

    def refresh_panes(self) -> None:
        """Draw the current frame again, as the mode draws it."""
        self.mode.redraw()

    def draw_panes(self) -> None:
        """Recompute every pane's lines for the current frame and size."""
        width, height = self.size
        frame = self.frame
        paused = self.sampler.paused
        self._pane("header").set_lines(header_lines(frame, width, paused=paused,
                                                    replay=self.mode.place()))
        self._pane("footer").set_lines([footer_line(self.mode.footer_keys, width)])
        if frame is None:
            self._table().show(Rows(), self.state, "waiting for the first sample…")
            return
        budget = self._budget(frame, height)
        history = self.history
        self._draw_pane("gpus", (frame, history), (history.added, width, budget["gpus"]),
                        lambda: self._gpu_lines(frame, width, budget["gpus"]))
        self._draw_pane("host", (frame, history), (history.added, width, budget["host"]),
                        lambda: self._host_lines(frame, width, budget["host"]))
        self._draw_pane("steps", (frame,), (self.attach_error, width, budget["steps"]),
                        lambda: self._step_lines(frame, width, budget["steps"]))
        self._pane("advice").set_lines(error_lines(frame, width, "advice") + advice_lines(
            self.shown_advice(), width, budget["advice"], final=bool(self.final_advice)))
        rows = table_rows(frame, self.state)
        self._table().show(rows, self.state)
        if self.state.threads:
            self._ask_for_threads(frame, rows)

    def _ask_for_threads(self, frame: Frame, rows: Rows) -> None:
        """H: have the sampler read the threads of the processes in view, then of the
        trainers and their workers (MAX_THREAD_PIDS processes at most)."""
        feed = self._thread_feed
        if feed is None:
            return
        table = self._table()
        pids: dict[int, None] = {}
        for index in range(table.top, min(len(rows), table.top + table.size.height)):
            item = rows.item(index)
            if not isinstance(item, Row):
                pids[item.pid] = None
            elif not item.thread:
                pids[item.process.pid] = None
        for group in frame.trainers:
            pids.update(dict.fromkeys((group.pid, *group.worker_pids)))
        feed.show_threads(list(pids)[:MAX_THREAD_PIDS])

    def _draw_pane(self, name: str, objects: tuple[object, ...], values: tuple[object, ...],
                   draw: Callable[[], list[Line]]) -> None:
        """Show `draw()` in pane `name` unless it was drawn from the same `objects` (the same
        ones: a frame and its parts are never changed in place) and equal `values`: a key
        press redraws the table, not the panes beside it."""
        before = self._drawn_from.get(name)
        if (before is not None and before[1] == values and len(before[0]) == len(objects)
                and all(map(operator.is_, before[0], objects))):
            return
        self._drawn_from[name] = (objects, values)
        self._pane(name).set_lines(draw())

    def _gpu_lines(self, frame: Frame, width: int, rows: int) -> list[Line]:
        return error_lines(frame, width, "gpu") + gpu_lines(
            frame.gpu.gpus, self.history, width, rows)

    def _host_lines(self, frame: Frame, width: int, rows: int) -> list[Line]:
        host = host_lines(frame.host, frame.memory_bandwidth, self.history, width,
                          max_core_rows=max(1, rows - 2))
        return error_lines(frame, width, "membw") + (host[-rows:] if rows else [])

    def _step_lines(self, frame: Frame, width: int, rows: int) -> list[Line]:
        attached = frame.attached
        if self.attach_error and not attached:
            steps: list[Line] = [((self.attach_error, "warn"),)]
        else:
            slowest = frame.straggler.pid if frame.straggler is not None else None
            steps = step_lines(attached, width, rows, slowest)
        return error_lines(frame, width, "attach") + steps

    def on_host_chosen(self, message: HostChosen) -> None:
        """Enter on a fleet row: the mode shows that host."""
        self.mode.choose_host(message.instance)

    def _budget(self, frame: Frame, height: int) -> dict[str, int]:
        """Rows per pane: the table keeps at least a header and a few rows."""
        banner = (1 if frame.gpu.source != "nvml" else 0) + self.mode.banner_rows
        filter_rows = 1 if self._filter().display else 0
        free = height - 2 - banner - filter_rows - len(frame.errors)  # header + footer
        gpus = min(gpu_line_count(frame.gpu.gpus), max(1, free // 5))
        host = 2 + (frame.memory_bandwidth is not None) if free >= 18 else 2
        steps = 0
        if frame.attached:
            steps = min(HEAD_LINES + 12, max(HEAD_LINES + 2, free // 3))
        shown = self.shown_advice()
        advice = min(2 * len(shown) + bool(self.final_advice), max(2, free // 6)) if shown else 0
        table_min = max(4, free // 3)
        roomy = free >= 16  # below that the table and the GPUs get everything
        floors = {"advice": min(advice, 2) if roomy else 0, "steps": min(steps, 3) if roomy else 0,
                  "host": 1}
        for name in ("advice", "steps", "host"):
            over = gpus + host + steps + advice + table_min - free
            if over <= 0:
                break
            if name == "advice":
                advice = max(floors[name], advice - over)
            elif name == "steps":
                steps = max(floors[name], steps - over)
            else:
                host = max(floors[name], host - over)
        return {"gpus": gpus, "host": host, "steps": steps, "advice": advice}

    def _one(self, name: str, kind: type[W]) -> W:
        """The widget with id `name` (the panes, the table and the filter are composed once,
        never replaced)."""
        found = self._found.get(name)
        if found is None or found.parent is None:  # not yet looked up, or taken off the screen
            found = self._found[name] = self.query_one(f"#{name}", kind)
        return cast(W, found)

    def _pane(self, name: str) -> LinePane:
        return self._one(name, LinePane)

    def _table(self) -> ProcessTable:
        return self._one("procs", ProcessTable)

    def _filter(self) -> Input:
        return self._one("filter", Input)

    def selected_row(self) -> Row | None:
        """The process row under the table's cursor."""
        return self._table().selected

    # ---- actions ---------------------------------------------------------------------------

    async def action_quit(self) -> None:
        """q: as the mode leaves (`gputop run` asks first while its command runs)."""
        self.mode.quit()

    def action_interrupt(self) -> None:
        """Ctrl-C: as the mode takes it (`gputop run` forwards it to its command)."""
        self.mode.interrupt()

    def action_mode(self, action: str, *parameters: object) -> None:
        """A key of the mode's own: its controller's `action_<action>` does it."""
        getattr(self.mode, f"action_{action}")(*parameters)

    def detach_trainers(self) -> None:
        """Stop showing the attached trainers."""
        pids = {a.pid for a in self.frame.attached} if self.frame is not None else set()
        pids |= {pid for pid in (self.attach_pid, self._want_attach) if pid is not None}
        if not pids:
            self.notify("not attached to any trainer")
            return
        for pid in sorted(pids):
            self.sampler.detach(pid)
        self.attach_pid = self._want_attach = self.attach_error = None
        self.final_advice, self._live_advice = None, ()
        if self.frame is not None:
            self.frame = replace(self.frame, attached=(), straggler=None)
        self.refresh_panes()
        self.notify(f"detached from {', '.join(map(str, sorted(pids)))}")

    def action_help(self) -> None:
        """Show the key help."""
        self.push_screen(HelpScreen())

    def action_pause(self) -> None:
        """Pause or resume sampling; the header says PAUSED."""
        self.sampler.set_paused(not self.sampler.paused)
        self.refresh_panes()

    def action_sort(self, key: str) -> None:
        """Sort by `key`; the same key again reverses the order."""
        if self.state.sort == key:
            self._set_state(replace(self.state, ascending=not self.state.ascending))
        else:
            self._set_state(replace(self.state, sort=key,
                                    ascending=_DEFAULT_ASCENDING.get(key, False)))

    def action_kernel_threads(self) -> None:
        """K: list the kernel's threads too, or hide them again (htop's default)."""
        self._set_state(replace(self.state, kernel_threads=not self.state.kernel_threads))

    def action_user_threads(self) -> None:
        """H: each listed process's userland threads as rows beneath it, or hidden again
        (htop's H); read live only, while shown."""
        feed = self._thread_feed
        if feed is None:
            self.notify("threads are read live only: none in a recording", markup=False)
            return
        self._set_state(replace(self.state, threads=not self.state.threads))
        if not self.state.threads:
            feed.show_threads(())

    def action_sort_chooser(self) -> None:
        """F6: choose the sort column from a list, as htop's F6 does."""
        from gputop.tui.widgets.sort_chooser import SortChooser

        self.push_screen(SortChooser(self.state.sort), self._sort_chosen)

    def _sort_chosen(self, key: str | None) -> None:
        if key is not None and key != self.state.sort:
            self.action_sort(key)

    def action_only_gpu(self) -> None:
        """Show only GPU processes, launchers, trainers and their workers (or everything)."""
        self._set_state(replace(self.state, only_gpu=not self.state.only_gpu))

    def on_header_clicked(self, message: HeaderClicked) -> None:
        """A click on a column title sorts by it, as its key would."""
        self.action_sort(message.sort)

    def action_tree(self) -> None:
        """Switch between trainer groups and the full process tree."""
        self._set_state(replace(self.state, tree=not self.state.tree, collapsed=frozenset()))

    def action_fold(self) -> None:
        """Fold or unfold the trainer group under the cursor (a worker folds its trainer);
        in the tree, the processes beneath the one under the cursor."""
        row = self.selected_row()
        pid = fold_pid(row) if row is not None else None
        if pid is not None:
            self._set_state(replace(self.state, collapsed=self.state.collapsed ^ {pid}))

    def action_fold_all(self) -> None:
        """Fold every trainer group (in the tree: every process with others beneath), or
        unfold all when some are folded."""
        if self.state.collapsed or self.frame is None:
            collapsed: frozenset[int] = frozenset()
        elif self.state.tree:
            collapsed = frozenset(p.ppid for p in self.frame.processes if p.ppid is not None)
        else:
            collapsed = frozenset(group.pid for group in self.frame.trainers)
        self._set_state(replace(self.state, collapsed=collapsed))

    def action_advice(self) -> None:
        """A: the advice whole and full width (the pane cuts it on small terminals)."""
        advice = self.shown_advice()
        if not advice:
            self.notify("no advice to show", markup=False)
            return
        self.push_screen(AdvicePage(advice, final=bool(self.final_advice)))

    def action_attach(self) -> None:
        """Attach to the trainer under the cursor if it runs the probe."""
        row = self.selected_row()
        if row is not None:
            self._attach_to(row.process.pid, row.process.has_probe)

    def on_row_activated(self, message: RowActivated) -> None:
        """Enter: attach to a probed process, else fold/unfold its group."""
        if message.row.process.has_probe:
            self._attach_to(message.row.process.pid, True)
        else:
            self.action_fold()

    def action_filter(self) -> None:
        """Open the filter line. `/` is a priority binding and the field takes the focus at
        once: letters that arrive with the `/` in one read (a paste, a slow link) go to the
        filter, not to the table. A `/` typed into the filter, or under a dialog, is text."""
        field = self._filter()
        if self.focused is field or len(self.screen_stack) > 1:
            raise SkipAction
        field.display = True
        field.value = self.state.filter
        self.screen.set_focus(field)
        self.refresh_panes()

    def action_submit_filter(self) -> None:
        """Enter in the filter: keep the filter and give the keys back to the table."""
        if self.focused is not self._filter():
            raise SkipAction
        self._close_filter()

    def action_clear_filter(self) -> None:
        """Drop the filter and close the filter line (Esc under a dialog is the dialog's)."""
        if len(self.screen_stack) > 1:
            raise SkipAction
        field = self._filter()
        field.value = ""
        self._close_filter()
        self._set_state(replace(self.state, filter=""))

    def on_input_changed(self, event: Input.Changed) -> None:
        """Filter as the user types."""
        self._set_state(replace(self.state, filter=event.value))

    def _close_filter(self) -> None:
        self._filter().display = False
        self.screen.set_focus(self._table())  # now, not after queued keys
        self.refresh_panes()

    def _set_state(self, state: TableState) -> None:
        self.state = state
        self.refresh_panes()

    def _attach_to(self, pid: int, has_probe: bool) -> None:
        if not has_probe:
            self.notify(f"{pid} runs no gputop probe; start it with `gputop run`",
                        severity="warning")
            return
        try:
            self.sampler.attach(pid)
        except (ValueError, OSError) as exc:
            self.notify(f"cannot attach to {pid}: {exc}", severity="error", markup=False)
            return
        self.attach_pid = pid
        self.final_advice, self._live_advice = None, ()
        self.notify(f"attached to {pid}; steps appear with the next tick")

    def _install_signal_handlers(self) -> None:
        """SIGHUP (SSH drop) and SIGTERM end the app, restoring the tty; a hang-up leaves
        `gputop run`'s command running, SIGTERM stops it as Q would."""
        loop = self._frame_loop
        if loop is None or threading.current_thread() is not threading.main_thread():
            return
        for sig, handler in ((signal.SIGHUP, self.mode.hang_up), (signal.SIGTERM, self.exit)):
            with contextlib.suppress(RuntimeError, ValueError, NotImplementedError):
                loop.add_signal_handler(sig, handler)

