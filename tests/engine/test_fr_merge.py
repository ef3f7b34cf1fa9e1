"""One Flight Recorder verdict for a multi-node job (engine/forensics/fr_merge.py), as tables:
two nodes of two ranks each (node 0: global ranks 0, 1; node 1: global ranks 2, 3), each
node's readings in its local ranks, node 1's sent as its summary through JSON (as the
rendezvous store carries it), merged on node 0, the verdicts drawn from the whole job. No
process: readings at given times. Also the stack dumps of two nodes joined into one."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rankvisor.engine.cluster.renumber import joined_dumps
from rankvisor.engine.forensics.collectives import (
    Collective,
    GroupState,
    RankCollectives,
    verdicts,
)
from rankvisor.engine.forensics.fr_merge import (
    job_readings,
    readings_of,
    summary_of,
    waits_in_collective,
)
from rankvisor.engine.forensics.stacks import Frame, RankStack, StackDump, ThreadStack

S = 1_000_000_000
T = 1_000 * S
"""When ranks 0 and 1 entered all_reduce #5."""


def _rank(local: int, seq: int, done: int, *, op: str = "all_reduce", at: int = T + 2 * S,
          sizes: tuple[Any, ...] = ([4],), created: int = T) -> RankCollectives:
    """A rank whose last collective on pg 0 is ``op`` #``seq``, #``done`` completed."""
    last = Collective(op, seq, sizes, created, ("Float",))
    completed = last if done == seq else Collective("all_reduce", done)
    return RankCollectives(local, (GroupState("0", "default_pg", last, None, completed),),
                           at_ns=at)


WAITING_5 = [_rank(0, 5, 4), _rank(1, 5, 4)]
"""Node 0: both ranks entered all_reduce #5 and wait in it."""
PAST_4 = [_rank(0, 4, 4, created=T - S), _rank(1, 4, 4, created=T - S)]
"""Both ranks of a node whose last collective is #4, completed."""


def _through_store(readings: list[RankCollectives], base: int,
                   held: dict[int, str] | None = None) -> tuple[list[RankCollectives],
                                                                dict[int, str]]:
    """A node's readings as another node reads them back: summary, JSON, parsed."""
    data = json.dumps(summary_of(readings, base, held, T + 2 * S))
    return readings_of(json.loads(data), world_size=4)


def _said(vs: list[Any]) -> list[tuple[str, str, int, tuple[int, ...], tuple[int, ...]]]:
    return [(v.kind, v.op, v.seq, v.entered, v.missing) for v in vs]


MERGES = {
    # A whole node never entered the collective: nobody on either node alone sees it.
    "node 1 skipped all_reduce #5": (
        PAST_4, [("missing", "all_reduce", 5, (0, 1), (2, 3))]),
    "one rank of node 1 skipped it": (
        [_rank(0, 5, 4), _rank(1, 4, 4, created=T - S)],
        [("missing", "all_reduce", 5, (0, 1, 2), (3,))]),
    "a desync across the nodes": (
        [_rank(0, 5, 4, op="barrier", sizes=()), _rank(1, 5, 4)],
        [("desync", "all_reduce", 5, (0, 1, 3), (2,))]),
    "a size mismatch across the nodes": (
        [_rank(0, 5, 4), _rank(1, 5, 4, sizes=([8],))],
        [("desync", "all_reduce", 5, (0, 1, 2), (3,))]),
    "every rank entered it": ([_rank(0, 5, 4), _rank(1, 5, 4)], []),
    # Node 1 asked its ranks before node 0's entered #5: nothing says they skipped it.
    "node 1's answer is older than the collective": (
        [_rank(0, 4, 4, at=T - S, created=T - S), _rank(1, 4, 4, at=T - S, created=T - S)],
        []),
}


@pytest.mark.parametrize("remote, said", MERGES.values(), ids=MERGES.keys())
def test_node_0s_verdict_covers_node_1s_ranks_by_global_rank(
        remote: list[RankCollectives], said: list[Any]) -> None:
    alone = [r for r in verdicts(WAITING_5)]
    assert alone == []  # node 0 alone: every one of its ranks entered
    theirs, _held = _through_store(remote, base=2)
    assert [r.rank for r in theirs] == [2, 3]
    merged = job_readings(WAITING_5, 0, theirs)
    assert [r.rank for r in merged] == [0, 1, 2, 3]
    assert _said(verdicts(merged)) == said


