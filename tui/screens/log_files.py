"""LogFilesScreen: shared by the zoomed view and the filtered view.

Shows a stdout file and a stderr file from disk (one of them, or both: ``o``), live, with
search: ``/`` opens the search bar, enter finds the first match after the top of the view,
``n`` / ``N`` go to the next / previous one. A pattern is plain text, or a regular expression
when written ``/like this/``; it is case-insensitive unless it has a capital. The search
covers everything shown: in "both" mode both streams (when the screen merges them into one
log in arrival order, as the zoom does, or in the other stacked log after the active one).
It runs in the log store on a worker thread and is cancelled when a new one starts or the
screen closes; matches on screen are highlighted as they are drawn. ``w`` wraps long lines
(on by default where tracebacks are: stderr and the merged log).
"""

from __future__ import annotations

import re
import threading
from typing import Callable, Final, Literal, Sequence

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Input

from ..widgets.file_log import FileLog
from ..widgets.key_footer import KeyFooter
from ..widgets.text_bar import TextBar

__all__ = ["LogFilesScreen", "Streams", "parse_pattern"]

Streams = Literal["stdout", "stderr", "both"]
_NEXT: Final[dict[str, Streams]] = {"stdout": "stderr", "stderr": "both", "both": "stdout"}
POLL_S: Final = 0.25
"""How often the files are checked for new lines while the screen is shown."""


def parse_pattern(raw: str) -> tuple[str, bool, bool, re.Pattern[str]] | None:
    """``raw`` -> (pattern, regex, case_sensitive, compiled) or None if empty or invalid."""
    regex = len(raw) >= 2 and raw.startswith("/") and raw.endswith("/")
    pattern = raw[1:-1] if regex else raw
    if not pattern:
        return None
    case_sensitive = any(ch.isupper() for ch in pattern)
    flags = 0 if case_sensitive else re.IGNORECASE
    try:
        compiled = re.compile(pattern if regex else re.escape(pattern), flags)
    except re.error:
        return None
    return pattern, regex, case_sensitive, compiled


