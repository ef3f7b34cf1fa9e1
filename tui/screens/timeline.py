"""TimelineScreen (a): every rank's lines merged in the order they arrived, with the time.

Read from the files (``engine.forensics.timeline``: each rank's two logs, merged across ranks
on their arrival index's times), so what happened first reads top to bottom. It opens at the
suspect's last line (marked) when the run has a suspect, else at the first failure; a
``first failure`` rule sits where it happened. ``/`` searches (``n``/``N`` step through the
matches), ``&`` keeps only the lines that contain a text (empty: all lines again), ``r``
reads the files again. A rank at a prompt is never filtered out: a row at the end says
where it waits and what it asks, whatever the filter (it is waiting for a person).
"""

from __future__ import annotations

from datetime import datetime, tzinfo

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Input, RichLog, Static

from ...engine.forensics.timeline import TimelineLine, merge_ranks
from ..model import TYPED_MARK, RunView
from ..widgets.ansi import display_text, plain_text
from ..widgets.key_footer import KeyFooter

__all__ = ["RANK_STYLES", "TimelineScreen", "rank_style"]

RANK_STYLES = ("cyan", "magenta", "green", "yellow", "blue", "bright_red", "bright_cyan",
               "bright_magenta")
"""Each rank's colour (rank mod 8)."""

_FIRST_FAILURE = "──────── first failure ────────"


def rank_style(rank: int) -> str:
    return RANK_STYLES[rank % len(RANK_STYLES)]


def _clock(t_ns: int, tz: tzinfo | None) -> str:
    if t_ns <= 0:
        return "--:--:--.---"
    moment = datetime.fromtimestamp(t_ns / 1e9, tz)
    return moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