def test_an_old_answer_of_node_1_is_not_known_rather_than_blamed() -> None:
    old = [_rank(0, 4, 4, at=T - S, created=T - S), _rank(1, 4, 4, at=T - S, created=T - S)]
    theirs, _ = _through_store(old, base=2)
    assert verdicts(job_readings(WAITING_5, 0, theirs)) == []


def test_node_1_reads_node_0s_ranks_and_names_its_own() -> None:
    theirs, _ = _through_store(WAITING_5, base=0)
    [v] = verdicts(job_readings(PAST_4, 2, theirs))
    assert (v.entered, v.missing) == ((0, 1), (2, 3))
    assert v.suspect_words(2).startswith("rank 2: never entered all_reduce #5 on pg 0, "
                                         "where ranks 0 and 1 waited")


def test_a_held_rank_of_another_node_comes_with_how() -> None:
    _, held = _through_store(PAST_4, base=2, held={1: "at a prompt"})
    assert held == {3: "at a prompt"}


SUMMARIES = {
    "not a dict": ([1, 2], []),
    "ranks not a list": ({"ranks": "x"}, []),
    "a rank outside the world": ({"ranks": [{"rank": 9, "groups": []}]}, []),
    "a negative rank": ({"ranks": [{"rank": -1, "groups": []}]}, []),
    "a bool for a rank": ({"ranks": [{"rank": True, "groups": []}]}, []),
    "a group of the wrong shape": ({"ranks": [{"rank": 2, "groups": [["0", "x"]]}]}, [2]),
    "a collective of the wrong shape": (
        {"ranks": [{"rank": 3, "groups": [["0", "", ["all_reduce", "five"], 0, 0]]}]}, [3]),
}


@pytest.mark.parametrize("summary, ranks", SUMMARIES.values(), ids=SUMMARIES.keys())
def test_another_nodes_summary_is_input_not_trusted(summary: Any, ranks: list[int]) -> None:
    readings, held = readings_of(summary, world_size=4)
    assert [r.rank for r in readings] == ranks and held == {}
    for r in readings:
        assert all(g.last_enqueued is None for g in r.groups)


def test_a_rank_this_node_runs_is_read_here_only() -> None:
    claim = [RankCollectives(0, (), at_ns=T + 9 * S), RankCollectives(3, (), at_ns=T)]
    merged = job_readings(WAITING_5, 0, claim)
    assert merged[0] is not claim[0] and merged[0].groups
    assert [r.rank for r in merged] == [0, 1, 3]


WAITS = {
    "in all_reduce #5 for 2 s": ([_rank(0, 5, 4)], T + 2 * S, True),
    "in it for half a second": ([_rank(0, 5, 4)], T + S // 2, False),
    "#5 completed": ([_rank(0, 5, 5)], T + 9 * S, False),
    "no time known": ([_rank(0, 5, 4, created=0)], T + 9 * S, False),
    "no collective": ([RankCollectives(0)], T, False),
}


@pytest.mark.parametrize("readings, now, waits", WAITS.values(), ids=WAITS.keys())
def test_a_node_reads_the_others_only_while_a_rank_waits(
        readings: list[RankCollectives], now: int, waits: bool) -> None:
    assert waits_in_collective(readings, now) is waits
    assert summary_of(readings, 0, None, now)["waiting"] is waits


def _stack(rank: int, fn: str) -> RankStack:
    frames = (Frame(fn, "train.py", 10), Frame("main", "train.py", 3))
    return RankStack(rank, 100 + rank, (ThreadStack(1, "MainThread", frames, main=True),))


def test_two_nodes_dumps_are_one_dump_of_the_job_the_odd_node_first() -> None:
    node0 = StackDump(5.0, (_stack(0, "all_reduce"), _stack(1, "all_reduce")), path="/a")
    node1 = StackDump(4.0, (_stack(2, "sleep"), _stack(3, "all_reduce")), path="/b")
    joined = StackDump.from_dict(joined_dumps([node0.to_dict(), node1.to_dict()]))
    assert [r.rank for r in joined.ranks] == [0, 1, 2, 3]
    assert [(g.ranks, g.odd) for g in joined.groups] == [((2,), True), ((0, 1, 3), False)]
    assert joined.time == 4.0 and joined.path == "/a; /b"