class LogFilesScreen(Screen[None]):
    """Base: subclasses say which files (``paths``) and what the title line says."""

    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("slash", "start_search", "Search"),
        Binding("n", "find(False)", "Next"),
        Binding("N", "find(True)", "Prev"),
        Binding("o", "cycle_streams", "Streams"),
        Binding("w", "toggle_wrap", "Wrap"),
        Binding("tab", "focus_next", "Switch", show=False),
    ]

    AUTO_FOCUS = None
    """Focus goes to a log once mounted, never to the (hidden) search bar."""

    streams: reactive[Streams] = reactive("stdout", init=False)

    def __init__(self, streams: Streams = "stdout") -> None:
        super().__init__()
        self.set_reactive(LogFilesScreen.streams, streams)
        self._search: tuple[str, bool, bool, re.Pattern[str]] | None = None
        self._raw_pattern = ""
        self._cancel: threading.Event | None = None
        self.status = ""

    # -- what subclasses provide -----------------------------------------------------------

    def paths(self) -> tuple[tuple[str, str], tuple[str, str]]:
        """((stdout path, label), (stderr path, label))."""
        raise NotImplementedError

    def title_text(self) -> Text:
        raise NotImplementedError

    def typed_lines(self) -> Callable[[], Sequence[tuple[float, str]]] | None:
        """The lines typed to the rank shown merged (time sent, text), or None."""
        return None

    def merged_paths(self) -> tuple[str, str, str] | None:
        """(stdout path, stderr path, label) to show merged in arrival order in "both" mode,
        or None: show the two logs stacked."""
        return None

    # -- layout ----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield TextBar(id="view-title")
        yield Vertical(id="logs")
        search = Input(
            placeholder="search: text, or /regex/ · enter find · escape close", id="search"
        )
        search.display = False
        yield search
        yield KeyFooter()

    async def on_mount(self) -> None:
        search = self.query_one("#search", Input)
        search.cursor_blink = bool(getattr(self.app, "cursor_blink", True))
        await self.mount_logs()
        self.set_interval(POLL_S, self.poll, name="poll files")
        self.update_title()

    async def mount_logs(self) -> None:
        """(Re)create the two FileLogs for the current paths."""
        box = self.query_one("#logs", Vertical)
        await box.remove_children()
        (out_path, out_label), (err_path, err_label) = self.paths()
        logs = [
            FileLog(out_path, label=out_label, id="stdout-log"),
            FileLog(err_path, label=err_label, stream="stderr", wrap=True, id="stderr-log"),
        ]
        merged = self.merged_paths()
        if merged is not None:
            out, err, label = merged
            logs.append(FileLog("", label=label, merged=(out, err), wrap=True,
                                typed=self.typed_lines(), id="both-log"))
        for log in logs:
            # Before mounting: a hidden log reads nothing (a GB file is indexed once, by the
            # log that shows it, when it is first shown).
            log.display = self._wanted(log.id, merged is not None)
        await box.mount(*logs)
        self._apply_streams()
        if self._search is not None:
            for log in self.logs():
                log.set_highlight(self._search[3])

    def logs(self) -> list[FileLog]:
        return list(self.query(FileLog).results(FileLog))

    def visible_logs(self) -> list[FileLog]:
        return [log for log in self.logs() if log.display]

    def active_log(self) -> FileLog | None:
        focused = self.focused
        if isinstance(focused, FileLog) and focused.display:
            return focused
        visible = self.visible_logs()
        return visible[0] if visible else None

    def _apply_streams(self) -> None:
        merged = bool(self.query("#both-log"))
        for log in self.logs():
            log.display = self._wanted(log.id, merged)
            if log.display and log.is_mounted:
                log.poll()
        visible = self.visible_logs()
        if visible and not self.query_one("#search", Input).display:
            visible[0].focus()

    def _wanted(self, log_id: str | None, merged: bool) -> bool:
        """Whether the log ``log_id`` shows in the current streams mode."""
        if self.streams == "both" and not merged:
            return log_id != "both-log"
        return log_id == f"{self.streams}-log"

    def watch_streams(self) -> None:
        self._apply_streams()
        # A match (or a search under way) was in the stream shown before: not in this one.
        self._cancel_search()
        self.status = "n: find in this stream" if self._search is not None else ""
        self.update_title()

    def action_cycle_streams(self) -> None:
        self.streams = _NEXT[self.streams]

    def poll(self) -> None:
        for log in self.visible_logs():
            log.poll()

    def update_title(self) -> None:
        title = self.title_text()
        if self.status:
            title.append(f"  │ {self.status}", "bold yellow")
        title.append(f"  │ showing {self.streams} (o)", "dim")
        self.query_one("#view-title", TextBar).show_text(title)

    def action_toggle_wrap(self) -> None:
        active = self.active_log()
        if active is None:
            return
        wrap = not active.wrap
        for log in self.visible_logs():
            log.set_wrap(wrap)
        self.set_status("wrapping long lines" if wrap else "long lines cut (← → scroll)")

    def action_toggle_follow(self) -> None:
        for log in self.visible_logs():
            log.paused = not log.paused

    def on_run_changed(self, changed: set[int] | None) -> None:
        """The app calls this after engine events (the title shows the rank's state)."""
        self.update_title()

    # -- search ----------------------------------------------------------------------------

    def action_back(self) -> None:
        search = self.query_one("#search", Input)
        if search.display:
            search.display = False
            self.active_log_focus()
            return
        self._cancel_search()
        self.app.pop_screen()

    def active_log_focus(self) -> None:
        log = self.active_log()
        if log is not None:
            log.focus()

    def action_start_search(self) -> None:
        search = self.query_one("#search", Input)
        search.display = True
        search.focus()
        # The '/' that opened the bar reaches the freshly focused Input too: put the last
        # pattern back once that key is through, selected so typing replaces it.
        self.call_after_refresh(self._prefill_search)

    def _prefill_search(self) -> None:
        search = self.query_one("#search", Input)
        search.value = self._raw_pattern
        search.select_all()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._raw_pattern = event.value
        parsed = parse_pattern(event.value)
        event.input.display = False
        self.active_log_focus()
        if parsed is None:
            self._search = None
            for log in self.logs():
                log.set_highlight(None)
            self.set_status("invalid pattern" if event.value.strip("/") else "")
            return
        self._search = parsed
        for log in self.logs():
            log.set_highlight(parsed[3])
        active = self.active_log()
        if active is not None:
            self._run_search(active, int(active.scroll_y), backwards=False)

    def action_find(self, backwards: bool) -> None:
        log = self.active_log()
        if self._search is None or log is None:
            self.action_start_search()
            return
        if log.current_match is not None:
            start = log.current_match - 1 if backwards else log.current_match + 1
        else:
            start = int(log.scroll_y)
        if start < 0:
            start = max(0, log.line_count - 1)
        self._run_search(log, start, backwards=backwards)

    def set_status(self, status: str) -> None:
        self.status = status
        self.update_title()

    def _cancel_search(self) -> None:
        if self._cancel is not None:
            self._cancel.set()
            self._cancel = None

    def _run_search(self, log: FileLog, start: int, *, backwards: bool) -> None:
        if log.source is None or self._search is None:
            self.set_status("nothing to search yet")
            return
        self._cancel_search()
        self._cancel = threading.Event()
        self.set_status("searching…")
        self._search_worker(log, start, backwards, self._cancel)

    @work(thread=True, exclusive=True, group="search", exit_on_error=False)
    def _search_worker(
        self, log: FileLog, start: int, backwards: bool, cancel: threading.Event
    ) -> None:
        assert self._search is not None and log.source is not None
        pattern, regex, case_sensitive, _ = self._search
        source = log.source

        def first(from_line: int) -> int | None:
            for index in source.search(
                pattern,
                regex=regex,
                case_sensitive=case_sensitive,
                start=from_line,
                backwards=backwards,
                cancel=cancel,
            ):
                return index
            return None

        found = first(start)
        wrapped = False
        if found is None and not cancel.is_set():
            # The other logs shown (stacked "both"), in screen order after this one.
            for other in self._others(log, backwards):
                hit = self._first_in(other, backwards, cancel)
                if hit is not None:
                    self.app.call_from_thread(self._search_done, other, hit, backwards, False)
                    return
        if found is None and not cancel.is_set():
            # Like less and vim: past the end, go on from the other end.
            found = first(max(0, log.line_count - 1) if backwards else 0)
            wrapped = found is not None
        if cancel.is_set():
            return
        self.app.call_from_thread(self._search_done, log, found, backwards, wrapped)

    def _others(self, log: FileLog, backwards: bool) -> list[FileLog]:
        """The other visible logs, in the order a search goes through them after ``log``."""
        shown = [other for other in self.visible_logs() if other.source is not None]
        if log not in shown:
            return []
        k = shown.index(log)
        after = shown[k + 1 :] + shown[:k]
        return list(reversed(after)) if backwards else after

    def _first_in(self, log: FileLog, backwards: bool, cancel: threading.Event) -> int | None:
        """The first match in ``log`` from its top (its bottom when going backwards)."""
        assert self._search is not None and log.source is not None
        pattern, regex, case_sensitive, _ = self._search
        start = max(0, log.line_count - 1) if backwards else 0
        for index in log.source.search(
            pattern,
            regex=regex,
            case_sensitive=case_sensitive,
            start=start,
            backwards=backwards,
            cancel=cancel,
        ):
            return index
        return None

    def _search_done(self, log: FileLog, found: int | None, backwards: bool, wrapped: bool) -> None:
        if found is None:
            self.set_status("no match")
            return
        if log is not self.active_log():
            for other in self.logs():
                if other is not log:
                    other.clear_current()
            log.focus()
        log.go_to(found)
        where = ""
        if wrapped:
            where = " (wrapped to the end)" if backwards else " (wrapped to the top)"
        self.set_status(f"match at line {found + 1:,}{where}")

    def on_unmount(self) -> None:
        self._cancel_search()
