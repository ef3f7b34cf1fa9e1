"""RankPane: one rank in the grid, a one-line header over its live log.

The border carries the rank and its state (coloured by state through TCSS classes such as
``-running`` and ``-failed``), during an escalation the SIGKILL countdown, and a straggler's
mark (``-straggler``: steps behind the median, or silent for several of its peers' usual gaps).
The header line shows pid, progress (``step 120`` or ``45/100``), CPU % with a sparkline, RSS,
NUMA node and restart count. Panes never keep state of their own: ``show(view, now)`` redraws
from the ``RankView``.
"""

from __future__ import annotations

from typing import Any, Final, Iterable

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.geometry import Region
from textual.widgets import Static

from ...engine.forensics.progress import Progress
from ...engine.states import RankState
from ..messages import RankSelected, ZoomRequested
from ..model import TYPED_MARK, RankView, format_bytes
from .ansi import plain_text
from .rank_log import RankLog

__all__ = [
    "GLYPHS",
    "RankHeader",
    "RankPane",
    "input_label",
    "progress_text",
    "short_where",
    "sparkline",
    "state_label",
    "straggler_mark",
]

GLYPHS: Final = {
    RankState.STARTING: "○",
    RankState.RUNNING: "●",
    RankState.TERMINATING: "◑",
    RankState.RESTARTING: "↻",
    RankState.SUCCEEDED: "✔",
    RankState.FAILED: "✖",
    RankState.SIGNALLED: "⊘",
}

_BARS: Final = " ▁▂▃▄▅▆▇█"
STATE_CLASSES: Final = tuple(f"-{state.value}" for state in RankState)


def sparkline(values: Iterable[float], width: int, top: float = 100.0) -> str:
    """The last ``width`` values as block characters, 0..``top`` (or the max if higher)."""
    data = list(values)[-width:] if width > 0 else []
    if not data:
        return ""
    top = max(top, max(data), 1e-9)
    steps = len(_BARS) - 1
    return "".join(_BARS[max(0, min(steps, round(v / top * steps)))] for v in data)


def _duration(seconds: int) -> str:
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m"


def progress_text(progress: Progress | None, *, compact: bool = False) -> str:
    """``"step 120"``, ``"45/100"``, ``"epoch 3"`` (``"#120"``, ``"ep3"`` compact); "" if none."""
    if progress is None:
        return ""
    n = progress.step
    if progress.kind == "tqdm" and progress.total is not None:
        return f"{n}/{progress.total}"
    if progress.kind == "epoch":
        return f"ep{n}" if compact else f"epoch {n}"
    of = f"/{progress.total}" if progress.total is not None else ""
    if compact:
        return f"#{n}{of}"
    word = "iter" if progress.kind == "iter" else "step"
    return f"{word} {n}{of}"


def _count(value: float) -> str:
    return f"{value:.0f}" if value < 10_000 else f"{value / 1000:.0f}k"


def straggler_mark(view: RankView, now: float, *, compact: bool = False) -> str:
    """``"⚠ 12 behind"`` or ``"⚠ silent 31s"`` (``"⚠-12"``, ``"⚠31s"`` compact) for a rank
    its peers left behind; ``"⏸ waiting for rank 0 (at a prompt)"`` (``"⏸wait"``) for one
    that is silent while a person paused a peer; "" for one that keeps up."""
    if view.waiting_for:
        return "⏸wait" if compact else f"⏸ {view.waiting_for}"
    if view.straggler == "behind" and view.behind is not None:
        return f"⚠-{_count(view.behind)}" if compact else f"⚠ {_count(view.behind)} behind"
    if view.straggler == "silent" and view.last_output_at is not None:
        quiet = _duration(max(0, int(now - view.last_output_at)))
        return f"⚠{quiet}" if compact else f"⚠ silent {quiet}"
    return ""


def short_where(where: str) -> str:
    """``"job.py:7 in <module>"`` -> ``"job.py:7"``: the place, for a border or a tile."""
    return where.split(" in ", 1)[0]


def input_label(view: RankView, *, width: int = 40) -> str:
    """``"⌨ (Pdb) job.py:7"`` for a rank at a prompt (its prompt and, for pdb, where it
    stopped; both from its output, so shown as plain text), "" for one that is not."""
    wait = view.input_wait
    if wait is None:
        return ""
    prompt = plain_text(wait.prompt).strip()
    if len(prompt) > width:
        prompt = prompt[: width - 1] + "…"
    words = " ".join(x for x in (prompt or "waiting for input", short_where(wait.where)) if x)
    return TYPED_MARK + plain_text(words)


