"""The collectives of the stacks view (S): which rank did not enter a collective, and a table.

Fed the JSON of ``rankvisor collectives --json`` (engine/control/COLLECTIVES.md), as the
engine's ``ReadCollectives`` hands it back or a saved capture holds it. The verdicts come
first, in words; then one row per rank and process group with the last collective it
enqueued, started and completed. A rank a verdict names as missing is odd, and its rows are
marked as the odd stack group is. Up to ``FOLD_OVER`` ranks every row shows, in rank order;
with more the odd rows come first, then one row for each set of ranks that say the same
(same group, same three collectives), its ranks counted: 64 ranks stay a few lines. Ranks
that could not be asked are one line per reason. Everything a rank's torch said (op names,
group descriptions, errors) is shown as plain text, cut to fit 80 columns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ...engine.forensics.collectives import ranks_words
from ...engine.forensics.collectives_run import NO_VERDICT
from ...engine.output.safe_text import one_line

__all__ = ["FOLD_OVER", "Row", "collectives_view", "rank_ranges", "table_rows",
           "verdict_words"]

FOLD_OVER: Final = 8
"""More ranks than this and the rows that agree are folded into one, counted."""
ODD_STYLE: Final = "bold yellow"
"""The odd rows' style (the odd stack group is in the theme's warning colour)."""


@dataclass(frozen=True, slots=True)
class Row:
    """One row of the table: one rank (or, folded, every rank that says the same) in one
    process group."""

    ranks: tuple[int, ...]
    group: str
    enqueued: str
    started: str
    completed: str
    odd: bool = False

    def who(self) -> str:
        """``1``, or ``62 ranks`` over ``0, 2-63`` for a folded row."""
        if len(self.ranks) == 1:
            return str(self.ranks[0])
        return f"{len(self.ranks)} ranks\n{rank_ranges(self.ranks)}"


def rank_ranges(ranks: Sequence[int]) -> str:
    """``[0, 2, 3, 4, 7]`` -> "0, 2-4, 7"."""
    out: list[str] = []
    run: list[int] = []
    for r in sorted(ranks):
        if run and r == run[-1] + 1:
            run.append(r)
            continue
        if run:
            out.append(_span(run))
        run = [r]
    if run:
        out.append(_span(run))
    return ", ".join(out)


def _span(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


def _coll(c: Mapping[str, Any] | None) -> str:
    if not c:
        return "-"
    op = one_line(c.get("op", "?"), 40)
    seq = c.get("seq", "?")
    return f"#{seq}" if op == "?" else f"{op} #{seq}"


def _group(g: Mapping[str, Any]) -> str:
    desc = one_line(g.get("desc") or "", 40)
    pg = one_line(g.get("pg", "?"), 20)
    return f"{pg} ({desc})" if desc else pg


def _missing(data: Mapping[str, Any]) -> set[tuple[str, int]]:
    """(pg, rank) of every rank a verdict names as missing."""
    out: set[tuple[str, int]] = set()
    for v in data.get("verdicts") or ():
        for r in v.get("missing") or ():
            out.add((str(v.get("pg", "")), int(r)))
    return out


def table_rows(data: Mapping[str, Any], fold_over: int = FOLD_OVER) -> list[Row]:
    """The table's rows: every rank's in rank order, or (more than ``fold_over`` ranks) the
    odd ones first and each set of ranks that say the same folded into one row."""
    missing = _missing(data)
    ranks = [r for r in data.get("ranks") or () if not r.get("error")]
    rows = [
        Row((int(r["rank"]),), _group(g), _coll(g.get("last_enqueued")),
            _coll(g.get("last_started")), _coll(g.get("last_completed")),
            (str(g.get("pg", "")), int(r["rank"])) in missing)
        for r in ranks for g in r.get("groups") or ()
    ]
    if len(data.get("ranks") or ()) <= fold_over:
        return rows
    folded: dict[tuple[bool, str, str, str, str], list[int]] = {}
    for row in rows:
        key = (row.odd, row.group, row.enqueued, row.started, row.completed)
        folded.setdefault(key, []).extend(row.ranks)
    out = [Row(tuple(rs), *key[1:], odd=key[0]) for key, rs in folded.items()]
    # The odd first; then the most ranks first (what most ranks say), then by rank.
    return sorted(out, key=lambda r: (not r.odd, -len(r.ranks), r.ranks))


def verdict_words(verdict: Mapping[str, Any]) -> str:
    """The verdict's words, each list of more than ``FOLD_OVER`` ranks counted and shown as
    ranges: "63 ranks (0, 2-63) entered it" rather than sixty-three numbers."""
    words = one_line(verdict.get("words", ""), 4000)
    for key, verb in (("entered", " entered it"), ("missing", " did not"),
                      ("unknown", ": not known")):
        ranks = [int(r) for r in verdict.get(key) or ()]
        if len(ranks) > FOLD_OVER:
            words = words.replace(f"{ranks_words(ranks)}{verb}",
                                  f"{len(ranks)} ranks ({rank_ranges(ranks)}){verb}", 1)
    return words


def _errors(data: Mapping[str, Any]) -> list[Text]:
    """One line per reason a rank could not be asked, its ranks named."""
    by_reason: dict[str, list[int]] = {}
    for r in data.get("ranks") or ():
        if r.get("error"):
            by_reason.setdefault(one_line(r["error"], 200), []).append(int(r["rank"]))
    return [Text(f"{ranks_words(rs) if len(rs) <= 3 else 'ranks ' + rank_ranges(rs)}: {why}",
                 "red") for why, rs in by_reason.items()]


def collectives_view(data: Mapping[str, Any], caption: str) -> RenderableType:
    """The verdicts in words, the table, and the ranks that could not be asked."""
    parts: list[RenderableType] = [Text.assemble(
        ("collectives", "bold"), (f" · torch's Flight Recorder · {caption}", "dim"))]
    verdicts = [verdict_words(v) for v in data.get("verdicts") or ()]
    parts += [Text(w, ODD_STYLE) for w in verdicts] or [Text(NO_VERDICT, "dim")]
    rows = table_rows(data)
    if rows:
        table = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False,
                      header_style="dim")
        table.add_column("", no_wrap=True, width=3)
        table.add_column("rank", overflow="fold", max_width=16)
        for name in ("pg", "enqueued", "started", "completed"):
            table.add_column(name, no_wrap=True, overflow="ellipsis", max_width=22)
        for row in rows:
            table.add_row("odd" if row.odd else "", row.who(), row.group, row.enqueued,
                          row.started, row.completed, style=ODD_STYLE if row.odd else None)
        parts.append(table)
    elif not any(r.get("error") for r in data.get("ranks") or ()):
        parts.append(Text("no rank answered", "dim"))
    parts += _errors(data)
    return Group(*parts)
