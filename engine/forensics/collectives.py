"""The collectives of every rank, from torch's Flight Recorder, and which rank did not enter.

torch's Flight Recorder (FR) keeps, per rank and process group, the sequence number of each
collective the rank enqueued (``collective_seq_id``) and, in ``pg_status``, the last one
enqueued, started and completed. In a hang the odd rank is the one whose last enqueued
collective is behind its peers': ranks 0 and 2 entered all_reduce #5 on pg 0 and wait in it,
rank 1's last was #4. That names the rank that started it even when every rank still prints
(a heartbeat thread, a progress bar), where output silence cannot.

A rank is called missing only when it was asked after a peer had entered the collective
(the entry's creation time): an answer from before that (a rank that died since and left
only an earlier answer) makes it "unknown", never blamed. Parsing is tolerant: an answer
that is not FR JSON is a rank with an ``error``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from .worker_server import Answer

__all__ = [
    "Collective",
    "GroupState",
    "RankCollectives",
    "Verdict",
    "desyncs",
    "parse_answer",
    "parse_fr",
    "ranks_words",
    "snapshot_json",
    "verdicts",
]


@dataclass(frozen=True, slots=True)
class Collective:
    """One collective of one rank: its op and sequence number in its process group."""

    op: str
    seq: int
    sizes: tuple[Any, ...] = ()
    created_ns: int = 0
    dtypes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "seq": self.seq, "sizes": list(self.sizes)}

    def signature(self) -> tuple[str, str, str]:
        """What ranks entering the same collective number must agree on: the op, the
        sizes, the dtypes (as text: sizes are lists)."""
        return (self.op, repr(_plain(self.sizes)), repr(tuple(self.dtypes)))


@dataclass(frozen=True, slots=True)
class GroupState:
    """One process group as one rank saw it."""

    pg: str
    desc: str
    last_enqueued: Collective | None
    last_started: Collective | None
    last_completed: Collective | None

    def to_json(self) -> dict[str, Any]:
        def c(x: Collective | None) -> dict[str, Any] | None:
            return x.to_json() if x is not None else None

        return {"pg": self.pg, "desc": self.desc, "last_enqueued": c(self.last_enqueued),
                "last_started": c(self.last_started), "last_completed": c(self.last_completed)}


@dataclass(frozen=True, slots=True)
class RankCollectives:
    """What one rank's FR said, when (``at_ns``), or why it could not be asked."""

    rank: int
    groups: tuple[GroupState, ...] = ()
    error: str = ""
    at_ns: int = 0

    def group(self, pg: str) -> GroupState | None:
        return next((g for g in self.groups if g.pg == pg), None)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rank": self.rank, "groups": [g.to_json() for g in self.groups]}
        if self.error:
            out["error"] = self.error
        return out


@dataclass(frozen=True, slots=True)
class Verdict:
    """A collective some ranks of a group entered and others did not."""

    pg: str
    desc: str
    op: str
    seq: int
    entered: tuple[int, ...]
    missing: tuple[int, ...]
    last_of: Mapping[int, int] = field(default_factory=dict)
    """Each missing rank's last enqueued sequence number in that group (0: none)."""
    unknown: tuple[int, ...] = ()
    """Ranks whose only answer is from before the others entered it: not blamed."""
    entered_ns: int = 0
    """When the first of ``entered`` entered it (0: not known)."""
    kind: str = "missing"
    """"missing": ``missing`` never entered it; "desync": they entered another collective
    under the same number (another op, sizes or dtypes: ``odd_of`` says which)."""
    odd_of: Mapping[int, str] = field(default_factory=dict)
    """For a desync: what each odd rank entered instead ("barrier", "all_reduce of [[8]]")."""

    def where(self) -> str:
        desc = f" ({self.desc})" if self.desc else ""
        return f"{self.op} #{self.seq} on pg {self.pg}{desc}"

    def words(self) -> str:
        """"all_reduce #5 on pg 0 (default_pg): ranks 0 and 2 entered it; rank 1 did not
        (its last was #4)"; a desync: "...; rank 1 entered barrier #5 instead"."""
        if self.kind == "desync":
            instead = "; ".join(f"rank {r} entered {self.odd_of.get(r, '?')} #{self.seq} "
                                "instead" for r in self.missing)
            return (f"{self.where()}: {ranks_words(self.entered)} entered it; {instead} "
                    "(a desync: the same collective number, another collective)")
        lasts = ", ".join(f"#{self.last_of.get(r, 0)}" if self.last_of.get(r) else "none"
                          for r in self.missing)
        its = "its" if len(self.missing) == 1 else "their"
        text = (f"{self.where()}: {ranks_words(self.entered)} entered it; "
                f"{ranks_words(self.missing)} did not ({its} last was {lasts})")
        if self.unknown:
            text += f"; {ranks_words(self.unknown)}: not known (no answer since)"
        return text

    def suspect_words(self, rank: int) -> str:
        """"rank 1: never entered all_reduce #5 on pg 0, where ranks 0 and 2 waited"."""
        if self.kind == "desync":
            return (f"rank {rank}: entered {self.odd_of.get(rank, '?')} #{self.seq} on pg "
                    f"{self.pg} where {ranks_words(self.entered)} entered {self.op} "
                    f"#{self.seq} (a desync, torch's Flight Recorder)")
        return (f"rank {rank}: never entered {self.op} #{self.seq} on pg {self.pg}, where "
                f"{ranks_words(self.entered)} waited (torch's Flight Recorder; its last was "
                f"#{self.last_of.get(rank, 0)})")

    def to_json(self) -> dict[str, Any]:
        return {"pg": self.pg, "desc": self.desc, "op": self.op, "seq": self.seq,
                "kind": self.kind, "entered": list(self.entered),
                "missing": list(self.missing), "unknown": list(self.unknown),
                "words": self.words()}


