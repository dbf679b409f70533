"""The live TUI: renders the Frames a sampler delivers from its own thread; never samples itself."""

from __future__ import annotations

import ast
import contextlib
import contextvars
import functools
import gc
import operator
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol, TypeVar, cast, runtime_checkable

from textual.actions import SkipAction
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Input

from gputop.core.model import Advice, Frame, Trend
from gputop.tui import paint
from gputop.tui.history import KEEP, History
from gputop.tui.lines import Line
from gputop.tui.messages import HeaderClicked, HostChosen, RowActivated
from gputop.tui.slot import FrameSlot
from gputop.tui.splash import Splash
from gputop.tui.terminal_caps import PLAIN
from gputop.tui.views.advice import advice_lines
from gputop.tui.views.footer import footer_line
from gputop.tui.views.gpus import gpu_lines
from gputop.tui.views.header import ReplayPlace, error_lines, header_lines
from gputop.tui.views.host import host_lines
from gputop.tui.views.processes import Rows, TableState, fold_pid, table_rows
from gputop.tui.views.signals import READ_ONLY, SIGNALS, describe, foreign, signal_targets
from gputop.tui.views.steps import HEAD_LINES, step_lines
from gputop.tui.widgets.advice_page import AdvicePage
from gputop.tui.widgets.fleet import FleetHostScreen, FleetScreen, FrameScreen
from gputop.tui.widgets.help import HelpScreen
from gputop.tui.widgets.linepane import LinePane
from gputop.tui.widgets.quit_prompt import Answer, QuitPrompt
from gputop.tui.widgets.signal_prompt import Choice, SignalPrompt
from gputop.tui.widgets.table import ProcessTable

W = TypeVar("W", bound=Widget)

_DEFAULT_ASCENDING = {"pid": True}
FULL_GC_EVERY_S = 30.0
FLEET_ACTIONS = {"quit", "interrupt", "pause"}  # the app's keys that mean something there
FREEZE_AT_FRAME = 3  # by then Textual, the views and the deferred sources are all imported
COMMAND_CHECK_S = 0.25  # how often the app looks whether `gputop run`'s command has ended


class FrameFeed(Protocol):
    """What the app needs from a sampler (gputop.frames.sampler.Sampler is one)."""

    @property
    def paused(self) -> bool: ...

    def start(self, on_frame: Callable[[Frame], None], *,
              on_prime: Callable[[Frame], None] | None = None) -> None: ...

    def stop(self) -> None: ...

    def set_paused(self, paused: bool) -> None: ...

    def attach(self, pid: int) -> None: ...

    def detach(self, pid: int) -> None: ...

    def add_deferred_sources(self) -> None: ...


@runtime_checkable
class ReplayControls(Protocol):
    """What a replay adds to a FrameFeed (gputop.frames.playback.Playback is one)."""

    speed: float

    def step(self, ticks: int) -> None: ...

    def jump(self, where: str) -> None: ...

    def faster(self, steps: int = 1) -> None: ...

    def position(self) -> tuple[int, int]: ...

    def trend(self, time: float, count: int) -> Trend | None: ...


@runtime_checkable
class FleetFeed(FrameFeed, Protocol):
    """A feed of fleet Frames (gputop.frames.fleet_sampler's), which can focus on one host."""

    def focus(self, instance: str | None) -> None: ...


class Command(Protocol):
    """`gputop run`'s command as the app may control it (wiring hands one over)."""

    @property
    def pid(self) -> int: ...

    @property
    def log(self) -> str | None: ...

    def running(self) -> bool: ...

    def interrupt(self) -> None: ...

    def stop(self) -> None: ...

    def detach(self) -> None: ...


def _parameters(action: str) -> tuple[object, ...]:
    """The literal parameters of an action string ("sort('gpu')" -> ("gpu",))."""
    if "(" not in action:
        return ()
    value = ast.literal_eval(action[action.index("("):])
    return value if isinstance(value, tuple) else (value,)


class Signaller(Protocol):
    """What `k` needs to signal listed processes, each named by its key (PID, start ticks);
    wiring hands one over (gputop.app.signalling), none under --readonly."""

    def refusal(self, targets: Sequence[tuple[int, int]]) -> str | None: ...

    def send(self, targets: Sequence[tuple[int, int]], signum: int) -> str | None: ...