def state_label(view: RankView, now: float, *, root_cause: bool = False) -> str:
    """``"running"``, ``"failed · exit 1"``, ``"terminating · SIGKILL in 27s"``, ``"⌨ (Pdb)
    job.py:7"`` (at a prompt), ..."""
    # A rank rankvisor's own signal ended did not fail: it is labelled stopped.
    words = "stopped" if view.stopped else view.state.value
    if view.state is RankState.RUNNING and view.proc_status == "stopped":
        words = "stopped (SIGSTOP)"
    if view.input_wait is not None and view.state.is_alive:
        # What a person must do next: answer it (the state is running, as it says).
        words = input_label(view)
    if view.exit_label:
        words += f" · {view.exit_label}"
    countdown = view.countdown(now)
    if countdown is not None:
        words += f" · SIGKILL in {countdown}s"
    mark = straggler_mark(view, now)
    quiet = view.quiet_for(now)
    if mark:
        words += f" · {mark}"
    elif quiet is not None:
        words += f" · quiet {_duration(quiet)}"
    if view.timer_scope:
        words += f" · timer {view.timer_scope}"
    if root_cause:
        words += " · ROOT CAUSE"
    return words


class RankHeader(Static):
    """pid, CPU % and sparkline, RSS, NUMA node, restarts: one line."""

    DEFAULT_CSS = """
    RankHeader {
        height: 1;
        width: 1fr;
        background: $boost;
        color: $text-muted;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    _view: RankView | None = None

    def show(self, view: RankView) -> None:
        self._view = view
        self.refresh()

    def on_mount(self) -> None:
        self.refresh()  # shown before it was mounted

    def render(self) -> Text:
        if self._view is None:
            return Text()
        return header_text(self._view, width=self.size.width)


def gpu_text(view: RankView, *, compact: bool) -> str:
    """``"  gpu0,1 3.2G 87%"`` (``" g3.2G 87%"`` compact): shown only when NVML saw the
    rank's processes on a GPU; absent, without a word, everywhere else."""
    if view.gpu_memory_bytes is None:
        return ""
    util = "" if view.gpu_util_percent is None else f" {view.gpu_util_percent:.0f}%"
    if compact:
        return f" g{format_bytes(view.gpu_memory_bytes)}{util}"
    which = ",".join(map(str, view.gpus))
    return f"  gpu{which} {format_bytes(view.gpu_memory_bytes)}{util}"


def header_text(view: RankView, *, width: int = 40) -> Text:
    """The header line of a rank, fitted to ``width`` by the sparkline's length.

    Only our own words and numbers: nothing here comes from the rank's output."""
    head = f"pid {view.pid}" if view.pid is not None else "pid -"
    alive = view.state.is_alive
    shown = view.shown_progress
    has_cpu = alive and view.cpu_percent is not None
    for compact in (False, True):
        tail = ""
        if alive:
            if view.rss_bytes is not None:
                tail += (
                    f" {format_bytes(view.rss_bytes)}"
                    if compact
                    else f"  rss {format_bytes(view.rss_bytes)}"
                )
            if view.numa_node is not None:
                tail += f" N{view.numa_node}" if compact else f"  numa {view.numa_node}"
            if view.gpu_memory_bytes is not None:
                tail += gpu_text(view, compact=compact)
        else:
            tail += f"  {view.exit_label or view.state.value}"
            if view.caused_by_us:
                tail += " (by rankvisor)"
        if view.restart_count:
            tail += f" ↻{view.restart_count}" if compact else f"  ↻{view.restart_count}"
        cpu = ""
        if has_cpu:
            cpu = f" {view.cpu_percent:3.0f}% " if compact else f"  cpu {view.cpu_percent:3.0f}% "
        step = progress_text(shown, compact=compact)
        step = f" {step}" if compact and step else f"  {step}" if step else ""
        room = width - len(head) - len(step) - len(cpu) - len(tail)
        if room >= 6 or not has_cpu:
            break
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(head, style="bold")
    if step:
        text.append(step, style=_lag_style(view))
    if has_cpu:
        text.append(cpu)
        text.append(sparkline(view.cpu_history, max(3, min(24, room))), style="green")
    text.append(tail)
    return text


def _lag_style(view: RankView) -> str:
    """The progress's colour: red for a straggler, yellow half way there, else plain."""
    if view.straggler:
        return "bold red"
    threshold = view.lag_threshold
    if view.behind is not None and threshold and view.behind >= threshold / 2:
        return "yellow"
    return "bold cyan"


_SELECTED_RULES: Final = (
    "border_top", "border_right", "border_bottom", "border_left", "border_title_style",
)
"""The inline rules that mark a selected pane (``RankPane.set_selected``)."""


def _edge_content(text: Text) -> Content:
    """What Textual's border title setter keeps of ``text``: its first line, tabs expanded."""
    return Content.from_rich_text(text).expand_tabs(4).split()[0]


def _same(new: Content, old: Content | None) -> bool:
    """Whether a border text is unchanged (``Content`` itself compares the text alone)."""
    return old is not None and new.plain == old.plain and new.spans == old.spans