def ranks_words(ranks: Sequence[int]) -> str:
    """``[1]`` -> "rank 1"; ``[0, 2]`` -> "ranks 0 and 2"; ``[0, 1, 3]`` -> "ranks 0, 1 and 3"."""
    rs = [str(r) for r in ranks]
    if len(rs) == 1:
        return f"rank {rs[0]}"
    return f"ranks {', '.join(rs[:-1])} and {rs[-1]}"


def _op(entry: Mapping[str, Any]) -> str:
    name = str(entry.get("profiling_name") or "?")
    return name.split(":", 1)[1] if ":" in name else name


def _int(v: Any) -> int | None:
    try:
        n = int(v)
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def parse_fr(rank: int, data: Mapping[str, Any], at_ns: int = 0) -> RankCollectives:
    """One rank's FR dump (torch's ``fr_trace_json`` object, or a dump file's) read."""
    by_pg: dict[str, dict[int, Collective]] = {}
    descs: dict[str, str] = {}
    for e in data.get("entries") or ():
        if not isinstance(e, Mapping) or e.get("is_p2p"):
            continue
        pg_field = e.get("process_group") or ()
        # A wrapped group (TORCH_DISTRIBUTED_DEBUG=DETAIL) records its entries under the
        # name "": its id says which group they belong to.
        pg = str(pg_field[0]) if pg_field and pg_field[0] else str(e.get("pg_id", ""))
        if len(pg_field) > 1 and pg_field[1]:
            descs[pg] = str(pg_field[1])
        seq = _int(e.get("collective_seq_id"))
        if seq is None:
            continue
        sizes = tuple(e.get("input_sizes") or ())
        dtypes = tuple(str(d) for d in e.get("input_dtypes") or ())
        by_pg.setdefault(pg, {})[seq] = Collective(
            _op(e), seq, sizes, int(e.get("time_created_ns") or 0), dtypes)
    groups = []
    status = data.get("pg_status") or {}
    for pg in sorted(set(by_pg) | {str(k) for k in status}, key=lambda p: (len(p), p)):
        st = status.get(pg) or {}
        seen = by_pg.get(pg, {})

        def pick(key: str, seen: dict[int, Collective] = seen, st: Any = st) -> Collective | None:
            n = _int(st.get(key)) if st else None
            if n is None and not st and key == "last_enqueued_collective" and seen:
                n = max(seen)
            if n is None:
                return None
            return seen.get(n) or Collective("?", n)

        groups.append(GroupState(
            pg, descs.get(pg, ""), pick("last_enqueued_collective"),
            pick("last_started_collective"), pick("last_completed_collective"),
        ))
    return RankCollectives(rank, tuple(groups), at_ns=at_ns)


