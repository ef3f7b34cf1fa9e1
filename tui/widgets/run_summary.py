"""RunSummary: the one-line bar above the ranks: the run, counts by state, root cause."""

from __future__ import annotations

from rich.text import Text

from engine.states import RankState
from tui.model import RunView
from tui.widgets.rank_pane import GLYPHS
from tui.widgets.text_bar import TextBar

__all__ = ["RunSummary", "summary_text"]

_STATE_STYLE = {
    RankState.STARTING: "bold blue",
    RankState.RUNNING: "bold green",
    RankState.TERMINATING: "bold yellow",
    RankState.RESTARTING: "bold yellow",
    RankState.SUCCEEDED: "bold",
    RankState.FAILED: "bold red",
    RankState.SIGNALLED: "bold red",
}


def _elapsed(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    return (
        f"{hours}:{rest // 60:02d}:{rest % 60:02d}"
        if hours
        else f"{rest // 60:02d}:{rest % 60:02d}"
    )


def summary_text(run: RunView, *, elapsed: float, paused: bool = False, status: str = "") -> Text:
    """The bar's text: ``trainer · 4 ranks · attempt 0 │ ● 3 running ✖ 1 failed │ ...``."""
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(" rankvisor ", "bold reverse")
    text.append(f" {run.name} · {run.nprocs} ranks · attempt {run.attempt} ")
    text.append("│", "dim")
    for state, count in run.counts().items():
        text.append(f" {GLYPHS[state]} {count} {state.value}", _STATE_STYLE[state])
    text.append(" │", "dim")
    root = run.root_cause()
    if root is not None:
        text.append(f" root cause: rank {root} ", "bold red")
        text.append("│", "dim")
    if run.finished:
        text.append(" finished ", "bold")
        text.append("│", "dim")
    if paused:
        text.append(" ⏸ paused ", "bold yellow")
        text.append("│", "dim")
    if status:
        text.append(f" {status} ", "bold yellow")
        text.append("│", "dim")
    text.append(f" {_elapsed(elapsed)}", "dim")
    return text


class RunSummary(TextBar):
    """Docked at the top of the main screen.

    A plain widget that repaints itself, not a ``Static``: ``Static.update`` asks for a new
    layout of the whole screen, and this bar changes every second."""

    DEFAULT_CSS = """
    RunSummary {
        dock: top;
        background: $panel;
    }
    """

    def show(self, run: RunView, *, elapsed: float, paused: bool, status: str = "") -> None:
        self.show_text(summary_text(run, elapsed=elapsed, paused=paused, status=status))