class TimelineScreen(Screen[None]):
    """Every rank's lines in arrival order (see the module docstring)."""

    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("slash", "ask('search')", "Search"),
        Binding("n", "find(1)", "Next"),
        Binding("N", "find(-1)", "Prev"),
        Binding("ampersand", "ask('filter')", "Filter"),
        Binding("r", "reload", "Reload"),
        Binding("g,home", "top", "Top", show=False),
        Binding("G,end", "bottom", "Bottom", show=False),
    ]

    def __init__(self, run: RunView, *, tz: tzinfo | None = None) -> None:
        super().__init__()
        self.run = run
        self.tz = tz
        self.lines: list[TimelineLine] = []
        """Every line read, in arrival order."""
        self.shown: list[TimelineLine | None] = []
        """The rows drawn (None: the first-failure rule)."""
        self.filter_text = ""
        self.search_text = ""
        self.current: int | None = None
        """The row of the current match, or the row opened at."""
        self.opened_at: int | None = None
        self._asking = ""
        self._waiting_shown: list[object] = []
        """The ranks at a prompt when last drawn (their rows are redrawn when it changes)."""

    def compose(self) -> ComposeResult:
        yield Static(id="timeline-title")
        yield RichLog(id="timeline", wrap=False, markup=False, highlight=False, max_lines=None)
        yield Input(id="timeline-input")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#timeline-input", Input).display = False
        self._title("reading the logs …")
        self.action_reload()

    def _title(self, status: str = "") -> None:
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(" timeline ", "bold reverse")
        text.append(f" every rank's lines as they arrived · {len(self.lines)} lines")
        if self.filter_text:
            text.append(f" · filter {self.filter_text!r}: {sum(1 for x in self.shown if x)}")
        if self.search_text:
            text.append(f" · search {self.search_text!r}")
        if status:
            text.append(f" · {status}", "bold yellow")
        self.query_one("#timeline-title", Static).update(text)

    # -- reading ---------------------------------------------------------------------------

    def action_reload(self) -> None:
        ranks = [(v.rank, v.stdout_path, v.stderr_path) for v in self.run.ranks]
        self._read(ranks)

    @work(thread=True, exclusive=True, group="timeline-read")
    def _read(self, ranks: list[tuple[int, str, str]]) -> None:
        lines = merge_ranks(ranks)
        self.app.call_from_thread(self._loaded, lines)

    def _loaded(self, lines: list[TimelineLine]) -> None:
        self.lines = lines
        self._draw(open_at_start=True)

    # -- drawing ---------------------------------------------------------------------------

    def first_failure_ns(self) -> int | None:
        suspect = self.run.suspect
        if suspect is not None and suspect.first_failure_ns:
            return suspect.first_failure_ns
        times = [v.failed_at for v in self.run.ranks if v.failed and v.failed_at]
        return int(min(times) * 1e9) if times else None

    def _is_suspect_line(self, line: TimelineLine) -> bool:
        s = self.run.suspect
        return (
            s is not None and line.rank == s.rank and s.last_line_no >= 0
            and line.stream == s.last_line_stream and line.line_no == s.last_line_no
        )

    def _row(self, line: TimelineLine | None, match: bool) -> Text:
        if line is None:
            return Text(_FIRST_FAILURE, "bold red")
        text = Text(no_wrap=True)
        text.append(_clock(line.t_ns, self.tz) + " ", "dim")
        text.append(f"r{line.rank:<2} ", f"bold {rank_style(line.rank)}")
        text.append("E " if line.stream == "stderr" else "  ", "red")
        body = display_text(line.text).copy()
        if self.search_text:
            body.highlight_words([self.search_text], "reverse", case_sensitive=False)
        text.append_text(body)
        if self._is_suspect_line(line):
            text.append("  ◀ suspect's last line", "bold reverse yellow")
        if match:
            text.stylize("on grey23")
        return text

    def _draw(self, *, open_at_start: bool = False) -> None:
        needle = self.filter_text.lower()
        first_ns = self.first_failure_ns()
        rows: list[TimelineLine | None] = []
        ruled = first_ns is None
        for line in self.lines:
            if not ruled and line.t_ns >= first_ns:  # type: ignore[operator]
                rows.append(None)
                ruled = True
            if needle and needle not in line.text.lower():
                continue
            rows.append(line)
        self.shown = rows
        log = self.query_one("#timeline", RichLog)
        log.clear()
        for i, row in enumerate(rows):
            log.write(self._row(row, i == self.current), scroll_end=False)
        self._waiting_shown = [(v.rank, v.input_wait) for v in self.run.waiting()]
        for text in self._waiting_rows():
            log.write(text, scroll_end=False)
        if open_at_start:
            self.opened_at = self._opening_row()
            self.current = self.opened_at
        self._title()
        if self.current is not None:
            self.call_after_refresh(self._show_row, self.current)

    def _waiting_rows(self) -> list[Text]:
        """One row per rank at a prompt, after the lines (never filtered out)."""
        out = []
        for view in self.run.waiting():
            wait = view.input_wait
            assert wait is not None
            text = Text(no_wrap=True)
            text.append(_clock(int(wait.since * 1e9), self.tz) + " ", "dim")
            text.append(f"r{view.rank:<2} ", f"bold {rank_style(view.rank)}")
            text.append(f"  {TYPED_MARK}at a prompt: ", "bold magenta")
            text.append(plain_text(wait.prompt).strip() or "waiting for input", "bold")
            if wait.where:
                text.append(f"  {plain_text(wait.where)}", "cyan")
            out.append(text)
        return out

    def on_run_changed(self, changed: set[int] | None) -> None:
        if changed is None or -1 in changed:
            waiting: list[object] = [(v.rank, v.input_wait) for v in self.run.waiting()]
            if waiting != self._waiting_shown and self.lines:
                self._draw()

    def _opening_row(self) -> int | None:
        for i, line in enumerate(self.shown):
            if line is not None and self._is_suspect_line(line):
                return i
        for i, line in enumerate(self.shown):
            if line is None:
                return i
        return None

    def _show_row(self, row: int) -> None:
        log = self.query_one("#timeline", RichLog)
        log.scroll_to(y=max(0, row - log.size.height // 3), animate=False)

    # -- keys ------------------------------------------------------------------------------

    def action_back(self) -> None:
        box = self.query_one("#timeline-input", Input)
        if box.display:
            box.display = False
            self.query_one("#timeline", RichLog).focus()
            return
        self.app.pop_screen()

    def action_ask(self, what: str) -> None:
        self._asking = what
        box = self.query_one("#timeline-input", Input)
        box.placeholder = "search for" if what == "search" else "keep lines containing"
        box.value = self.search_text if what == "search" else self.filter_text
        box.display = True
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        box = self.query_one("#timeline-input", Input)
        box.display = False
        self.query_one("#timeline", RichLog).focus()
        if self._asking == "filter":
            self.filter_text = event.value
            self.current = None
            self._draw()
            return
        self.search_text = event.value
        self.current = (self.current or 0) - 1
        self.action_find(1)

    def action_find(self, step: int) -> None:
        if not self.search_text:
            return
        needle = self.search_text.lower()
        count = len(self.shown)
        start = self.current if self.current is not None else -1
        for k in range(1, count + 1):
            i = (start + step * k) % count
            row = self.shown[i]
            if row is not None and needle in row.text.lower():
                self.current = i
                self._draw()
                return
        self._draw()
        self._title("no match")

    def action_top(self) -> None:
        self.query_one("#timeline", RichLog).scroll_home(animate=False)

    def action_bottom(self) -> None:
        self.query_one("#timeline", RichLog).scroll_end(animate=False)