def parse_answer(rank: int, answer: Answer) -> RankCollectives:
    """A rank's ``fr_trace_json`` answer read (an error stays the rank's ``error``)."""
    if not answer.ok:
        return RankCollectives(rank, error=answer.error, at_ns=answer.at_ns)
    try:
        data = json.loads(answer.body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return RankCollectives(rank, error="worker server: not Flight Recorder JSON",
                               at_ns=answer.at_ns)
    if not isinstance(data, dict):
        return RankCollectives(rank, error="worker server: not Flight Recorder JSON",
                               at_ns=answer.at_ns)
    return parse_fr(rank, data, answer.at_ns)


ON_ITS_WAY_NS: Final = 500_000_000
"""How long after its peers entered a collective a rank that has not may still be on its
way in: ranks reach a collective within milliseconds of each other when none hangs (a loaded
machine delays one by tens), and when they all fail at once (a mismatch torch detects) a
rank asked a moment after its peers entered says nothing about a hang."""


def verdicts(ranks: Iterable[RankCollectives]) -> list[Verdict]:
    """For each process group: the furthest collective that some of its ranks entered and
    others, asked well after that (``ON_ITS_WAY_NS``), did not."""
    known = [r for r in ranks if not r.error]
    pgs: dict[str, str] = {}
    for r in known:
        for g in r.groups:
            pgs.setdefault(g.pg, g.desc)
            if g.desc:
                pgs[g.pg] = g.desc
    out = []
    for pg, desc in pgs.items():
        last: dict[int, tuple[int, Collective | None]] = {}
        for r in known:
            g = r.group(pg)
            last[r.rank] = (g.last_enqueued.seq if g and g.last_enqueued else 0,
                            g.last_enqueued if g else None)
        if not last:
            continue
        out.extend(desyncs(pg, desc, last))
        top = max(seq for seq, _ in last.values())
        entered = sorted(rank for rank, (seq, _) in last.items() if seq >= top)
        behind = sorted(rank for rank, (seq, _) in last.items() if seq < top)
        if not behind or top == 0:
            continue
        colls = [c for rank, (_, c) in last.items() if rank in entered and c is not None]
        since = min((c.created_ns for c in colls if c.created_ns), default=0)
        waiting = [r.rank for r in known if r.rank in entered and (g := r.group(pg)) is not None
                   and (g.last_completed is None or g.last_completed.seq < top)]
        if not since and not waiting:
            # When they entered it is not known, and whoever did has completed it (a
            # timeout retires it too): nothing says the others were asked too early.
            continue
        at = {r.rank: r.at_ns for r in known}
        missing = tuple(r for r in behind
                        if not since or at.get(r, 0) >= since + ON_ITS_WAY_NS)
        unknown = tuple(r for r in behind if r not in missing)
        if not missing:
            continue
        op = next((c.op for c in colls if c.op != "?"), "?")
        out.append(Verdict(pg, desc, op, top, tuple(entered), missing,
                           {r: last[r][0] for r in missing}, unknown, since))
    return out


def desyncs(
    pg: str, desc: str, last: Mapping[int, tuple[int, Collective | None]]
) -> list[Verdict]:
    """Ranks of group ``pg`` whose last collective has the number of their peers' but is
    another one (another op, sizes or dtypes): for each number, the ranks off the most
    common collective (on a tie, the one of the lowest rank, as torch's analyser expects
    the first rank's) are the odd ones."""
    by_seq: dict[int, dict[int, Collective]] = {}
    for rank, (seq, c) in last.items():
        if seq and c is not None and c.op != "?":
            by_seq.setdefault(seq, {})[rank] = c
    out = []
    for seq, colls in sorted(by_seq.items()):
        groups: dict[tuple[str, str, str], list[int]] = {}
        for rank in sorted(colls):
            groups.setdefault(colls[rank].signature(), []).append(rank)
        if len(groups) < 2:
            continue
        main = max(groups.values(), key=lambda ranks: (len(ranks), -ranks[0]))
        expected = colls[main[0]]
        odd = tuple(r for r in sorted(colls) if r not in main)
        since = min((c.created_ns for c in colls.values() if c.created_ns), default=0)
        out.append(Verdict(pg, desc, expected.op, seq, tuple(main), odd,
                           {r: seq for r in odd}, (), since, "desync",
                           {r: _differs(colls[r], expected) for r in odd}))
    return out


def _differs(c: Collective, expected: Collective) -> str:
    """What ``c`` is, in the words that set it apart from ``expected``."""
    if c.op != expected.op:
        return c.op
    if _plain(c.sizes) != _plain(expected.sizes):
        return f"{c.op} of sizes {json.dumps(c.sizes)}"
    return f"{c.op} of {', '.join(c.dtypes) or 'another dtype'}"  # the dtypes differ


def _plain(v: Any) -> Any:
    """Sizes as plain nested tuples (JSON gives lists)."""
    if isinstance(v, (list, tuple)):
        return tuple(_plain(x) for x in v)
    return v


def snapshot_json(ranks: Sequence[RankCollectives]) -> dict[str, Any]:
    """The JSON of ``rankvisor collectives --json`` (COLLECTIVES.md)."""
    return {"ranks": [r.to_json() for r in sorted(ranks, key=lambda r: r.rank)],
            "verdicts": [v.to_json() for v in verdicts(ranks)]}
