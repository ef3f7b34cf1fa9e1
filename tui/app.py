"""RankvisorApp: the Textual app over a ``SupervisorHandle``, and ``make_app`` for tests.

Data flows one way. Engine threads call the ``EngineBridge`` (a sink); log batches and stats
wait in bounded per-rank buffers until the drain tick (about 15 Hz) folds them into the
``RunView`` in one go, and lifecycle events arrive as ``EngineEvent`` messages at once.
Commands flow the other way: a key becomes a ``Command`` that a thread worker hands to
``handle.execute``; the UI thread never waits on the engine, and this module never touches a
process itself.

Quitting while ranks run asks first. A run that goes on without its viewer (a supervisor
process, ``handle.detachable``) is left running on "detach" (``d`` detaches at once); on
"terminate", and always for a run inside this process, ``handle.shutdown()`` (terminate with
escalation, bounded wait) runs on a worker while the panes show the countdown.
``tui.run.run_tui`` prints the root-cause summary (or how to attach again) on the normal
terminal afterwards and returns the exit code.
"""

from __future__ import annotations

import gc
import weakref
from collections import deque
from datetime import timezone, tzinfo
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable

from textual import events, on, work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Input

from ..engine import clock as engine_clock
from ..engine.events import (
    AttemptStarted,
    RankInput,
    RankStateChanged,
    RunFinished,
    SupervisorNotice,
    TimerExpired,
)
from ..engine.handle import (
    Command,
    CommandResult,
    KillRanks,
    RestartAll,
    RestartRank,
    SignalRanks,
    SupervisorHandle,
    TerminateRanks,
)
from ..engine.logfile.follow import LAST_LINES_BYTES, FileFollower
from ..engine.names.signals import default_action, signal_name
from ..engine.output.safe_text import one_line
from ..engine.states import RankState
from .bridge import EngineBridge
from .clip import file_log_lines, plural, traceback_text
from .debug_keys import DebugKeys
from .messages import CommandFinished, EngineEvent, RankSelected, ZoomRequested
from .model import RankView, RunView
from .screens.confirm import ConfirmScreen, QuitScreen, RestartRankScreen
from .screens.errors import ErrorsScreen
from .screens.help import HelpScreen
from .screens.main import MainScreen
from .screens.notices import NoticesScreen
from .screens.signal_picker import SignalPicker, effect_words
from .thread_load import busy_seconds
from .widgets.notice_bar import Notice, NoticeBar

__all__ = ["RankvisorApp", "make_app"]

DRAIN_HZ = 15.0
THROTTLE_LOAD = 0.5
"""Above this UI-thread load, panes other than the selected one are drawn less often."""
SHOWN_AROUND = 64
"""Ranks either side of the selected one that count as shown (a screen of tiles at most)."""
THROTTLE_EVERY = 3
KEY_PRIORITY_S = 0.12
"""After a key press, panes other than the selected one wait this long to be redrawn."""
KEY_FRAME_WAIT_S = 0.5
"""The most drain ticks wait for the frame of a key (one that draws nothing holds them this
long)."""


_RANK_KEYS = frozenset({
    "terminate", "kill", "signal", "restart", "errors", "filtered", "timeline", "stacks",
    "terminate_all", "restart_all", "copy", "notices", "detach", "input", "prompts",
})
"""The app's one-letter keys: not offered while a person types into a text box."""


class _ShutdownDone(Message):
    """``handle.shutdown()`` returned on the worker thread."""



def _settle_heap() -> None:
    """Collect once, then freeze every object alive now (``gc.freeze``).

    Python's full collections walk every tracked object: the app's modules, classes,
    bindings and widgets are tens of thousands of them, alive for the whole session, and
    with ranks flooding their logs a full collection ran about once a second and held the
    UI thread for 100-300 ms (the tail of the key-to-screen latency). Frozen, they are
    never walked again; what was garbage is collected first, so nothing is kept that should
    not be.
    """
    gc.collect()
    gc.freeze()

