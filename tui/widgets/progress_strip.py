"""ProgressStrip: every rank in one line, a cell each, coloured by how far behind it is.

A heatmap of the whole job above the panes (or the tiles): a cell's colour says how far the
rank is behind the median step (green keeping up, yellow half way to a straggler, red a
straggler, grey nothing to compare), its height how fresh its output is against its peers'
usual gap between lines (a full block: just wrote; the lower, the longer silent; ``▁`` three
usual gaps or more). Ended ranks show their state's glyph. After the cells: the median step
and the stragglers. With more ranks than columns, one cell stands for a few neighbouring ranks
and shows the worst of them. Reads ``RankView`` fields that ``RunView.update_progress`` sets.
"""

from __future__ import annotations

import math
from typing import Final

from rich.text import Text
from textual import events

from ...engine.states import RankState
from ..messages import RankSelected
from ..model import QUIET_S, RankView, RunView
from .rank_pane import GLYPHS
from .text_bar import TextBar

__all__ = ["ProgressStrip", "strip_text"]

LABEL: Final = " ranks "
_HEIGHTS: Final = ((1.0, "█"), (1.5, "▆"), (2.0, "▄"), (3.0, "▂"))
"""(silence in peers' usual gaps below which, glyph); longer than the last: ``▁``."""


def _age_units(view: RankView, now: float) -> float:
    """Its silence in peers' usual gaps; without them, ``QUIET_S`` counts as three."""
    if view.silence_ratio is not None:
        return view.silence_ratio
    if view.last_output_at is None:
        return 0.0
    return 3.0 * max(0.0, now - view.last_output_at) / QUIET_S


def _severity(view: RankView, now: float) -> int:
    """-1 nothing to compare, 0 keeping up, 1 half way to a straggler, 2 a straggler, 3 a
    failure (worse is higher: a cell of several ranks shows its worst)."""
    if view.state is not RankState.RUNNING:
        return 3 if view.failed else -1
    if view.straggler:
        return 2
    units = _age_units(view, now)
    lagging = (
        view.behind is not None and bool(view.lag_threshold)
        and view.behind >= (view.lag_threshold or 0) / 2
    )
    if lagging or units >= 1.5:
        return 1
    return 0 if view.behind is not None or view.silence_ratio is not None else -1


def _layout(count: int, width: int) -> tuple[str, int]:
    """The label and how many ranks a cell stands for, so that every rank fits ``width``."""
    if count <= max(1, width - len(LABEL) - 1):
        return LABEL, 1
    per = 2
    while True:
        label = f" ranks/{per} "
        if math.ceil(count / per) <= max(1, width - len(label) - 1):
            return label, per
        per += 1


def _cell(view: RankView, now: float) -> tuple[str, str]:
    """(glyph, style) of one rank."""
    if view.state is not RankState.RUNNING:
        style = {
            RankState.STARTING: "blue",
            RankState.TERMINATING: "yellow",
            RankState.RESTARTING: "yellow",
            RankState.SUCCEEDED: "dim",
        }.get(view.state, "dim" if view.stopped else "bold red")
        return GLYPHS[view.state], style
    units = _age_units(view, now)
    glyph = next((g for limit, g in _HEIGHTS if units < limit), "▁")
    severity = _severity(view, now)
    style = {2: "bold red", 1: "yellow", 0: "green"}.get(severity, "bright_black")
    return glyph, style


def strip_text(run: RunView, now: float, *, width: int) -> Text:
    """The strip's line for ``width`` cells (see the module docstring)."""
    ranks = run.ranks
    label, per = _layout(len(ranks), width)
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(label, "dim")
    for first in range(0, len(ranks), per):
        group = ranks[first:first + per]
        worst = max(group, key=lambda v: (_severity(v, now), _age_units(v, now)))
        text.append(*_cell(worst, now))
    stragglers = [v.rank for v in ranks if v.straggler]
    tail = Text()
    if run.median_step is not None and run.progress_kind:
        kind = "step" if run.progress_kind in ("custom", "tqdm") else run.progress_kind
        tail.append(f"  median {kind} {run.median_step:g}", "dim")
    if stragglers:
        named = ", ".join(map(str, stragglers[:6])) + (" …" if len(stragglers) > 6 else "")
        word = "straggler" if len(stragglers) == 1 else "stragglers"
        tail.append(f"  ⚠ {word}: {named}", "bold red")
    if text.cell_len + tail.cell_len <= width:
        text.append_text(tail)
    elif stragglers:
        text.append(f" ⚠{len(stragglers)}", "bold red")
    return text


class ProgressStrip(TextBar):
    """One line above the ranks; a click on a cell selects its rank."""

    DEFAULT_CSS = """
    ProgressStrip {
        background: $surface;
    }
    """

    _args: tuple[RunView, float] | None = None

    def show(self, run: RunView, now: float) -> None:
        self._args = (run, now)
        self._fit()

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        if self._args is None:
            return
        run, now = self._args
        self.show_text(strip_text(run, now, width=self.size.width or 80))

    def on_click(self, event: events.Click) -> None:
        if self._args is None:
            return
        run = self._args[0]
        label, per = _layout(len(run.ranks), self.size.width or 80)
        rank = (event.x - len(label)) * per
        if event.x >= len(label) and 0 <= rank < len(run.ranks):
            event.stop()
            self.post_message(RankSelected(rank))
