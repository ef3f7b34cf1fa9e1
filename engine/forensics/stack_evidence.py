"""Stacks as evidence: one rank's main thread outside any collective while its peers wait in
one. A py-spy dump (``stacks.StackDump``) taken while a job hangs shows it directly; the
frame that says "in a collective" is one of ``torch.distributed``'s collective functions (or
any frame of ``distributed_c10d.py``), found anywhere in the main thread's stack.

With the Flight Recorder beside it, ranks in the same frame at different collective numbers
(two in all_reduce #5, one still in #4) are not one group: ``regrouped`` splits them, and each
group names its collective."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Final

from .collectives import RankCollectives, ranks_words
from .stacks import RankStack, StackDump, merge

__all__ = ["OutsideCollective", "collective_labels", "collective_of", "outside_collective",
           "regrouped"]

_OPS: Final = frozenset({
    "all_reduce", "broadcast", "barrier", "all_gather", "all_gather_into_tensor",
    "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "reduce",
    "gather", "scatter", "monitored_barrier", "all_gather_object", "broadcast_object_list",
})


@dataclass(frozen=True, slots=True)
class OutsideCollective:
    rank: int
    waiting: tuple[int, ...]
    op: str
    where: str
    """The odd rank's innermost frame ("job.py:12 in train")."""

    def words(self) -> str:
        return (f"rank {self.rank}: its main thread is outside any collective (at "
                f"{self.where}) while {ranks_words(self.waiting)} wait in {self.op} "
                "(py-spy stacks)")


def collective_of(stack: RankStack) -> str | None:
    """The collective the rank's main thread is in (its op), None if it is in none."""
    main = stack.main_thread
    if main is None:
        return None
    for f in main.frames:
        if f.name in _OPS and ("distributed" in f.filename or f.filename.endswith("c10d.py")):
            return f.name
    for f in main.frames:
        if f.filename.endswith("distributed_c10d.py"):
            return f.name
    return None


def outside_collective(dump: StackDump) -> OutsideCollective | None:
    """The one readable rank outside any collective while every other waits in one."""
    read = [s for s in dump.ranks if not s.error and s.main_thread is not None]
    if len(read) < 2:
        return None
    ops = {s.rank: collective_of(s) for s in read}
    outside = [r for r, op in ops.items() if op is None]
    if len(outside) != 1:
        return None
    odd = next(s for s in read if s.rank == outside[0])
    main = odd.main_thread
    top = main.frames[0] if main is not None and main.frames else None
    where = f"{top.short_filename}:{top.line} in {top.name}" if top is not None else "?"
    waiting = tuple(sorted(r for r in ops if r != odd.rank))
    op = next(op for r, op in sorted(ops.items()) if op is not None)
    return OutsideCollective(odd.rank, waiting, op, where)


def collective_labels(dump: StackDump, readings: Iterable[RankCollectives]) -> dict[int, str]:
    """rank -> the collective its main thread waits in, by number ("all_reduce #5 on pg
    0"), for the ranks whose stack is in a collective and whose Flight Recorder answered."""
    by_rank = {r.rank: r for r in readings if not r.error}
    out: dict[int, str] = {}
    for s in dump.ranks:
        op = collective_of(s) if not s.error else None
        fr = by_rank.get(s.rank)
        if op is None or fr is None:
            continue
        pending = [(g.last_enqueued.created_ns, g.pg, g.last_enqueued) for g in fr.groups
                   if g.last_enqueued is not None]
        if pending:
            _, pg, c = max(pending, key=lambda x: (x[0], x[2].seq))
            out[s.rank] = f"{c.op} #{c.seq} on pg {pg}"
    return out


def regrouped(dump: StackDump, readings: Iterable[RankCollectives]) -> StackDump:
    """``dump`` with its groups split by the collective each rank waits in."""
    labels = collective_labels(dump, readings)
    if not labels:
        return dump
    return replace(dump, groups=merge(dump.ranks, labels))