class RankvisorApp(DebugKeys, App[int]):
    """Live panes of every rank, and keys that act on them through the handle.

    Args:
        handle: The supervisor: in this process, in a process of its own (``RemoteHandle``),
            a torchrun job's, or scripted.
        clock: Monotonic clock for countdowns and elapsed time (inject a fixed one in tests).
        drain_hz: How often buffered log lines are drawn.
        start_handle: Call ``handle.start()`` once mounted (on a worker thread, or on the UI
            thread when ``sync_start``: the scripted engine in tests, for deterministic frames).
        buffer_lines: Lines kept in memory per rank for the panes (the zoomed view reads disk).
        throttle: Draw unselected panes less often while the UI thread is overloaded.
    """

    CSS_PATH = Path(__file__).with_name("app.tcss")
    """Absolute, so that subclasses defined elsewhere (tests, benchmarks) find it too."""
    TITLE = "rankvisor"
    ENABLE_COMMAND_PALETTE = True

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("t", "terminate", "Term"),
        # Not on the footer (t escalates to SIGKILL by itself; ? lists K): at 80 columns
        # it left no room for i.
        Binding("K,shift+k", "kill", "Kill", show=False),
        Binding("s", "signal", "Signal"),
        Binding("r", "restart", "Restart"),
        Binding("e", "errors", "Errors"),
        Binding("f", "filtered", "Filtered"),
        Binding("a", "timeline", "Timeline", show=False),
        Binding("S,shift+s", "stacks", "Stacks", show=False),
        Binding("slash", "search", "Search", show=False),
        Binding("T,shift+t", "terminate_all", "Term all", show=False),
        Binding("R,shift+r", "restart_all", "Restart all", show=False),
        Binding("space", "toggle_follow", "Pause", show=False),
        Binding("c", "copy", "Copy", show=False),
        Binding("m", "notices", "Notices", show=False),
        # At 80 columns the footer has room for i, not p: the header names both whenever a
        # rank is at a prompt, and ? and q are always kept (``KeyFooter``).
        Binding("i", "input", "Input"),
        Binding("p", "prompts", "Prompts"),
        Binding("question_mark", "help", "Help"),
        Binding("d", "detach", "Detach", show=False),
        Binding("q", "request_quit", "Quit"),
        Binding("ctrl+q", "request_quit", "Quit", show=False, priority=True),
        Binding("ctrl+c", "request_quit", "Quit", show=False),
    ]

    def __init__(
        self,
        handle: SupervisorHandle,
        *,
        clock: Callable[[], float] = engine_clock.monotonic,
        drain_hz: float = DRAIN_HZ,
        start_handle: bool = True,
        sync_start: bool = False,
        buffer_lines: int = 5_000,
        cursor_blink: bool = True,
        time_zone: tzinfo | None = None,
        throttle: bool = True,
        freeze_heap: bool = False,
    ) -> None:
        super().__init__()
        self._freeze_heap = freeze_heap
        """Once the first screen is drawn, take what lives then out of the GC's full
        collections (``_settle_heap``); ``run`` asks for it, tests do not."""
        self.cursor_blink = cursor_blink
        """Off in tests and screenshots: a blinking cursor makes equal frames differ."""
        self.time_zone = time_zone
        """Zone of the times shown (None: local); tests fix it so snapshots match anywhere."""
        self.handle = handle
        self.clock = clock
        # Lines beyond what a pane keeps would be evicted from its ring at once: the bridge
        # need not hold them (the files keep every byte).
        self.bridge = EngineBridge(max_pending_lines=max(buffer_lines, 1))
        # The run as of the first event the bridge gets: nothing between the two is lost,
        # and a viewer attaching late replays the run's history on top of it.
        info, self._unsubscribe = handle.watch(self.bridge)
        self.run_view = RunView(info, buffer_lines=buffer_lines)
        self.follower = FileFollower()
        """Reads the newest lines of files that flood faster than their events come."""
        self._to_look: set[int] = set()
        """Ranks with output since the follower last looked at their files (a quiet rank's
        files are never looked at: an idle viewer costs no syscall a tick)."""
        self._following: set[int] = set()
        """Ranks whose files grew at the last look (looked at again at the next tick)."""
        self._told_follow: dict[int, tuple[int, int]] = {}
        """rank -> the incarnation whose files the handle was told this viewer follows."""
        for view in self.run_view.ranks:
            view.restart_clock(clock())  # quiet since we started watching
        self._drain_hz = drain_hz
        self._start_handle = start_handle
        self._sync_start = sync_start
        self._started_at = clock()
        if info.started_at:
            # Attached to a run that was going already: its elapsed time, not ours.
            self._started_at -= max(0.0, engine_clock.wall() - info.started_at)
        self._paused = False
        self._status = ""
        self._last_second = -1
        self._ticks = 0
        self._dirty: set[int] = set()
        """Ranks with lines not drawn yet (throttled panes catch up on a later tick)."""
        self._load_mark: tuple[float, float] | None = None
        self._throttle = throttle
        self._last_key = 0.0
        self.ui_load = 0.0
        """Share of wall time the UI thread spent working or waiting for a CPU to work on,
        smoothed over about a second (``thread_load``)."""
        self._frame_wanted = 0.0
        """When a key came (or the selection moved) with no frame drawn since (0: none)."""
        self.shutting_down = False
        self.exiting = False
        """True once ``exit`` was called: keys are no longer the app's to act on."""
        self.detached = False
        """True once the viewer let go of a run that goes on without it."""
        self.shut_down = False
        """True once ``handle.shutdown()`` returned (run_tui calls it if the app did not)."""
        self.selected = 0
        self.notices: deque[Notice] = deque(maxlen=50)
        """Recent notices, oldest first: the notice line shows the last, ``m`` lists them."""
        self._notice_bars: weakref.WeakKeyDictionary[Screen[Any], NoticeBar] = (
            weakref.WeakKeyDictionary()
        )
        self._finished_at: float | None = None
        """The app's clock when the run finished: the elapsed time stops there."""
        self.main_screen = MainScreen(self.run_view)

    # -- set-up ----------------------------------------------------------------------------

    def exit(self, *args: Any, **kwargs: Any) -> None:
        """Textual's exit; from here on keys are dropped (``on_event``)."""
        self.exiting = True
        super().exit(*args, **kwargs)

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key):
            if self.exiting:
                # Pressed while the app quits (q then e, in one read of the terminal): a
                # view pushed now would be mounted on screens being torn down.
                return
            self._last_key = engine_clock.monotonic()
            # No drain tick before the key's frame; held first, as the frame may be drawn
            # before the forwarding returns (``frame_now``), which releases the hold.
            self.hold_ticks_for_frame()
            await super().on_event(event)
            return
        await super().on_event(event)

    def get_default_screen(self) -> Screen[Any]:
        return self.main_screen

    def on_mount(self) -> None:
        self.bridge.attach(self)
        if self._freeze_heap:
            self.call_after_refresh(_settle_heap)
        self.screen_change_signal.subscribe(self, self._screen_changed)
        self.set_interval(1 / self._drain_hz, self._tick, name="drain")
        if self._start_handle:
            if self._sync_start:
                self.handle.start()
                self.run_view.merge_paths(self.handle.snapshot())
            else:
                self._start_worker()
        if self.main_screen.ready:
            self._tick()

    @work(thread=True, group="engine", exit_on_error=False, description="start ranks")
    def _start_worker(self) -> None:
        self.handle.start()
        self._snapshot_worker()

    @work(thread=True, group="snapshot", exit_on_error=False, description="snapshot")
    def _snapshot_worker(self) -> None:
        """Fetch the run's paths off the UI thread (a remote handle may take a while)."""
        info = self.handle.snapshot()
        self.call_from_thread(self.run_view.merge_paths, info)

    def on_unmount(self) -> None:
        self.bridge.detach()
        self._unsubscribe()

    # -- data in ---------------------------------------------------------------------------

    def _drain(
        self, upto: int | None = None, *, due: Callable[[int], bool] | None = None
    ) -> set[int]:
        """Fold buffered output and stats into the model; returns the ranks that changed.
        ``due``: the ranks whose files are looked at now (None: all; ``_follow_files``)."""
        drained = self.bridge.drain(upto)
        if not drained:
            # The follower's reads come in whether or not events did.
            return self._follow_files(due) if upto is None else set()
        run = self.run_view
        changed: set[int] = set()
        for rank, count in drained.skipped.items():
            if run.lines_not_drawn(rank, f"… {plural(count, 'line')} not drawn "
                                   "(the UI fell behind; all are on disk: enter)"):
                changed.add(rank)
        now = self.clock()
        for output in drained.outputs:
            if isinstance(output, RankInput):
                changed |= run.apply(output)  # a typed line, in order with the output
                continue
            if run.add_output(output):
                changed.add(output.rank)
                self._to_look.add(output.rank)
                run.ranks[output.rank].saw_output(now)
        for stats in drained.stats:
            changed |= run.apply(stats)
        if drained.filtered:
            refresh = getattr(self.screen, "on_filtered_lines", None)
            if callable(refresh):
                refresh(drained.filtered)
        if upto is None:
            changed |= self._follow_files(due)
        return changed

    def _follow_files(self, due: Callable[[int], bool] | None = None) -> set[int]:
        """Draw the newest lines of the files that flood faster than their events come
        (``engine.logfile.follow``): a look (a ``stat``, and a bounded read of a file that
        floods or is followed) at the files of the ranks that got output or whose files
        grew at the last look, so that a pane is never more than a frame behind its file."""
        run = self.run_view
        shown: set[int] = set()
        growing: set[int] = set()
        # The ranks with output since the last look (some came before a lifecycle event,
        # drained then), and those whose files grew at the last look.
        looks, self._to_look = self._to_look, set()
        # In the tiles' layout a rank's rows show only once it is selected: the others are
        # shown by their last line (a pane's read of each of 64 files a frame was most of
        # the drain tick). Selected, a rank's next read is a pane's.
        tiles = self.main_screen.mode != "grid"
        later: set[int] = set()
        for rank in sorted(looks | self._following):
            if not 0 <= rank < len(run.ranks):
                continue
            if due is not None and not due(rank):
                later.add(rank)  # not drawn this tick: looked at when it is
                continue
            view = run.ranks[rank]
            follow = run.following_file(rank)
            most = LAST_LINES_BYTES if tiles and rank != self.selected else None
            for kind, path in (("stdout", view.stdout_path), ("stderr", view.stderr_path)):
                tail = self.follower.look((rank, kind), path, follow=follow, max_bytes=most,
                                          after=run.shown_offset(rank, kind))
                if tail is None:
                    continue
                growing.add(rank)
                if run.add_file_tail(rank, kind, path, tail.lines, tail.partial, gap=tail.gap):
                    shown.add(rank)
            if run.following_file(rank):
                self._tell_following(view)
        self._following = growing | later
        return shown

    def _drawn_this_tick(self, tick: int) -> Callable[[int], bool]:
        """Under load, which ranks this tick draws (the selected one, a third of the panes,
        or every tile each third tick): the others' files wait for their turn, since a read
        of each of 64 files every tick was a fifth of the UI thread for tiles drawn every
        third."""
        selected = self.selected
        if self.main_screen.mode == "grid":
            return lambda rank: rank == selected or (rank + tick) % THROTTLE_EVERY == 0
        beat = tick % THROTTLE_EVERY == 0
        return lambda rank: beat or rank == selected

    def _tell_following(self, view: RankView) -> None:
        """A pane that shows its rank from the files needs none of its line events: tell
        the handle once an incarnation (``RemoteHandle.follow_files``: the supervisor then
        stops encoding and sending them; a handle without it goes on as before)."""
        incarnation = (view.attempt, view.restart_count)
        if self._told_follow.get(view.rank) == incarnation:
            return
        self._told_follow[view.rank] = incarnation
        follow = getattr(self.handle, "follow_files", None)
        if callable(follow):
            follow(view.rank, *incarnation)

    def _tick(self) -> None:
        """The drain tick: draw what arrived since the last one.

        Under a flood the UI thread would spend all its time redrawing panes nobody can read
        at that speed, and keys would wait behind the frames. So when the UI thread was busy
        more than half the time, panes other than the selected one are redrawn every third
        tick only (about 5 Hz, still within 250 ms of the files; a third of them on each
        tick); their lines are buffered meanwhile, nothing is lost, and their files are read
        on their turn. The tiles (every rank's last line in one widget, redrawn whole) follow
        the same beat: every third tick. A key's frame comes before any tick."""
        if self._frame_wanted and engine_clock.monotonic() - self._frame_wanted < KEY_FRAME_WAIT_S:
            return  # a key's frame first: this tick's drain and redraw would come before it
        self._ticks += 1
        busy, wall = busy_seconds(), engine_clock.monotonic()
        if self._load_mark is not None:
            spent = busy - self._load_mark[0]
            elapsed = max(1e-6, wall - self._load_mark[1])
            self.ui_load = 0.8 * self.ui_load + 0.2 * min(1.0, spent / elapsed)
        self._load_mark = (busy, wall)
        throttled = self._throttle and self.ui_load > THROTTLE_LOAD
        self._dirty |= self._drain(due=self._drawn_this_tick(self._ticks) if throttled else None)
        now = self.clock()
        second = int(now - self._started_at)
        tiles = True
        if self._throttle and engine_clock.monotonic() - self._last_key < KEY_PRIORITY_S:
            # A key was just pressed: draw its effect first, the other panes right after.
            changed = self._dirty & {self.selected}
            tiles = False  # the key's own frame redraws them
        elif throttled:
            # A third of the panes each tick, in turn, so that frames stay evenly cheap.
            tick = self._ticks
            changed = {
                r for r in self._dirty if r == self.selected or (r + tick) % THROTTLE_EVERY == 0
            }
            tiles = tick % THROTTLE_EVERY == 0
        else:
            changed = set(self._dirty)
        if changed or second != self._last_second or self._any_countdown():
            if second != self._last_second:
                self._tell_shown()
                tiles = True  # their clocks and CPU figures, at least once a second
            self._last_second = second
            self._dirty -= changed
            self._show(changed, now, tiles=tiles)

    def hold_ticks_for_frame(self) -> None:
        """A key came (or the selection moved): no drain tick until the screen has drawn
        a frame since. Under a flood a tick (a drain, a read of the files, a redraw) that
        ran between a key and its frame made the key wait for both."""
        self._frame_wanted = engine_clock.monotonic()

    def _display(self, screen: Screen[Any], renderable: Any) -> None:
        # Textual's one door to the terminal: a frame was drawn (the held ticks may run).
        # A callback after the refresh cannot say it: it may run before the widgets that
        # the key changed have asked for their repaint.
        super()._display(screen, renderable)
        if renderable is not None:
            self._frame_wanted = 0.0

    def _tell_shown(self) -> None:
        """A handle of every node's ranks connects only the nodes whose ranks are shown
        (``ClusterHandle.show``): once a second, the ranks around the selected one."""
        show = getattr(self.handle, "show", None)
        if show is not None:
            low = max(0, self.selected - SHOWN_AROUND)
            show(range(low, min(len(self.run_view.ranks), self.selected + SHOWN_AROUND + 1)))

    def _any_countdown(self) -> bool:
        return any(view.escalation_deadline is not None for view in self.run_view.ranks)

    def _show(
        self, changed: set[int] | None, now: float | None = None, *, tiles: bool = True
    ) -> None:
        if not self.main_screen.ready:
            return
        now = self.clock() if now is None else now
        root = self.run_view.root_cause()
        silent = getattr(self.handle, "silent_s", None)  # a supervisor over its socket
        if callable(silent):
            self.run_view.supervisor_silent_s = silent()
        self.run_view.update_progress(now)
        try:
            with self.batch_update():
                self.main_screen.show_ranks(changed, now, root, tiles=tiles)
                self.main_screen.show_summary(**self.summary_args(now))
                for screen in self.screen_stack:
                    if screen is not self.main_screen:
                        update = getattr(screen, "on_run_changed", None)
                        if callable(update):
                            update(changed)
        except NoMatches:
            # Only while the app closes: its widgets are removed under the last ticks.
            self.log.warning("a widget was gone while drawing (closing?)")

    def summary_args(self, now: float | None = None) -> dict[str, Any]:
        """What every screen's RunSummary bar needs besides the run."""
        now = self.clock() if now is None else now
        if self.run_view.finished:
            if self._finished_at is None:  # finished before we saw it happen
                self._finished_at = self._run_end(now)
            now = self._finished_at  # the run is over: its clock stops
        status = self._status
        if not status and self.run_view.not_answering:
            status = (f"supervisor not answering ({self.run_view.supervisor_silent_s:.0f} s): "
                      "ranks as they were, not judged")
        return {"elapsed": now - self._started_at, "paused": self._paused, "status": status}

    def _run_end(self, now: float | None = None) -> float:
        """The app's clock at the run's end: its last rank exit, not when this viewer heard
        of it (a viewer attached to a finished run would count its own time)."""
        now = self.clock() if now is None else now
        ended, started = self.run_view.ended_at, self.run_view.started_at
        if ended is None or not started or ended < started:
            return now  # the run's start is not known: both ends are this viewer's
        return max(self._started_at, now - max(0.0, engine_clock.wall() - ended))

    def on_engine_event(self, message: EngineEvent) -> None:
        changed = self._drain(upto=message.seq)
        event = message.event
        changed |= self.run_view.apply(event)
        if isinstance(event, SupervisorNotice):
            self.notify(event.message, severity=event.severity, timeout=6)
        elif isinstance(event, TimerExpired):
            self.notify(
                f"watchdog: rank {event.rank} overran {event.scope!r} and was killed",
                severity="warning",
            )
        elif isinstance(event, RunFinished):
            self.close_input_of_ended(None)
            self._finished_at = self._run_end()
            root = self.run_view.root_cause()
            if root is None and self.run_view.exit_code() == 0:
                self.notify("all ranks finished successfully", timeout=6)
            elif root is not None:
                self.notify(
                    f"run finished: rank {root} failed first (e: errors)",
                    severity="error",
                    timeout=8,
                )
            else:  # every rank that ended badly was stopped by rankvisor (stop, quit)
                self.notify("run finished: stopped by rankvisor, no rank failed",
                            severity="warning")
        elif isinstance(event, AttemptStarted):
            # The last notice spoke of the attempt before (its failure): not of this one.
            self.notify(f"attempt {event.attempt} started: every rank anew")
            self._finished_at = None
            self._snapshot_worker()  # a new attempt writes new (filtered) files
        elif isinstance(event, RankStateChanged) and event.new.is_final:
            self.close_input_of_ended(event.rank)
        elif isinstance(event, RankStateChanged) and event.new is RankState.STARTING:
            self.run_view.ranks[event.rank].restart_clock(self.clock())
            self._paused_sync()
        self._show(changed)

    # -- notices ---------------------------------------------------------------------------

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """Keep the notice and show it on the notice line, never as a toast over a log.

        ``timeout`` and ``markup`` are accepted for Textual's callers and not used: the line
        keeps the newest notice until the next one, and shows text as it is."""
        if title:
            message = f"{title}: {message}"
        # A notice of several lines (--debugpy's ports, launch.json, ssh -L) is one notice
        # a line, not one line joined by marks; ``m`` lists them all.
        for part in [p for p in message.splitlines() if p.strip()] or [message]:
            # Notices come from a supervisor, a record replayed, a remote node: no escape.
            self.notices.append(Notice(one_line(part, 2000), severity, engine_clock.wall()))
        self._show_notice()

    def _show_notice(self) -> None:
        newest = self.notices[-1] if self.notices else None
        for screen in self.screen_stack:
            bar = self._notice_bar(screen)
            if bar is not None:
                bar.show_notice(newest, len(self.notices))

    def _screen_changed(self, screen: Screen[Any]) -> None:
        """A view just came up: give it the notice line once it is composed."""
        if not isinstance(screen, ModalScreen) and screen not in self._notice_bars:
            screen.call_after_refresh(self._show_notice)

    def _notice_bar(self, screen: Screen[Any]) -> NoticeBar | None:
        """The notice line of ``screen``; one is added above the footer of a full screen
        that was built without it (the log views), none on dialogs."""
        bar = self._notice_bars.get(screen)
        if bar is not None or isinstance(screen, ModalScreen) or not screen.is_mounted:
            return bar
        found = list(screen.query(NoticeBar))
        if found:
            bar = found[0]
        else:
            footers = list(screen.query(Footer))
            if not footers:
                return None
            bar = NoticeBar()
            screen.mount(bar, before=footers[0])
        self._notice_bars[screen] = bar
        return bar

    # -- copy out ----------------------------------------------------------------------------

    def action_copy(self) -> None:
        """Copy to the terminal's clipboard (OSC 52: works over SSH and in tmux): the text
        selected with the mouse if any; else on the error view the root cause's traceback,
        on a log view the lines in sight, on the grid the selected rank's visible lines."""
        text, what = self._copy_source()
        if not text:
            self.notify(f"nothing to copy ({what})", severity="warning")
            return
        self.copy_to_clipboard(text)
        # OSC 52 asks the terminal; nothing says whether it (or tmux: `set -g set-clipboard
        # on`) took it. Say what was sent, not that it arrived.
        self.notify(f"sent {what} to the terminal's clipboard (OSC 52)")

    def _copy_source(self) -> tuple[str, str]:
        """The text to copy and how to say what it is."""
        screen = self.screen
        selected = screen.get_selected_text()
        if selected:
            count = len(selected.splitlines())
            return selected, f"the selection ({plural(count, 'line')})"
        if isinstance(screen, ErrorsScreen):
            return traceback_text(self.run_view)
        lines: list[str] = []
        if screen is self.main_screen:
            lines = self.main_screen.visible_lines()
            return "\n".join(lines), f"{plural(len(lines), 'line')} of rank {self.selected}"
        from .widgets.file_log import FileLog

        for log in screen.query(FileLog):
            if log.display:  # the zoom keeps its other views mounted but hidden
                lines.extend(file_log_lines(log))
        zoomed = getattr(screen, "rank", None)
        whose = f" of rank {zoomed}" if isinstance(zoomed, int) else ""
        return "\n".join(lines), f"{plural(len(lines), 'line')}{whose}"

    def action_notices(self) -> None:
        """List the recent notices (the notice line shows only the newest)."""
        if not isinstance(self.screen, NoticesScreen):
            self.push_screen(NoticesScreen(list(self.notices), self.time_zone))

    def _paused_sync(self) -> None:
        if self._paused:
            self.main_screen.set_paused(True)

    def absorb_pending(self) -> None:
        """After the app stopped: fold what is still buffered, for the printed summary."""
        self._drain()
        for message in self.bridge.take_early():
            self.run_view.apply(message.event)

    # -- commands out ----------------------------------------------------------------------

    def run_command(self, command: Command) -> None:
        """Hand ``command`` to the engine on a worker thread; refusals become notifications."""
        self._command_worker(command)

    @work(thread=True, group="commands", exit_on_error=False, description="engine command")
    def _command_worker(self, command: Command) -> None:
        try:
            result = self.handle.execute(command)
        except Exception as error:  # a bug in a handle must not take the UI down
            result = CommandResult(False, f"{type(error).__name__}: {error}")
        self.post_message(CommandFinished(command, result))

    def on_command_finished(self, message: CommandFinished) -> None:
        if not message.result.ok:
            self.notify(message.result.message or "refused", severity="warning", timeout=5)
        elif message.result.message:
            self.notify(message.result.message, timeout=3)

    # -- selection -------------------------------------------------------------------------

    def on_rank_selected(self, message: RankSelected) -> None:
        self.selected = message.rank

    def on_zoom_requested(self, message: ZoomRequested) -> None:
        self.selected = message.rank
        self.action_zoom()

    def _target(self) -> int:
        """The rank keys act on: the zoomed one on the zoom screen, else the selected one."""
        rank = getattr(self.screen, "rank", None)
        return rank if isinstance(rank, int) else self.selected

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # A dialog is up: its own keys only (a stray 't' must not terminate anything).
        if isinstance(self.screen, ModalScreen) and action not in ("request_quit",):
            return False
        if isinstance(self.focused, Input) and action in _RANK_KEYS:
            # Typing (the input line, a search): a key is a character, and the footer
            # must not offer a rank's key (shift+k would read as "Kill").
            return False
        if action in ("terminate", "kill", "signal", "restart", "terminate_all", "restart_all"):
            if self.shutting_down:
                return False
        return True

    # -- actions ---------------------------------------------------------------------------

    def action_terminate(self) -> None:
        """SIGTERM the selected rank; SIGKILL follows after the term timeout."""
        self.run_command(TerminateRanks((self._target(),)))

    def action_kill(self) -> None:
        """SIGKILL the selected rank now."""
        self.run_command(KillRanks((self._target(),)))

    def action_signal(self) -> None:
        """Pick a signal for the selected rank (not for one that has ended: say so instead)."""
        rank = self._target()
        view = self.run_view.ranks[rank] if 0 <= rank < len(self.run_view.ranks) else None
        if view is not None and not view.state.is_alive:
            self.notify(f"rank {rank} is not running ({view.state.value}): no signal to send",
                        severity="warning")
            return

        def send(sig: int | None) -> None:
            if sig is None:
                return
            if default_action(sig) in ("continue", "ignore"):
                self.run_command(SignalRanks((rank,), sig))
                return
            # Most ranks install no handler: say what the signal does to one that has none.
            name = signal_name(sig)
            then = (
                "Its peers may time out waiting for it."
                if default_action(sig) == "stop"
                else "A rank that fails can take the whole job down."
            )
            self._confirm(
                f"Send {name} to rank {rank}?",
                f"{name} {effect_words(sig, f'rank {rank}')} unless the rank installed a "
                f"handler for it (most have none). {then}",
                lambda: self.run_command(SignalRanks((rank,), sig)),
            )

        self.push_screen(SignalPicker(rank), send)

    def action_restart(self) -> None:
        """Restart the selected rank (its earlier logs are kept).

        With more than one rank, ask first: ranks of a torch.distributed job usually fail
        when one of them restarts alone, so the dialog offers restarting them all instead,
        as its default once a rank's output showed a process group (rankvisor sets
        MASTER_ADDR and WORLD_SIZE for every rank: that alone does not tell).
        """
        if self._restarts_refused():
            return
        rank = self._target()
        nprocs = len(self.run_view.ranks)
        if nprocs <= 1:
            self.run_command(RestartRank(rank))
            return

        def answered(choice: str | None) -> None:
            if choice == "rank":
                self.run_command(RestartRank(rank))
            elif choice == "all":
                self.run_command(RestartAll())

        self.push_screen(
            RestartRankScreen(rank, nprocs, self.run_view.attempt + 1, self.run_view.distributed),
            answered,
        )

    def action_terminate_all(self) -> None:
        alive = len(self.run_view.alive)
        if not alive:  # a question whose yes does nothing: say so instead
            self.notify("no rank is running: nothing to terminate", severity="warning")
            return
        timeout = self.run_view.term_timeout_s
        self._confirm(
            "Terminate all ranks?",
            f"SIGTERM to {alive} running rank(s), SIGKILL after {timeout:g}s for any still alive.",
            lambda: self.run_command(TerminateRanks(None)),
        )

    def _restarts_refused(self) -> bool:
        """The handle never restarts (attached to torchrun's job): say why, offer nothing
        (a dialog whose answer is then refused only wastes the person's time)."""
        refused = getattr(self.handle, "restarts_refused", "")
        if refused:
            self.notify(f"no restart here: {refused}", severity="warning")
        return bool(refused)

    def action_restart_all(self) -> None:
        if self._restarts_refused():
            return
        self._confirm(
            "Restart all ranks?",
            f"Stop every rank and start attempt {self.run_view.attempt + 1}. "
            "Logs of earlier attempts stay on disk.",
            lambda: self.run_command(RestartAll()),
        )

    def _confirm(self, title: str, question: str, then: Callable[[], None]) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                then()

        self.push_screen(ConfirmScreen(title, question), answered)

    def action_zoom(self) -> None:
        from .screens.zoom import ZoomScreen

        if isinstance(self.screen, ZoomScreen):
            return
        self.push_screen(ZoomScreen(self.run_view, self.selected))

    def action_filtered(self) -> None:
        from .screens.filtered import FilteredScreen

        if not isinstance(self.screen, FilteredScreen):
            self._push_view(FilteredScreen(self.run_view))

    def action_timeline(self) -> None:
        from .screens.timeline import TimelineScreen

        if not isinstance(self.screen, TimelineScreen):
            self._push_view(TimelineScreen(self.run_view, tz=self.time_zone))

    def action_errors(self) -> None:
        if not isinstance(self.screen, ErrorsScreen):
            self._push_view(ErrorsScreen(self.run_view))

    def action_stacks(self) -> None:
        """Dump and merge every running rank's stack (a read-only viewer: nonblocking)."""
        from .screens.stacks import StacksScreen

        if isinstance(self.screen, StacksScreen):
            self.screen.action_dump()
            return
        nonblocking = bool(getattr(self.handle, "read_only", False))
        self._push_view(StacksScreen(self.run_view, nonblocking=nonblocking))

    def _push_view(self, screen: Screen[Any]) -> None:
        # Views replace each other instead of piling up: escape always returns to the grid.
        while len(self.screen_stack) > 1 and not isinstance(self.screen, ModalScreen):
            self.pop_screen()
        self.push_screen(screen)

    def action_search(self) -> None:
        """Search the zoomed rank's log (zooms first from the grid)."""
        from .screens.zoom import ZoomScreen

        if not isinstance(self.screen, ZoomScreen):
            self.action_zoom()
        self.call_after_refresh(lambda: self.screen.run_action("start_search"))

    def action_toggle_follow(self) -> None:
        handler = getattr(self.screen, "action_toggle_follow", None)
        if self.screen is not self.main_screen and callable(handler):
            handler()
            return
        self._paused = not self._paused
        self.main_screen.set_paused(self._paused)
        self._show(None)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_request_quit(self) -> None:
        """Quit; while ranks run, ask, then terminate them with escalation first."""
        if self.shutting_down:
            if self.run_view.alive:
                self._confirm(
                    "Kill all now?",
                    "Shutdown is waiting for ranks to exit after SIGTERM. SIGKILL them now?",
                    lambda: self.run_command(KillRanks(None)),
                )
            return
        alive = len(self.run_view.alive)
        if self.handle.detachable:
            if not alive:
                self.action_detach()  # nothing to stop; the run's files stay the record
                return

            def answered(choice: str | None) -> None:
                if choice == "detach":
                    self.action_detach()
                elif choice == "terminate":
                    self._begin_shutdown()

            self.push_screen(QuitScreen(alive, self.run_view.term_timeout_s), answered)
            return
        if not alive:
            self._begin_shutdown()
            return
        timeout = self.run_view.term_timeout_s
        self._confirm(
            "Quit rankvisor?",
            f"{alive} rank(s) still running. They will get SIGTERM, and SIGKILL after "
            f"{timeout:g}s if still alive.",
            self._begin_shutdown,
        )

    def action_detach(self) -> None:
        """Let go of the run and quit the viewer; the ranks go on (where they can)."""
        if not self.handle.detachable:
            self.notify(
                "this run lives inside this viewer (--foreground): quitting ends it; "
                "runs started without --foreground can be detached",
                severity="warning",
            )
            return
        if self.shutting_down:
            return
        self.handle.detach()
        if self.run_view.finished:
            # Nothing goes on without us: quit as a finished run does, with its summary.
            self.exit(self.run_view.exit_code())
            return
        self.detached = True
        self.exit(0)

    def _begin_shutdown(self) -> None:
        self.shutting_down = True
        self._status = "shutting down" if self.run_view.alive else "closing"
        self._show(None)
        self._shutdown_worker()

    @work(thread=True, group="shutdown", exclusive=True, exit_on_error=False)
    def _shutdown_worker(self) -> None:
        try:
            self.handle.shutdown()
        finally:
            self.shut_down = True
            # A message, not call_from_thread: it queues behind the engine events posted
            # during the shutdown, so the model is complete when the app exits.
            self.post_message(_ShutdownDone())

    @on(_ShutdownDone)
    def _shutdown_done(self) -> None:
        self._drain()
        self.exit(self.run_view.exit_code())

    # -- command palette -------------------------------------------------------------------

    async def action_quit(self) -> None:
        """Textual's own quit (its palette entry, a binding elsewhere) asks first as well."""
        self.action_request_quit()

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        for command in super().get_system_commands(screen):
            # Textual's "Quit" would end the app without asking; ours is below.
            if command.title != "Quit":
                yield command
        commands: list[tuple[str, str, Callable[[], Any]]] = [
            ("Zoom selected rank", "Full log of the selected rank from disk", self.action_zoom),
            (
                "SIGTERM selected rank",
                "Escalates to SIGKILL after the term timeout",
                self.action_terminate,
            ),
            ("SIGKILL selected rank", "Kill the selected rank now", self.action_kill),
            (
                "Send signal to selected rank",
                "Labelled by what each does to a rank without a handler; asks before a lethal one",
                self.action_signal,
            ),
            ("Restart selected rank", "Earlier logs are kept", self.action_restart),
            (
                "Terminate all ranks",
                "SIGTERM, then SIGKILL after the timeout (asks first)",
                self.action_terminate_all,
            ),
            ("Restart all ranks", "A new attempt (asks first)", self.action_restart_all),
            ("Error view", "Tracebacks of failed ranks, root cause first", self.action_errors),
            ("Filtered view", "filtered_stdout.log / filtered_stderr.log", self.action_filtered),
            ("Search the zoomed log", "Plain text; n / N for next / previous", self.action_search),
            ("Pause / resume following", "Hold the panes still to read", self.action_toggle_follow),
            (
                "Copy to the clipboard",
                "Selection, visible lines of the rank, or the root cause's traceback (OSC 52)",
                self.action_copy,
            ),
            ("Recent notices", "Every recent notice, newest first", self.action_notices),
            (
                "Toggle grid / list layout",
                "Panes for every rank, or tiles beside one pane",
                lambda: self.main_screen.action_toggle_layout(),
            ),
            *self.debug_commands(),
            ("Help: keys", "Every key of rankvisor", self.action_help),
            ("Quit rankvisor", "Asks first while ranks run", self.action_request_quit),
        ]
        for title, help_text, callback in commands:
            yield SystemCommand(title, help_text, callback)


def make_app(
    handle: SupervisorHandle,
    *,
    clock: Callable[[], float] | None = None,
    **kwargs: Any,
) -> RankvisorApp:
    """The app as tests build it: synchronous start and a fixed clock unless told otherwise,
    so a snapshot shows the same frame on every run."""
    kwargs.setdefault("sync_start", True)
    kwargs.setdefault("cursor_blink", False)
    kwargs.setdefault("time_zone", timezone.utc)
    kwargs.setdefault("throttle", False)  # load-dependent drawing would make tests flaky
    return RankvisorApp(handle, clock=clock or (lambda: 1000.0), **kwargs)