class GputopApp(App[int]):
    """GPUs, host, processes grouped by trainer, attached steps and advice, one Frame at a time."""

    CSS_PATH = "gputop.tcss"
    TITLE = "gputop"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("ctrl+c", "interrupt", "quit", show=False, priority=True),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("p", "pause", "pause"),
        Binding("slash", "filter", "filter", key_display="/", priority=True),
        Binding("k,f9", "signal", "kill", key_display="k"),
        Binding("left", "replay_step(-1)", "back", key_display="←"),
        Binding("right", "replay_step(1)", "step", key_display="→"),
        Binding("g", "replay_jump('start')", "first"),  # before g's sort: replays take it
        Binding("G", "replay_jump('end')", "last"),
        Binding("plus,equals_sign", "replay_speed(1)", "faster", key_display="+"),
        Binding("minus", "replay_speed(-1)", "slower", key_display="-"),
        Binding("c", "sort('cpu')", "%CPU"),
        Binding("m", "sort('rss')", "RSS"),
        Binding("g", "sort('gpu')", "GPU MEM"),
        Binding("n", "sort('pid')", "PID"),
        Binding("t", "sort('time')", "TIME", show=False),
        Binding("o", "only_gpu", "GPU only"),
        Binding("space", "fold", "fold"),
        Binding("z", "fold_all", "fold all", show=False),
        Binding("T", "tree", "tree", show=False),
        Binding("A", "advice", "advice", show=False),
        Binding("a", "attach", "attach", show=False),
        Binding("d", "detach", "detach", show=False),
        # Priority, as `/` is: handled as the key is read, so a key that arrives with Enter
        # or Esc in one read (a paste, a slow link) goes where that key sends the focus.
        Binding("enter", "submit_filter", show=False, priority=True),
        Binding("escape", "clear_filter", "clear filter", show=False, priority=True),
    ]

    def __init__(self, sampler: FrameFeed, *, attach_pid: int | None = None,  # still to attach
                 slot: FrameSlot | None = None, command: Command | None = None,
                 signaller: Signaller | None = None, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.sampler = sampler
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
        self.command = command
        self.signaller = signaller  # None: read-only, `k` refuses
        self._leave_when_command_ends = False  # Ctrl-C was forwarded: quit once it has ended
        self._leave_on_next_frame = False
        self._command_watch: Timer | None = None  # checks the command's end (see _watch_command)
        self._frames_shown = 0
        self._live_advice: tuple[Advice, ...] = ()  # the advice while a trainer ran
        self.final_advice: tuple[Advice, ...] | None = None  # kept once every trainer exited
        self.look = PLAIN  # how the terminal draws (build_app sets it; the driver reads it)
        self.replay = sampler if isinstance(sampler, ReplayControls) else None
        self.fleet = isinstance(sampler, FleetFeed)  # the fleet screens, not this machine's
        self._frame_context: contextvars.Context | None = None  # on_mount sets it
        self._found: dict[str, Widget] = {}  # looked up once: a query a pane a frame cost

    # ---- frames from the sampler thread ----------------------------------------------------

    def _wake(self) -> None:
        """On the sampler thread: have the app's loop show the parked frame in its next turn,
        a plain callback (a message would take the app's queue, its task and a dispatch)."""
        loop, context = self._loop, self._frame_context
        if loop is None or context is None or self._closing:
            return
        with contextlib.suppress(RuntimeError):  # the loop closed as the app ends
            loop.call_soon_threadsafe(self._show_parked, context=context)

    def _show_parked(self) -> None:
        """Take the newest parked frame and show it; a bug ends the app as a message
        handler's would (its traceback shown), never silently. Once the app is leaving (its
        screens may be closed already) the frame is dropped."""
        try:
            frame = self.slot.take()
            if frame is not None and self._showing():
                self.show_frame(frame)
        except Exception as error:
            self._handle_exception(error)

    def _showing(self) -> bool:
        """Whether the app is up with a screen to draw on, and not on its way out."""
        return (self.is_running and bool(self._screen_stack)
                and not (self._exit or self._closing or self._closed))

    def show_frame(self, frame: Frame) -> None:
        """Render one Frame into every pane."""
        self.frame = frame
        self._frames_shown += 1
        if self._frames_shown == FREEZE_AT_FRAME:
            self.freeze_startup_heap()
        if frame.fleet is not None:
            self._show_fleet()
            return
        trend = self.replay.trend(frame.time, KEEP) if self.replay is not None else None
        if trend is not None:  # a replay draws what was recorded up to the tick, jumped or not
            self.history = History.recorded(trend)
        else:
            self.history.add(frame)
        self._keep_final_advice(frame)
        if self._want_attach is not None:
            self._attach_pending(self._want_attach)
        with paint.together(self.screen):
            self.refresh_panes()
        if self._leave_on_next_frame:
            self.exit()

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
        self._filter().display = False
        self._table().focus()
        self._install_signal_handlers()
        # Textual's own strips (the filter Input's, an open page's) keep themselves in their
        # divide cache and layouts leave small cycles: only a full collection frees them, and
        # left to chance their garbage lifts the resident size (the panes' strips have no cycle).
        self.set_interval(FULL_GC_EVERY_S, self.collect_garbage)
        if self.fleet:
            self.push_screen(FleetScreen())
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
        """Recompute every pane's lines for the current frame and size."""
        if self.fleet:
            self._show_fleet()
            return
        width, height = self.size
        frame = self.frame
        paused = self.sampler.paused
        self._pane("header").set_lines(header_lines(frame, width, paused=paused,
                                                    replay=self._replay_place()))
        self._pane("footer").set_lines([footer_line(self._footer_keys, width)])
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

    def _show_fleet(self) -> None:
        """Hand the newest frame to the fleet screens on the stack."""
        for screen in self.screen_stack:
            if isinstance(screen, FrameScreen):
                screen.show(self.frame, paused=self.sampler.paused)

    def on_host_chosen(self, message: HostChosen) -> None:
        """Enter on a fleet row: that host in detail, asked for at once; Esc comes back."""
        if not isinstance(self.sampler, FleetFeed):
            return
        feed = self.sampler
        feed.focus(message.instance)
        screen = FleetHostScreen(message.instance)
        screen.show(self.frame, paused=feed.paused)
        self.push_screen(screen, lambda _: feed.focus(None))

    def _budget(self, frame: Frame, height: int) -> dict[str, int]:
        """Rows per pane: the table keeps at least a header and a few rows."""
        banner = (1 if frame.gpu.source != "nvml" else 0) + (self.replay is not None)
        filter_rows = 1 if self._filter().display else 0
        free = height - 2 - banner - filter_rows - len(frame.errors)  # header + footer
        gpus = min(len(frame.gpu.gpus), max(1, free // 5))
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

    def _replay_place(self) -> ReplayPlace | None:
        if self.replay is None:
            return None
        tick, ticks = self.replay.position()
        return ReplayPlace(tick, ticks, self.replay.speed, self.sampler.paused)

    @functools.cached_property
    def _footer_keys(self) -> list[Binding]:
        """The keys that do something here: a replay's own, or the live view's; `k` only
        where signals may be sent (fixed for the app's life: worked out once)."""
        return [b for b in self.BINDINGS if isinstance(b, Binding)
                and self.check_action(b.action.split("(")[0], _parameters(b.action))
                and (self.signaller is not None or b.action != "signal")]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A replay's keys only in a replay, where g jumps instead of sorting and nothing
        attaches or is signalled (the recorded PIDs are not the machine's now). In the fleet
        view the process keys are off (there is no process table)."""
        if self.fleet:
            return action in FLEET_ACTIONS
        replaying = self.replay is not None
        if action.startswith("replay_"):
            return replaying
        live_only = (action in ("attach", "detach", "signal")
                     or (action, parameters) == ("sort", ("gpu",)))
        return not (replaying and live_only)

    # ---- a replay's keys -------------------------------------------------------------------

    def action_replay_step(self, ticks: int) -> None:
        """Hold the replay and show the tick before or after."""
        if self.replay is not None:
            self.replay.step(ticks)
            self.refresh_panes()

    def action_replay_jump(self, where: str) -> None:
        """Show the first or the newest tick of the recording."""
        if self.replay is not None:
            self.replay.jump(where)

    def action_replay_speed(self, steps: int) -> None:
        """Play faster or slower."""
        if self.replay is not None:
            self.replay.faster(steps)
            self.refresh_panes()

    # ---- actions ---------------------------------------------------------------------------

    async def action_quit(self) -> None:
        """Quit; while `gputop run`'s command still runs, ask what becomes of it first."""
        if self._command_running():
            self._ask_about_command()
        else:
            self.exit()

    def action_interrupt(self) -> None:
        """Ctrl-C: the command's while it runs (gputop quits once it has ended), else quit."""
        if self.command is None or not self._command_running():
            self.exit()
            return
        self.command.interrupt()
        self._leave_when_command_ends = True
        self._watch_command()
        if isinstance(self.screen, QuitPrompt):
            self.screen.dismiss("cancel")
        self.notify(f"Ctrl-C sent to {self.command.pid}; gputop quits when it ends "
                    "(q asks to stop or leave it)", markup=False)

    def check_command(self) -> None:
        """Quit after the command ended, when the user asked to (Ctrl-C, or q still asking),
        once a frame sampled after its end is on screen."""
        if not (self._leave_when_command_ends or isinstance(self.screen, QuitPrompt)):
            self._unwatch_command()  # the question was cancelled: its end changes nothing
            return
        if self._leave_on_next_frame or self.command is None or self._command_running():
            return
        if self.sampler.paused:
            self.exit()
        else:
            self._leave_on_next_frame = True

    def _command_running(self) -> bool:
        return self.command is not None and self.command.running()

    def _ask_about_command(self) -> None:
        if self.command is not None and not isinstance(self.screen, QuitPrompt):
            self.push_screen(QuitPrompt(self.command.pid, self.command.log), self._answered)
            self._watch_command()

    def _watch_command(self) -> None:
        """Look every COMMAND_CHECK_S whether the command has ended, from the first time the
        user asked to leave once it has (Ctrl-C forwarded, or q asking): until then its end
        changes nothing, and a timer would wake the app four times a second for nothing."""
        if self._command_watch is None:
            self._command_watch = self.set_interval(COMMAND_CHECK_S, self.check_command)

    def _unwatch_command(self) -> None:
        if self._command_watch is not None:
            self._command_watch.stop()
            self._command_watch = None

    def _answered(self, answer: Answer | None) -> None:
        """Stop the command (SIGINT now, SIGTERM later from wiring) or leave it, and quit."""
        if self.command is None or answer in (None, "cancel"):
            return
        if answer == "stop":
            self.command.stop()
        else:
            self.command.detach()
        self.exit()

    def action_detach(self) -> None:
        """Stop showing the attached trainers (under `gputop run`, while the command runs,
        this is the quit question: detaching from it means leaving it running)."""
        if self._command_running():
            self._ask_about_command()
            return
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
        row = self._table().selected
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

    def action_signal(self) -> None:
        """k / F9: ask which signal to send to the process under the cursor, or to its trainer
        with the workers; refused under --readonly and for processes that are not ours."""
        if self.signaller is None:
            self.notify(READ_ONLY, severity="warning", markup=False)
            return
        row = self._table().selected
        if row is None or self.frame is None:
            self.notify("no process under the cursor", markup=False)
            return
        targets = signal_targets(row, self.frame)
        chosen = targets.chosen()
        reason = foreign(chosen) or self.signaller.refusal([p.key for p in chosen])
        if reason is not None:
            self.notify(f"not signalled: {reason}", severity="error", markup=False)
            return
        self.push_screen(SignalPrompt(targets), self._signal_answered)

    def _signal_answered(self, choice: Choice | None) -> None:
        """Send the chosen signal and say what became of it."""
        if choice is None or self.signaller is None:
            return
        number, processes = choice
        name = next(name for _, name, signum in SIGNALS if signum == number)
        failed = foreign(processes) or self.signaller.send([p.key for p in processes], number)
        if failed is not None:
            self.notify(f"{name} not sent to all: {failed}", severity="error", markup=False)
        else:
            self.notify(f"{name} sent to {describe(processes)}", markup=False)

    def action_advice(self) -> None:
        """A: the advice whole and full width (the pane cuts it on small terminals)."""
        advice = self.shown_advice()
        if not advice:
            self.notify("no advice to show", markup=False)
            return
        self.push_screen(AdvicePage(advice, final=bool(self.final_advice)))

    def action_attach(self) -> None:
        """Attach to the trainer under the cursor if it runs the probe."""
        row = self._table().selected
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
        loop = self._loop
        if loop is None or threading.current_thread() is not threading.main_thread():
            return
        for sig, handler in ((signal.SIGHUP, self.hang_up), (signal.SIGTERM, self.exit)):
            with contextlib.suppress(RuntimeError, ValueError, NotImplementedError):
                loop.add_signal_handler(sig, handler)

    def hang_up(self) -> None:
        """The terminal is gone: leave the command running (its output goes to its log)."""
        if self.command is not None and self._command_running():
            self.command.detach()
        self.exit()
