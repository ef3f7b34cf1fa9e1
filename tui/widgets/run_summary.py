"""RunSummary: the one-line bar above the ranks: the run, counts by state, the suspect and
the root cause."""

from __future__ import annotations

from rich.text import Text

from ...engine.states import RankState
from ..model import RunView
from .rank_pane import GLYPHS
from .text_bar import TextBar

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


def _counts(run: RunView) -> list[tuple[str, int, str, str]]:
    """(glyph, count, words, style) by state; a running rank that is SIGSTOPped (the engine's
    stats say "stopped") counts as stopped, not running: it makes no progress; a rank that
    rankvisor's own signal ended counts as stopped by rankvisor, not as failed."""
    out: list[tuple[str, int, str, str]] = []
    stopped = sum(
        1 for v in run.ranks if v.state is RankState.RUNNING and v.proc_status == "stopped"
    )
    # Ranks rankvisor's own signal ended are counted apart: they did not fail.
    ours = sum(1 for v in run.ranks if v.stopped)
    for state, count in run.counts().items():
        if state in (RankState.FAILED, RankState.SIGNALLED):
            count -= sum(1 for v in run.ranks if v.state is state and v.stopped)
            if count:
                out.append((GLYPHS[state], count, state.value, _STATE_STYLE[state]))
            continue
        if state is RankState.RUNNING:
            count -= stopped
            if count:
                out.append((GLYPHS[state], count, state.value, _STATE_STYLE[state]))
            if stopped:
                out.append(("⏸", stopped, "stopped", "bold yellow"))
            continue
        out.append((GLYPHS[state], count, state.value, _STATE_STYLE[state]))
    if ours:  # after the failures, the last of the final states
        out.append(("⊘", ours, "stopped by rankvisor", "dim"))
    return out


def summary_text(
    run: RunView,
    *,
    elapsed: float,
    paused: bool = False,
    status: str = "",
    width: int | None = None,
) -> Text:
    """The bar's text: ``trainer · 4 ranks · attempt 0 │ ● 3 running ✖ 1 failed │ ...``.

    With ``width``, the parts that matter less give way first when the bar is too narrow
    (the run's name, then the elapsed time), so the root cause and the counts stay in sight
    at 80 columns."""
    root = run.root_cause()
    # (priority, text): the lowest priority goes first when the line does not fit.
    parts: list[tuple[int, Text]] = []
    parts.append((9, Text.assemble((" rankvisor ", "bold reverse"))))
    suspect = run.suspect
    if suspect is not None:
        named = ", ".join(map(str, suspect.ranks or (suspect.rank,)))
        parts.append((8, Text.assemble(
            (f" suspect: rank {named} ", "bold yellow"), ("│", "dim")
        )))
    elif run.live_suspect:
        # "rank 1: never entered ..." -> "rank 1": the reason is in the error view.
        who = run.live_suspect.split(":", 1)[0]
        parts.append((8, Text.assemble(
            (f" live suspect: {who} ", "bold yellow"), ("│", "dim")
        )))
    if root is not None:
        parts.append((8, Text.assemble((f" root cause: rank {root} ", "bold red"), ("│", "dim"))))
    parts.append((2, Text.assemble(
        f" {run.name}{f' · {run.node}' if run.node else ''} · {run.nprocs} ranks"
        f" · attempt {run.attempt} ", ("│", "dim")
    )))
    counts = Text()
    for glyph, count, words, style in _counts(run):
        counts.append(f" {glyph} {count} {words}", style)
    counts.append(" │", "dim")
    parts.append((7, counts))
    if run.finished:
        parts.append((6, Text.assemble((" finished ", "bold"), ("│", "dim"))))
    if paused:
        parts.append((5, Text.assemble((" ⏸ paused ", "bold yellow"), ("│", "dim"))))
    if status:
        parts.append((5, Text.assemble((f" {status} ", "bold yellow"), ("│", "dim"))))
    parts.append((3, Text(f" {_elapsed(elapsed)}", "dim")))
    if width is not None:
        while len(parts) > 1 and sum(p.cell_len for _, p in parts) > width:
            lowest = min(range(len(parts)), key=lambda i: parts[i][0])
            del parts[lowest]
    text = Text(no_wrap=True, overflow="ellipsis")
    for _, part in parts:
        text.append_text(part)
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
        self._args = (run, elapsed, paused, status)
        self._fit()

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        args = getattr(self, "_args", None)
        if args is None:
            return
        run, elapsed, paused, status = args
        width = self.size.width or None
        self.show_text(
            summary_text(run, elapsed=elapsed, paused=paused, status=status, width=width)
        )
