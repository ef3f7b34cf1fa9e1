"""MainScreen: every rank at once, as a grid of panes or as tiles beside a focused pane.

A one-line strip above them shows every rank's progress at once (``ProgressStrip``). Layout is
chosen from the terminal size: a grid while every pane still gets a usable size
(4 ranks in 80x24, 16 in 160x48), otherwise compact tiles (one line per rank, latest line
included, paged) beside one full pane for the selected rank. ``g`` flips between the two.
The app pushes data in with ``show_ranks``; this screen only lays out and navigates.
"""

from __future__ import annotations

import math
from typing import Final, Literal

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container, Grid, Horizontal
from textual.reactive import reactive
from textual.screen import Screen

from ..clip import rank_log_lines
from ..frame_now import draw_now
from ..messages import RankSelected, ZoomRequested
from ..model import RunView
from ..widgets.key_footer import KeyFooter
from ..widgets.notice_bar import NoticeBar
from ..widgets.progress_strip import ProgressStrip
from ..widgets.rank_pane import RankPane
from ..widgets.rank_tiles import RankTiles
from ..widgets.run_summary import RunSummary

__all__ = ["MainScreen", "choose_grid"]

MAX_GRID: Final = 16
"""Beyond this many ranks there is no grid, only tiles and a focused pane."""
MIN_PANE_WIDTH: Final = 30
MIN_PANE_HEIGHT: Final = 7
"""Border, header and four log lines."""

Layout = Literal["auto", "grid", "list"]


def choose_grid(n: int, width: int, height: int) -> tuple[int, int] | None:
    """Columns and rows for ``n`` panes in ``width`` x ``height`` cells, or None if some pane
    would be too small to read. Prefers panes about 2.5 times wider than tall (in cells)."""
    if n < 1 or n > MAX_GRID:
        return None
    best: tuple[float, int, int] | None = None
    for cols in range(1, n + 1):
        rows = math.ceil(n / cols)
        pane_w, pane_h = width / cols, height / rows
        if pane_w < MIN_PANE_WIDTH or pane_h < MIN_PANE_HEIGHT:
            continue
        score = min(pane_w, 2.5 * pane_h)
        if best is None or score > best[0]:
            best = (score, cols, rows)
    return None if best is None else (best[1], best[2])


