"""RankTiles: every rank as a one-line tile (state or progress, CPU, RSS, latest line), for
many ranks; a straggler's tile says how far behind (``⚠-12``) or how long silent (``⚠31s``).

Tiles are laid out column-major in as many columns as fit (a 160-column terminal shows two
columns of tiles beside the focused pane); when there are more rows than fit, the list
scrolls (paging with pgup/pgdn, and it keeps the selected tile in view). Drawn on the Line
API, so 64 or 512 ranks cost the same per frame: only visible rows render.
"""

from __future__ import annotations

import math
import re
from typing import Any, Final

from rich.cells import cell_len, set_cell_size
from rich.control import strip_control_codes
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Region, Size
from textual.reactive import reactive
from textual.strip import Strip

from ...engine.states import RankState
from ..messages import RankSelected, ZoomRequested
from ..model import TYPED_MARK, RankView, format_bytes
from .ansi import plain_text
from .follow import LineScrollView
from .rank_pane import GLYPHS, progress_text, short_where, straggler_mark

__all__ = ["RankTiles", "tile_segments"]

TILE_MIN_WIDTH: Final = 40
"""Narrowest tile worth a column of its own."""
NARROW_TILE: Final = 48
"""Below this width a tile leaves out the RSS, so that some of the latest line shows (80
columns give tiles of about 36)."""
_DIM: Final = Style(dim=True)


_SHORT: Final = {
    RankState.STARTING: "start",
    RankState.RUNNING: "run",
    RankState.TERMINATING: "term",
    RankState.RESTARTING: "restart",
    RankState.SUCCEEDED: "ok",
    RankState.FAILED: "failed",
    RankState.SIGNALLED: "killed",
}


def tile_status(view: RankView, now: float) -> str:
    """Eight characters at most: ``run``, ``step 120``, ``⚠ -12`` (a straggler), ``kill 27s``,
    ``exit 1``, ``SIGKILL``, ``ok``."""
    countdown = view.countdown(now)
    if countdown is not None:
        return f"kill {countdown}s"
    if view.input_wait is not None:
        return f"{TYPED_MARK}{plain_text(view.input_wait.prompt).strip() or 'input'}"[:8]
    if view.state is RankState.RUNNING and view.proc_status == "stopped":
        return "stopped"
    mark = straggler_mark(view, now, compact=True)
    if mark:
        return mark
    quiet = view.quiet_for(now)
    if quiet is not None:
        return f"quiet {quiet}s" if quiet < 100 else f"quiet {quiet // 60}m"
    if view.exit_label and view.state is not RankState.SUCCEEDED:
        return view.exit_label
    if view.state is RankState.RUNNING and view.shown_progress is not None:
        full = progress_text(view.shown_progress)
        return full if len(full) <= 8 else progress_text(view.shown_progress, compact=True)
    return _SHORT[view.state]


def tile_segments(
    pieces: list[tuple[str, Style | None]], width: int, row_style: Style
) -> list[Segment]:
    """One tile's ``pieces`` (text, and its style or None) as segments of ``width`` cells on
    ``row_style``: cut with an ellipsis or padded to ``width - 1``, then a space.

    What ``rich.text.Text`` gives for the same appends, ``truncate(width - 1, "ellipsis",
    pad=True)`` and ``render`` (a test compares the two), built directly: through ``Text`` a
    tile cost about 0.2 ms, 64 tiles changing at every frame of a flood.
    """
    texts = [strip_control_codes(text) for text, _ in pieces]
    plain = "".join(texts)
    fit = width - 1
    length = cell_len(plain)
    if length > fit:
        plain = set_cell_size(plain, fit - 1) + "…"
    elif length < fit:
        plain += " " * (fit - length)
    end = len(plain)
    segments: list[Segment] = []
    cursor = at = 0
    for text, (_, style) in zip(texts, pieces, strict=True):
        start, at = at, at + len(text)
        if style is None or not text or start >= end:
            continue
        stop = min(at, end)
        if start > cursor:
            segments.append(Segment(plain[cursor:start], row_style))
        segments.append(Segment(plain[start:stop], row_style + style))
        cursor = stop
    segments.append(Segment(plain[cursor:] + " ", row_style))
    return segments


def _without_own_rank(line: str, rank: int) -> str:
    """``line`` without a leading "rank 5:", "rank 5/16:" or "[trainer5]:" naming the tile's
    own rank: the tile says which rank it is, and a 36-column tile (80 columns) has no room
    to say it twice."""
    match = re.match(rf"(?:\[[^\]\s]{{0,20}}?\D{rank}\]:?|rank ?{rank}(?:/\d+)?:)\s*", line)
    return line[match.end():] if match else line


