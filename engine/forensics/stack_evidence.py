"""Stacks as evidence: one rank's main thread outside any collective while its peers wait in
one. A py-spy dump (``stacks.StackDump``) taken while a job hangs shows it directly; the
frame that says "in a collective" is one of ``torch.distributed``'s collective functions (or
any frame of ``distributed_c10d.py``), found anywhere in the main thread's stack."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .stacks import RankStack, StackDump

__all__ = ["OutsideCollective", "collective_of", "outside_collective"]

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
        from .collectives import ranks_words

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