class MainScreen(Screen[None]):
    """The overview: a pane per rank (or tiles), the summary bar, the notice line, the footer."""

    BINDINGS = [
        Binding("up,k", "move(0, -1)", "Up", show=False),
        Binding("down,j", "move(0, 1)", "Down", show=False),
        Binding("left,h", "move(-1, 0)", "Left", show=False),
        Binding("right,l", "move(1, 0)", "Right", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "jump(0)", "First rank", show=False),
        Binding("end", "jump(-1)", "Last rank", show=False),
        Binding("enter", "app.zoom", "Zoom"),
        Binding("g", "toggle_layout", "Grid/list", show=False),
    ]

    selected: reactive[int] = reactive(0, init=False, repaint=False)
    """The selected rank. Not a repaint of the screen: its watcher redraws the two panes
    (or the tiles) that show it, and a whole screen's frame under a flood was what a key
    waited for (``tests/bench/bench_tui.py``)."""
    layout_choice: reactive[Layout] = reactive("auto", init=False)

    def __init__(self, run: RunView) -> None:
        super().__init__()
        self.run = run
        self.mode: Literal["grid", "list"] = "grid"
        self.grid_shape = (1, 1)
        self._root_cause: int | None = None
        # Children are made here and kept, so drawing never depends on a query finding them.
        self.summary = RunSummary()
        self.strip = ProgressStrip(id="strip")
        self.notice_bar = NoticeBar(id="notices")
        self.tiles = RankTiles(run.ranks, id="tiles")
        self.focus_pane = RankPane(run.ranks[0], id="focus")
        self.panes = (
            [RankPane(v, id=f"rank-{v.rank}", classes="grid-pane") for v in run.ranks]
            if len(run.ranks) <= MAX_GRID
            else []
        )
        self.ready = False
        """True once composed and laid out (the app draws only then)."""
        self._laid_out_for: tuple[int, int, str] | None = None
        """The body's size and the layout choice of the last ``_relayout``."""

    def compose(self) -> ComposeResult:
        yield self.summary
        with Container(id="body"):
            yield self.strip
            if self.panes:
                with Grid(id="grid"):
                    yield from self.panes
            with Horizontal(id="split"):
                yield self.tiles
                yield self.focus_pane
        yield self.notice_bar
        yield KeyFooter()

    def on_mount(self) -> None:
        self.ready = True
        self._relayout()
        # First frame with whatever the engine sent so far, before any key is handled.
        first_draw = getattr(self.app, "_tick", None)
        if callable(first_draw):
            first_draw()
        redraw = getattr(self.app, "_show", None)
        if callable(redraw):
            # Once more after the first frame: widgets shown before they were mounted.
            self.call_after_refresh(redraw, None)

    def on_resize(self) -> None:
        # Textual sends a starting screen the same size several times: lay out once a size.
        if self._layout_key() != self._laid_out_for:
            self._relayout()

    # -- layout ----------------------------------------------------------------------------

    def _layout_key(self) -> tuple[int, int, str]:
        body = self.query_one("#body")
        return (body.size.width, body.size.height, self.layout_choice)

    def _relayout(self) -> None:
        self._laid_out_for = self._layout_key()
        body = self.query_one("#body")
        width = body.size.width or self.size.width
        # The body holds the progress strip (one line) above the panes.
        height = (body.size.height or self.size.height - 3) - 1
        shape = choose_grid(len(self.run.ranks), width, height)
        mode: Literal["grid", "list"]
        if self.layout_choice == "list" or len(self.run.ranks) > MAX_GRID:
            mode = "list"
        elif self.layout_choice == "grid":
            mode = "grid"
            n = len(self.run.ranks)
            cols = shape[0] if shape else min(4, n)
            shape = shape or (cols, math.ceil(n / cols))
        else:
            mode = "grid" if shape else "list"
        self.mode = mode
        self.set_class(mode == "grid", "-grid")
        self.set_class(mode == "list", "-list")
        if mode == "grid" and shape is not None:
            self.grid_shape = shape
            grid = self.query_one("#grid", Grid)
            grid.styles.grid_size_columns = shape[0]
            grid.styles.grid_size_rows = shape[1]
        self.query_one("#split").display = mode == "list"
        if self.query("#grid"):
            self.query_one("#grid").display = mode == "grid"
        self._show_selection()
        self.show_ranks(None, self.app_now(), self._root_cause)

    def watch_layout_choice(self) -> None:
        self._relayout()

    def action_toggle_layout(self) -> None:
        self.layout_choice = "list" if self.mode == "grid" else "grid"

    # -- selection -------------------------------------------------------------------------

    def watch_selected(self, old: int, new: int) -> None:
        self._show_selection(old)
        # Tell the app directly: a message to ourselves could arrive after a later move and
        # set the selection back (two quick keys would then bounce it forever).
        if hasattr(self.app, "selected"):
            self.app.selected = new
        hold = getattr(self.app, "hold_ticks_for_frame", None)
        if callable(hold):
            hold()
        draw_now(self)  # the key's frame at once (see frame_now)

    def _show_selection(self, old: int | None = None) -> None:
        if old is not None and old < len(self.panes):
            self.panes[old].set_selected(False)
        if self.selected < len(self.panes):
            self.panes[self.selected].set_selected(True)
        self.tiles.selected = self.selected
        if self.mode != "list":
            # The focus pane shows only beside the tiles: rebinding it while hidden would
            # lay the whole screen out again at every key (its log's size changes).
            return
        focus = self.focus_pane
        if focus.rank != self.selected:
            focus.bind(self.run.ranks[self.selected])
            focus.show(self.app_now(), root_cause=self._root_cause == self.selected)
        focus.set_selected(True)

    def action_move(self, dx: int, dy: int) -> None:
        n = len(self.run.ranks)
        if self.mode == "grid":
            cols = self.grid_shape[0]
            target = self.selected + dx + dy * cols
        else:
            tiles = self.tiles
            step = tiles.rows if tiles.columns > 1 else 1
            target = self.selected + dy + dx * step
        if 0 <= target < n:
            self.selected = target

    def action_page(self, direction: int) -> None:
        tiles = self.tiles
        page = max(1, tiles.scrollable_content_region.height) * (
            tiles.columns if self.mode == "list" else 1
        )
        self.selected = max(0, min(len(self.run.ranks) - 1, self.selected + direction * page))

    def action_jump(self, rank: int) -> None:
        self.selected = rank % len(self.run.ranks)

    def on_rank_selected(self, message: RankSelected) -> None:
        """A click on a pane or tile."""
        message.stop()
        if 0 <= message.rank < len(self.run.ranks):
            self.selected = message.rank

    def on_zoom_requested(self, message: ZoomRequested) -> None:
        if 0 <= message.rank < len(self.run.ranks):
            self.selected = message.rank

    # -- data ------------------------------------------------------------------------------

    def app_now(self) -> float:
        clock = getattr(self.app, "clock", None)
        return clock() if callable(clock) else 0.0

    def show_ranks(
        self, changed: set[int] | None, now: float, root_cause: int | None, *, tiles: bool = True
    ) -> None:
        """Redraw what changed (``None``: everything); cheap for unchanged ranks. ``tiles``
        False: the tiles wait for a later call (the app draws them less often under load)."""
        self._root_cause = root_cause
        self.strip.show(self.run, now)
        if self.mode == "grid":
            for pane in self.panes:
                pane.show(now, root_cause=pane.rank == root_cause)
                if changed is None or pane.rank in changed:
                    pane.sync_log()
        else:
            if tiles or changed is None:
                self.tiles.show(now, root_cause)
            focus = self.focus_pane
            focus.show(now, root_cause=focus.rank == root_cause)
            if changed is None or focus.rank in changed:
                focus.sync_log()

    def show_summary(self, *, elapsed: float, paused: bool, status: str) -> None:
        self.summary.show(self.run, elapsed=elapsed, paused=paused, status=status)

    def visible_lines(self) -> list[str]:
        """The selected rank's lines as its pane shows them now (for copying out)."""
        if self.mode == "grid" and self.selected < len(self.panes):
            pane = self.panes[self.selected]
        else:
            pane = self.focus_pane
        return rank_log_lines(pane.log_view)

    def set_paused(self, paused: bool) -> None:
        for pane in self.query(RankPane):
            pane.log_view.paused = paused