class RankTiles(LineScrollView, can_focus=False):
    """A compact tile per rank, coloured by state, with a cursor on the selected rank."""

    COMPONENT_CLASSES = {
        "ranktiles--selected",
        "ranktiles--root-cause",
        "ranktiles--straggler",
        "ranktiles--waiting",
        *(f"ranktiles--{state.value}" for state in RankState),
    }

    DEFAULT_CSS = """
    RankTiles {
        overflow: hidden auto;
        scrollbar-size: 1 1;
        background: $surface;
        border: round $panel-lighten-2;
        border-title-align: left;
    }
    RankTiles > .ranktiles--selected { background: $accent 35%; text-style: bold; }
    RankTiles > .ranktiles--root-cause { text-style: bold reverse; }
    RankTiles > .ranktiles--straggler { color: $warning; background: $surface; text-style: bold; }
    RankTiles > .ranktiles--waiting { color: $accent; background: $surface; text-style: bold; }
    RankTiles > .ranktiles--starting { color: $primary; }
    RankTiles > .ranktiles--running { color: $success; }
    RankTiles > .ranktiles--terminating { color: $warning; }
    RankTiles > .ranktiles--restarting { color: $warning; }
    RankTiles > .ranktiles--succeeded { color: $text-muted; }
    RankTiles > .ranktiles--failed { color: $error; }
    RankTiles > .ranktiles--signalled { color: $error; }
    """

    selected: reactive[int] = reactive(0, init=False, repaint=False)
    """Not a repaint of every tile: its watcher marks the rows that show the move."""

    def __init__(self, ranks: list[RankView], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._ranks = ranks
        self._root_cause: int | None = None
        self._now = 0.0
        self._styles: dict[str, Style] = {}
        self.border_title = Text(f"{len(ranks)} ranks")

    # -- layout ----------------------------------------------------------------------------

    @property
    def columns(self) -> int:
        width = self.scrollable_content_region.width or TILE_MIN_WIDTH
        return max(1, min(len(self._ranks), width // TILE_MIN_WIDTH))

    @property
    def rows(self) -> int:
        return max(1, math.ceil(len(self._ranks) / self.columns))

    def position(self, rank: int) -> tuple[int, int]:
        """(column, row) of a rank's tile."""
        return divmod(rank, self.rows)

    def rank_at(self, column: int, row: int) -> int | None:
        rank = column * self.rows + row
        return rank if 0 <= rank < len(self._ranks) and row < self.rows else None

    def on_resize(self) -> None:
        self._update_size()

    def on_mount(self) -> None:
        self._update_size()

    def _update_size(self) -> None:
        self.virtual_size = Size(self.scrollable_content_region.width, self.rows)
        self.scroll_to_selected()

    # -- updating --------------------------------------------------------------------------

    def show(self, now: float, root_cause: int | None) -> None:
        self._now = now
        self._root_cause = root_cause
        self.refresh()

    def watch_selected(self, old: int, new: int) -> None:
        top = self.scroll_offset.y
        self.scroll_to_selected()
        if self.scroll_offset.y != top:
            self.refresh()
            return
        # Only the two rows that show the move, not every tile again.
        width = self.scrollable_content_region.width
        rows = {self.position(rank)[1] for rank in (old, new) if 0 <= rank < len(self._ranks)}
        self.refresh(*(Region(0, row - top, width, 1) for row in rows))

    def scroll_to_selected(self) -> None:
        if not self._ranks:
            return
        _, row = self.position(self.selected)
        self.scroll_to_region(Region(0, row, 1, 1), animate=False, immediate=True)

    # -- rendering -------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        base = self._base_style()
        row = self.scroll_offset.y + y
        if row >= self.rows:
            return Strip.blank(width, base)
        columns = self.columns
        tile_width = width // columns
        segments: list[Segment] = []
        used = 0
        for column in range(columns):
            rank = self.rank_at(column, row)
            cell = tile_width if column < columns - 1 else width - used
            if rank is None:
                segments.append(Segment(" " * cell, base))
            else:
                segments.extend(self._tile(self._ranks[rank], cell, base))
            used += cell
        return Strip(segments, width)

    def _style(self, name: str) -> Style:
        """A component style, looked up once per theme (a tile takes two to four, and 64
        tiles a frame under a flood)."""
        style = self._styles.get(name)
        if style is None:
            style = self._styles[name] = self.get_component_rich_style(name, partial=True)
        return style

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles = {}

    def _tile(self, view: RankView, width: int, base: Style) -> list[Segment]:
        state_style = self._style(f"ranktiles--{view.state.value}")
        row_style = base
        if view.rank == self.selected:
            row_style = base + self._style("ranktiles--selected")
        rank_style = state_style
        if view.rank == self._root_cause:
            rank_style = state_style + self._style("ranktiles--root-cause")
        pieces: list[tuple[str, Style | None]] = [
            (f"{view.rank:>3} ", rank_style),
            (f"{GLYPHS[view.state]} ", state_style),
        ]
        status = f"{tile_status(view, self._now):<8.8}"
        if view.straggler or view.input_wait is not None:
            # On a background of its own: it must stand out on the selected row too.
            mark = status.rstrip()
            which = "ranktiles--waiting" if view.input_wait is not None else "ranktiles--straggler"
            pieces.append((mark, self._style(which)))
            pieces.append((status[len(mark):] + " ", state_style))
        else:
            pieces.append((f"{status} ", state_style))
        if view.state.is_alive and view.cpu_percent is not None:
            cpu = f"{view.cpu_percent:4.0f}% "
            if width >= NARROW_TILE:
                cpu += f"{format_bytes(view.rss_bytes):>5} "
            pieces.append((cpu, None))
        elif view.state.is_alive or width >= NARROW_TILE:
            pieces.append((" " * (12 if width >= NARROW_TILE else 6), None))
        # else: an ended rank in a narrow tile gives its blank CPU column to its last line
        last = _without_own_rank(plain_text(view.last_line).strip(), view.rank)
        if view.input_wait is not None and view.input_wait.where:
            last = f"{short_where(plain_text(view.input_wait.where))} {last}"
        pieces.append((last, None if view.state.is_alive else _DIM))
        return tile_segments(pieces, width, row_style)

    # -- mouse -----------------------------------------------------------------------------

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        width = self.scrollable_content_region.width
        column = min(self.columns - 1, offset.x // max(1, width // self.columns))
        rank = self.rank_at(column, self.scroll_offset.y + offset.y)
        if rank is None:
            return
        if event.chain >= 2:
            self.post_message(ZoomRequested(rank))
        else:
            self.post_message(RankSelected(rank))
