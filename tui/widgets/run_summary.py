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
    """The bar's text: ``rankvisor │ ● 3 running ✖ 1 failed │ finished │ 01:02 ...``.

    What stays at any width: the counts by state, the run's state (finished, paused, a
    status word) and the clock, with the suspect and the root cause. With ``width``, when
    the bar is too narrow, the lowest priority first, the parts that may go (the run's name
    and attempt) go and the others take their short form (``● 3`` for ``● 3 running``,
    ``cause 2`` for ``root cause: rank 2``). A new word joins as one more ``_Part`` with a
    short form and ``keep=True``."""
    root = run.root_cause()
    parts: list[_Part] = [_Part(9, Text.assemble((" rankvisor ", "bold reverse")),
                                Text.assemble((" rv ", "bold reverse")))]
    suspect = run.suspect
    if suspect is not None:
        named = ", ".join(map(str, suspect.ranks or (suspect.rank,)))
        parts.append(_Part(
            8, Text.assemble((f" suspect: rank {named} ", "bold yellow"), _BAR),
            Text.assemble((f" suspect {named} ", "bold yellow"), _BAR),
        ))
    elif run.live_suspect:
        # "rank 1: never entered ..." -> "rank 1": the reason is in the error view.
        who = run.live_suspect.split(":", 1)[0]
        parts.append(_Part(
            8, Text.assemble((f" live suspect: {who} ", "bold yellow"), _BAR),
            Text.assemble((f" live {who} ", "bold yellow"), _BAR),
        ))
    if root is not None:
        parts.append(_Part(
            8, Text.assemble((f" root cause: rank {root} ", "bold red"), _BAR),
            Text.assemble((f" cause {root} ", "bold red"), _BAR),
        ))
    parts.append(_Part(2, Text.assemble(
        f" {run.name}{f' · {run.node}' if run.node else ''} · {run.nprocs} ranks"
        f" · attempt {run.attempt} ", _BAR
    ), keep=False))
    counts, short = Text(), Text()
    for glyph, count, words, style in _counts(run):
        counts.append(f" {glyph} {count} {words}", style)
        short.append(f" {glyph}{count}", style)
    counts.append(" │", "dim")
    short.append(" │", "dim")
    parts.append(_Part(7, counts, short))
    waiting = sum(1 for v in run.ranks if v.input_wait is not None)
    if waiting:  # a person is asked something: stays at any width, in a short form
        parts.append(_Part(
            8,
            Text.assemble((f" ⌨ {waiting} at a prompt (p: list, i: answer) ", "bold magenta"),
                          ("│", "dim")),
            Text.assemble((f" ⌨{waiting} ", "bold magenta"), ("│", "dim")),
        ))
    if run.finished:
        parts.append(_Part(6, Text.assemble((" finished ", "bold"), _BAR)))
    if paused:
        parts.append(_Part(5, Text.assemble((" ⏸ paused ", "bold yellow"), _BAR),
                           Text.assemble((" ⏸ ", "bold yellow"), _BAR)))
    if status:
        parts.append(_Part(5, Text.assemble((f" {status} ", "bold yellow"), _BAR)))
    parts.append(_Part(3, Text(f" {_elapsed(elapsed)}", "dim")))
    if width is not None:
        _fit(parts, width)
    text = Text(no_wrap=True, overflow="ellipsis")
    for part in parts:
        text.append_text(part.text)
    return text


_BAR = ("│", "dim")


class _Part:
    """One part of the bar: its text, a shorter form for a narrow terminal, and whether it
    stays at any width (``keep``) or may go."""

    __slots__ = ("keep", "priority", "short", "text")

    def __init__(self, priority: int, text: Text, short: Text | None = None, *,
                 keep: bool = True) -> None:
        self.priority, self.text, self.short, self.keep = priority, text, short, keep


def _fit(parts: list[_Part], width: int) -> None:
    """The lowest priority first, until the parts fit ``width``: a part with a short form
    takes it, one that may go goes."""
    for part in sorted(parts, key=lambda p: p.priority):
        if sum(p.text.cell_len for p in parts) <= width:
            return
        if part.short is not None:
            part.text = part.short
        elif not part.keep:
            parts.remove(part)


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
