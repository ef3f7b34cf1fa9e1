"""Ranks as a person types them (``2``, ``0,2``, ``0-3``, ``all``), checked against a run.

Commands take global ranks. On one node they are the supervisor's own; in a multi-node run
the node's status.json lists every rank of every node with its ``node_rank``, ``local_rank``
and ``host``, so a global rank becomes this node's local rank (as the supervisor's commands
take them), or a refusal that names the node where the command would act.
"""

from __future__ import annotations

import argparse
from typing import Any

from ...engine.control import registry
from .command import Refused, Usage
from .rank_list import parse_ranks

__all__ = [
    "Elsewhere",
    "all_ranks",
    "check_ranks",
    "is_cluster",
    "local_ranks",
    "nprocs",
    "parse_ranks",
    "on_node",
    "ranks_arg",
    "same_round",
    "targets",
    "world",
]


class Elsewhere(Refused):
    """A rank that runs on another node: ``logs`` and ``stack`` go there (through its
    door), the other commands say where it runs."""

    def __init__(self, rank: int, record: dict[str, Any]) -> None:
        self.rank = rank
        self.node = int(record.get("node_rank", 0))
        self.local = int(record.get("local_rank", 0))
        self.host = str(record.get("host"))
        super().__init__(f"rank {rank} runs on node {self.node} ({self.host}): run the "
                         "command there")


def on_node(ranks: tuple[int, ...], status: dict[str, Any]) -> dict[int, tuple[int, ...]]:
    """Global ranks by the node they run on, as that node's local ranks (status.json's
    list); a rank no record names is left out."""
    every = {int(r["rank"]): r for r in status.get("ranks") or []
             if isinstance(r, dict) and isinstance(r.get("rank"), int)}
    out: dict[int, list[int]] = {}
    for rank in ranks:
        if rank in every:
            r = every[rank]
            out.setdefault(int(r.get("node_rank", 0)), []).append(int(r.get("local_rank", 0)))
    return {node: tuple(locals_) for node, locals_ in out.items()}


def ranks_arg(text: str, p: argparse.ArgumentParser, *,
              allow_all: bool = True) -> tuple[int, ...] | None:
    """``parse_ranks`` for a command's argument: a bad one is the parser's usage error."""
    try:
        return parse_ranks(text, allow_all=allow_all)
    except ValueError as e:
        p.error(str(e))


def check_ranks(ranks: tuple[int, ...], nprocs: int | None) -> None:
    if nprocs is None:
        return
    bad = [r for r in ranks if r >= nprocs]
    if bad:
        raise Usage(f"rank {bad[0]} is not in this run (its ranks are 0-{nprocs - 1})")


def is_cluster(status: dict[str, Any] | None) -> bool:
    """Whether ``status`` is a node's of a multi-node run (its ranks carry ``node_rank``)."""
    return bool(status) and isinstance(status.get("node_rank"), int)  # type: ignore[union-attr]


def _here(status: dict[str, Any]) -> list[dict[str, Any]]:
    """This node's ranks in a multi-node status, by local rank."""
    node = status.get("node_rank")
    ranks = [r for r in status.get("ranks") or []
             if isinstance(r, dict) and r.get("node_rank") == node]
    return sorted(ranks, key=lambda r: int(r.get("local_rank", 0)))


def local_ranks(ranks: tuple[int, ...], status: dict[str, Any] | None) -> tuple[int, ...]:
    """Global ranks (as commands take them) as this node's local ranks (as the supervisor's
    commands take them). On one node they are the same.

    Raises:
        Refused: a rank that runs on another node (or on none this node has heard of).
    """
    if not is_cluster(status):
        return ranks
    assert status is not None
    node = status.get("node_rank")
    every = {int(r["rank"]): r for r in status.get("ranks") or []
             if isinstance(r, dict) and isinstance(r.get("rank"), int)}
    out: list[int] = []
    for rank in ranks:
        r = every.get(rank)
        if r is None:
            here = [int(x["rank"]) for x in _here(status)]
            span = f"ranks {min(here)}-{max(here)}" if here else "no ranks yet"
            raise Refused(f"rank {rank} is not on this node (node {node} has {span}) and no "
                          "other node's record names it yet: run the command on its node")
        if r.get("node_rank") != node:
            raise Elsewhere(rank, r)
        out.append(int(r.get("local_rank", 0)))
    return tuple(out)


def same_round(status: dict[str, Any] | None, handle: Any) -> None:
    """The global-to-local mapping was read from status.json: check it against the live
    supervisor (a new round may have renumbered this node's ranks since).

    Raises:
        Refused: the numbering moved; the command is not sent.
    """
    if not is_cluster(status):
        return
    assert status is not None
    here = _here(status)
    base = int(here[0]["rank"]) - int(here[0].get("local_rank", 0)) if here else 0
    live = int(handle.snapshot().rank_base)
    if live != base:
        raise Refused(f"a new round renumbered this node's ranks (they start at {live} now, "
                      f"not {base}): run the command again")


def world(status: dict[str, Any] | None) -> int | None:
    """The rank count to check global ranks against; None in a multi-node run, where a node
    whose record was not read yet is missing from the list (``local_ranks`` says so)."""
    return None if is_cluster(status) else nprocs(status)


def nprocs(status: dict[str, Any] | None) -> int | None:
    ranks = status.get("ranks") if status else None
    return len(ranks) if isinstance(ranks, list) and ranks else None


def all_ranks(status: dict[str, Any] | None, handle: Any) -> tuple[int, ...]:
    """Every rank of this node, local (a multi-node status lists the other nodes' too)."""
    n = None if is_cluster(status) else nprocs(status)
    return tuple(range(n if n is not None else int(handle.snapshot().nprocs)))


def targets(
    run: str | None, ranks: tuple[int, ...] | None
) -> tuple[registry.RunEntry, dict[str, Any] | None, tuple[int, ...] | None]:
    """The running run RUN names, its status, and ``ranks`` (global, as a person types
    them) as this node's local ranks; None stays None (every rank)."""
    entry = registry.resolve(run, running_only=True)
    status = registry.entry_state(entry)[1]
    if ranks is not None:
        check_ranks(ranks, world(status))
        ranks = local_ranks(ranks, status)
    return entry, status, ranks