class RankPane(Vertical):
    """One rank: header plus live log, bordered and coloured by state."""

    DEFAULT_CSS = """
    RankPane {
        border: round $panel-lighten-2;
        border-title-align: left;
        border-subtitle-align: right;
        height: 1fr;
        width: 1fr;
        padding: 0;
    }
    """

    def __init__(self, view: RankView, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rank = view.rank
        self.selected = False
        """Drawn with a heavy border and a lit title (``set_selected``)."""
        self._view = view
        self._shown: tuple[object, ...] = ()
        # Made here, not queried: the app may draw before the children are mounted.
        self._header = RankHeader()
        self._log = RankLog(view.buffer)

    def compose(self) -> ComposeResult:
        yield self._header
        yield self._log

    @property
    def log_view(self) -> RankLog:
        return self._log

    def set_selected(self, selected: bool) -> None:
        """Mark the pane selected, or no longer: a heavy border in the state's colour and a
        lit title, as inline styles on the pane alone.

        Not a CSS class: a class change restyles the pane and every widget inside it (its
        log's rows are drawn anew), which was a third of what a key cost under a flood
        (``tests/bench/bench_tui.py``); an inline border redraws the pane's edges and keeps
        the log's rows. The colour is the one the state's CSS gives the border."""
        if selected != self.selected:
            self.selected = selected
            self._mark_selection()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        if self.selected:
            self._mark_selection()  # the CSS changed (a state's class, a theme): its colour

    def _mark_selection(self) -> None:
        inline = self.styles.inline
        if not self.selected:
            cleared = [inline.clear_rule(name) for name in _SELECTED_RULES]
            if any(cleared):
                self.refresh()
            return
        _, colour = self.styles.base.border_top
        self.styles.border = ("heavy", colour)
        self.styles.border_title_style = "bold reverse"

    def bind(self, view: RankView) -> None:
        """Show another rank (the focused pane beside the tiles)."""
        self._view = view
        self.rank = view.rank
        self._shown = ()
        self.log_view.buffer = view.buffer

    def show(self, now: float, *, root_cause: bool = False) -> None:
        """Redraw header, border and state class from the rank's view (cheap if unchanged)."""
        view = self._view
        key = (
            view.rank,
            view.state,
            view.pid,
            view.exitcode,
            view.signal_name,
            view.restart_count,
            view.cpu_percent,
            view.rss_bytes,
            view.numa_node,
            view.gpu_memory_bytes,
            view.gpu_util_percent,
            view.proc_status,
            len(view.cpu_history),
            view.countdown(now),
            view.quiet_for(now),
            view.shown_progress,
            view.behind,
            straggler_mark(view, now),
            view.timer_scope,
            root_cause,
            view.caused_by_us,
            view.global_rank,
            view.input_wait,
            view.place,
        )
        if key == self._shown:
            return
        self._shown = key
        state_class = f"-{view.state.value}"
        for name in STATE_CLASSES:
            self.set_class(name == state_class, name)
        self.set_class(root_cause, "-root-cause")
        self.set_class(bool(view.straggler), "-straggler")
        self.set_class(view.input_wait is not None, "-waiting")
        # Text, not str: a str border title is parsed as markup, and the timer scope in the
        # label comes from the rank's own code.
        title = f"{GLYPHS[view.state]} rank {view.rank}"
        if view.global_rank is not None:  # multi-node: the job's rank, this node's index
            title = f"{GLYPHS[view.state]} rank {view.global_rank} (local {view.rank})"
        elif view.place:  # every node's ranks in one viewer: the job's rank and its node
            title = f"{GLYPHS[view.state]} rank {view.rank} · {view.place}"
        self._set_edges(Text(title), Text(state_label(view, now, root_cause=root_cause)))
        self._header.show(view)

    def _set_edges(self, title: Text, subtitle: Text) -> None:
        """The border's title and subtitle, repainting the one row each is drawn on.

        Textual's ``border_title`` repaints the whole pane: every row of its border and
        background, 44 rows of a focus pane beside 64 tiles, in the frame of every key that
        shows another rank there. Set here as Textual's setter sets them (a one-line
        ``Content``)."""
        top, bottom = _edge_content(title), _edge_content(subtitle)
        rows = []
        if not _same(top, self._border_title):
            self._border_title = top
            rows.append(0)
        if not _same(bottom, self._border_subtitle):
            self._border_subtitle = bottom
            rows.append(self.outer_size.height - 1)
        if not rows:
            return
        width = self.outer_size.width
        if not width:
            self.refresh()  # not laid out yet
            return
        # refresh() takes regions inside the border: the edges lie one offset out.
        x, y = self.content_offset
        self.refresh(*(Region(-x, row - y, width, 1) for row in rows))

    def sync_log(self) -> None:
        self.log_view.sync()

    def on_click(self, event: events.Click) -> None:
        if event.chain >= 2:
            self.post_message(ZoomRequested(self.rank))
        else:
            self.post_message(RankSelected(self.rank))
