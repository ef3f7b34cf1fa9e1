"""A node's run end with its ranks as the job numbers them (a node's supervisor keys them
by local rank): for the headless report and for a viewer of every node; and the stack
dumps of several nodes as one dump of the job."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from ..events import RunFinished
from ..forensics.stacks import StackDump, merge
from ..result import RunProcsResult

__all__ = ["finished_globally", "joined_dumps"]


def finished_globally(finished: RunFinished, base: int) -> RunFinished:
    """``finished`` keyed by global rank (local rank + ``base``)."""
    r = finished.result

    def shift(d: dict[int, Any]) -> dict[int, Any]:
        return {base + k: v for k, v in d.items()}

    result = RunProcsResult(
        return_values=shift(r.return_values), failures=shift(r.failures),
        stdouts=shift(r.stdouts), stderrs=shift(r.stderrs), stopped=shift(r.stopped),
    )
    root = None if finished.root_cause_rank is None else base + finished.root_cause_rank
    return dataclasses.replace(finished, result=result, root_cause_rank=root)


def joined_dumps(parts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Several nodes' dumps (``StackDump.to_dict``, each keyed by global rank: a node's
    supervisor names its ranks as the job does) as one: every rank, the groups merged again
    across the nodes (so that the odd ranks stand out of the whole job, and ranks waiting
    in different collectives stay apart), the earliest time, each node's file named."""
    dumps = [StackDump.from_dict(p) for p in parts]
    if not dumps:
        return StackDump(0.0, ()).to_dict()
    ranks = {r.rank: r for d in dumps for r in d.ranks}
    labels = {rank: g.collective for d in dumps for g in d.groups if g.collective
              for rank in g.ranks}
    first = dumps[0]
    joined = dataclasses.replace(
        first, time=min(d.time for d in dumps),
        ranks=tuple(ranks[r] for r in sorted(ranks)),
        groups=merge(list(ranks.values()), labels),
        problem="; ".join(dict.fromkeys(d.problem for d in dumps if d.problem)),
        path="; ".join(d.path for d in dumps if d.path),
    )
    return joined.to_dict()
