"""One Flight Recorder reading for a whole multi-node job: every node's ranks, by global rank.

Each node's supervisor asks only its own ranks, so alone it cannot see that a whole other
node never entered the collective its ranks wait in: on that node no rank is missing, and
on this one every rank entered. Each node therefore publishes a small summary of its ranks'
readings (``summary_of``: per rank and process group the last collective enqueued, with its
op, sizes, dtypes and creation time, the last started and completed numbers, when the rank
was asked, and how a person holds it), numbered as the job numbers them; a node reads the
others' back (``readings_of``) and draws its verdicts from the union (``job_readings``).
The summary is a few hundred bytes a rank; a node needs the others' only while one of its
ranks waits in a collective (``waits_in_collective``), or when a person asks.

Times are each node's wall clock (torch's ``time_created_ns`` is too): nodes whose clocks
differ by more than ``collectives.ON_ITS_WAY_NS`` may leave a rank "not known".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from .collectives import Collective, GroupState, RankCollectives

__all__ = ["WAITING_S", "job_readings", "readings_of", "renumbered", "summary_of",
           "waits_in_collective"]

WAITING_S: Final = 1.0
"""How long a rank must have waited in a collective before its node reads the others'."""
_TEXT_CAP: Final = 200
"""Characters kept of an op, a group's name, a hold's words (another node's text)."""
_GROUPS_CAP: Final = 64
"""Process groups kept per rank in a summary."""


def renumbered(readings: Iterable[RankCollectives], base: int) -> list[RankCollectives]:
    """``readings`` of one node's local ranks, numbered as the job numbers them."""
    return [replace(r, rank=base + r.rank) for r in readings]


def _coll(c: Collective | None) -> list[Any] | None:
    if c is None:
        return None
    return [c.op, c.seq, list(c.sizes), list(c.dtypes), c.created_ns]


def summary_of(readings: Iterable[RankCollectives], base: int,
               held: Mapping[int, str] | None = None, now_ns: int = 0) -> dict[str, Any]:
    """This node's readings as the others read them (``readings_of``); ``held``: how a
    person holds each local rank; ``waiting``: whether a rank waits in a collective."""
    held = held or {}
    ranks = []
    mine = list(readings)
    for r in mine:
        entry: dict[str, Any] = {"rank": base + r.rank, "at": r.at_ns}
        if r.error:
            entry["error"] = r.error[:_TEXT_CAP]
        if r.rank in held:
            entry["held"] = held[r.rank][:_TEXT_CAP]
        entry["groups"] = [
            [g.pg, g.desc, _coll(g.last_enqueued),
             g.last_started.seq if g.last_started else 0,
             g.last_completed.seq if g.last_completed else 0]
            for g in r.groups[:_GROUPS_CAP]
        ]
        ranks.append(entry)
    return {"ranks": ranks, "waiting": waits_in_collective(mine, now_ns)}


def _text(v: Any) -> str:
    return str(v)[:_TEXT_CAP] if isinstance(v, (str, int)) else ""


def _seq(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


def _collective(v: Any) -> Collective | None:
    if not isinstance(v, list) or len(v) != 5:
        return None
    op, seq, sizes, dtypes, created = v
    if not _seq(seq) or not isinstance(sizes, list) or not isinstance(dtypes, list):
        return None
    return Collective(_text(op) or "?", seq, tuple(sizes), _seq(created),
                      tuple(_text(d) for d in dtypes))


def _numbered(seq: int, last: Collective | None) -> Collective | None:
    if not seq:
        return None
    return last if last is not None and last.seq == seq else Collective("?", seq)


def readings_of(summary: Any, *, world_size: int | None = None,
                ) -> tuple[list[RankCollectives], dict[int, str]]:
    """Another node's summary read back: its ranks' readings (global ranks) and how a
    person holds each held one. Tolerant: what is not a summary's shape is left out, and a
    rank outside ``world_size`` too (another node's record is input, not trusted)."""
    readings: list[RankCollectives] = []
    held: dict[int, str] = {}
    entries = summary.get("ranks") if isinstance(summary, dict) else None
    for e in entries if isinstance(entries, list) else ():
        if not isinstance(e, dict):
            continue
        rank = e.get("rank")
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
            continue
        if world_size is not None and rank >= world_size:
            continue
        groups = []
        for g in e.get("groups") or ():
            if not isinstance(g, list) or len(g) != 5:
                continue
            pg, desc, enq, started, completed = g
            last = _collective(enq)
            groups.append(GroupState(_text(pg), _text(desc), last,
                                     _numbered(_seq(started), last),
                                     _numbered(_seq(completed), last)))
        readings.append(RankCollectives(rank, tuple(groups), _text(e.get("error", "")),
                                        _seq(e.get("at"))))
        if e.get("held"):
            held[rank] = _text(e["held"])
    return readings, held


def job_readings(local: Sequence[RankCollectives], base: int,
                 remote: Iterable[RankCollectives]) -> list[RankCollectives]:
    """This node's readings (local ranks, numbered from ``base``) with the other nodes'
    (global already), by global rank; a rank this node runs is read from here only."""
    out = {r.rank: r for r in renumbered(local, base)}
    for r in remote:
        seen = out.get(r.rank)
        if seen is None or (r.rank not in {base + x.rank for x in local}
                            and r.at_ns > seen.at_ns):
            out[r.rank] = r
    return [out[k] for k in sorted(out)]


def waits_in_collective(readings: Iterable[RankCollectives], now_ns: int,
                        min_s: float = WAITING_S) -> bool:
    """Whether a rank has waited in a collective (enqueued, not completed) for ``min_s``."""
    for r in readings:
        for g in r.groups:
            c = g.last_enqueued
            done = g.last_completed.seq if g.last_completed else 0
            if c is not None and c.seq > done and c.created_ns and (
                    now_ns - c.created_ns) / 1e9 >= min_s:
                return True
    return False
