"""Records in the rendezvous store are hostile input (issue 23, cases 2, 3 and 4).

torch's TCPStore has no authentication: anyone who reaches its port can write
``rankvisor/node/<n>``. Each record here is one that used to crash node 0's status writer
(a rank entry of the wrong arity, an exit code "x", a rank "one", ``rc.t`` "abc"), carry
escapes to the terminal (a host with OSC 52, a 7 MB host), amplify (50,000 ranks whose state
flips) or impersonate (a record under node/1 that says it is node 0). Each is dropped with
one notice, every string kept is sanitised and capped, and the cluster view stays whole.
The store is a dict with the four calls the board makes, so nothing but the board runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rankvisor.engine.cluster.board import StatusBoard
from rankvisor.engine.cluster.record_check import BadRecord, check_record
from rankvisor.engine.output.sanitize import has_unsafe


class DictStore:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: bytes | str) -> None:
        self.data[key] = value.encode() if isinstance(value, str) else value

    def get(self, key: str) -> bytes:
        return self.data[key]

    def add(self, key: str, value: int) -> int:
        n = int(self.data.get(key, b"0")) + value
        self.data[key] = str(n).encode()
        return n

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)

    def multi_get(self, keys: list[str]) -> list[bytes]:
        return [self.data[k] for k in keys]


def good(**over: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "node_rank": 1, "host": "node-b", "round": 0, "attempt": 0, "finished": False,
        "ranks": [[0, 2, "running", None, 0, 0.5], [1, 3, "running", None, 0, None]],
        "rc": None, "suspect": None,
    }
    rec.update(over)
    return rec


OSC = "\x1b]52;c;cHduZWQ=\x07\x1b]0;PWNED\x07"

BAD = {
    "wrong arity": good(ranks=[[0, 2, "running"]]),
    "exit code x": good(ranks=[[0, 2, "failed", "x", 0, None]]),
    "rank one": good(ranks=[[0, "one", "running", None, 0, None]]),
    "rc.t abc": good(rc={"rank": 2, "local_rank": 0, "node_rank": 1, "host": "b",
                         "exitcode": 1, "message": "m", "t": "abc"}),
    "ranks not a list": good(ranks={"0": 1}),
    "host a number": good(host=7),
    "more ranks than the world": good(ranks=[[i, i, "running", None, 0, None]
                                             for i in range(50_000)]),
    "another node's rank": good(node_rank=0, host="impostor"),
    "not an object": [1, 2, 3],
    "a door with escapes": good(door=f"node-b{OSC}:4242"),
    "a door with no port": good(door="node-b"),
}


def board_with(records: dict[int, Any], *, nnodes: int = 2, world: int = 4,
               raw: dict[int, bytes] | None = None) -> tuple[StatusBoard, list[str]]:
    notices: list[str] = []
    board = StatusBoard(host="node-a", notice=lambda m, _s: notices.append(m))
    store = DictStore()
    board.attach(store, node_rank=0, nnodes=nnodes, round_=0, base_rank=0, world_size=world)
    board.close()  # the test drives the reads itself
    for node, rec in records.items():
        store.set(f"rankvisor/node/{node}", json.dumps(rec))
    for node, data in (raw or {}).items():
        store.set(f"rankvisor/node/{node}", data)
    store.add("rankvisor/gen", 1)
    board.read_now()
    return board, notices


def local_status() -> dict[str, Any]:
    return {"ranks": [{"rank": 0, "local_rank": 0, "state": "running", "exitcode": None},
                      {"rank": 1, "local_rank": 1, "state": "running", "exitcode": None}]}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_record_is_dropped_with_one_notice(case: str) -> None:
    board, notices = board_with({1: BAD[case]})
    assert board.remote_records() == {}
    # The status writer's step: never raises, keeps this node's ranks.
    status = board.cluster_status(local_status())
    assert [r["node_rank"] for r in status["ranks"]] == [0, 0]
    board._gen_seen = None
    board.read_now()  # read again: still one notice, not one per read
    assert len([n for n in notices if "node 1's record" in n]) == 1, notices


def test_a_door_is_kept_as_host_and_port() -> None:
    rec = check_record(json.dumps(good(door="10.213.7.2:41327")).encode(), node=1,
                       this_node=0, world_size=4)
    assert rec["door"] == "10.213.7.2:41327"
    assert check_record(json.dumps(good()).encode(), node=1, this_node=0,
                        world_size=4)["door"] is None


def test_an_oversized_or_deep_record_is_refused_unread() -> None:
    with pytest.raises(BadRecord):
        check_record(b"[" * 100_000 + b"]" * 100_000, node=1, this_node=0, world_size=4)
    seven_mb = json.dumps(good(host="x" * 7_000_000)).encode()
    with pytest.raises(BadRecord, match="bytes"):
        check_record(seven_mb, node=1, this_node=0, world_size=4)


def test_remote_strings_are_sanitised_and_capped() -> None:
    rec = good(host="evil" + OSC + "x" * 100_000,
               ranks=[[0, 2, "failed", 1, 0, None]],
               rc={"rank": 2, "local_rank": 0, "node_rank": 1, "host": OSC, "exitcode": 1,
                   "signal": None, "message": "boom" + OSC, "t": 1.0, "knock_on": False},
               suspect={"rank": 2, "reason": "silent" + OSC, "ranks": [2]})
    board, notices = board_with({1: rec})
    status = board.cluster_status(local_status())
    text = json.dumps(status, ensure_ascii=False) + "\n".join(notices)
    assert not has_unsafe(text) and "\x1b" not in text
    hosts = {r["host"] for r in status["ranks"]}
    assert max(len(h) for h in hosts) <= 255
    assert status["root_cause"]["message"].startswith("boom")
    assert len(json.dumps(status)) < 10_000


def test_failures_of_many_ranks_make_one_notice_per_read() -> None:
    ranks = [[i, 4 + i, "failed", 1, 0, None] for i in range(200)]
    board, notices = board_with({1: good(ranks=ranks)}, world=1000)
    failed = [n for n in notices if "failed" in n]
    assert len(failed) == 1 and "and 196 more" in failed[0], notices


def test_an_impostor_of_this_node_is_not_listed() -> None:
    board, notices = board_with({1: good(), 2: good(node_rank=0, host="impostor")}, nnodes=3,
                                world=6)
    status = board.cluster_status(local_status())
    assert sorted({(r["node_rank"], r["host"]) for r in status["ranks"]}) == [
        (0, "node-a"), (1, "node-b")]
    assert any("node 2's record" in n and "claims node rank 0" in n for n in notices)


def test_a_peer_aborted_after_a_closed_connection_is_not_the_node_s_candidate(
        tmp_path: Path) -> None:
    """Rank 1 raised; rank 0, whose connection it closed, died of SIGABRT a moment before
    rank 1's own exit was seen (gloo's IoException, then std::terminate): rank 1 is the
    node's candidate, the abort a knock-on."""
    from rankvisor.engine.errors import ProcessFailure
    from rankvisor.engine.events import RankStateChanged
    from rankvisor.engine.states import RankState

    err0 = tmp_path / "stderr0.log"
    err0.write_text("terminate called after throwing an instance of 'gloo::IoException'\n"
                    "  what():  [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
                    "Connection closed by peer [10.0.0.2]:1234\n")
    err1 = tmp_path / "stderr1.log"
    err1.write_text("RuntimeError: rank 1 fails on purpose\n")
    board = StatusBoard(host="node-a", stderr_paths=lambda: {0: str(err0), 1: str(err1)})
    aborted = ProcessFailure(0, 100, -6, "/x", exit_time_ns=10 * 10**9)
    raised = ProcessFailure(1, 101, 1, "/x", exit_time_ns=10 * 10**9 + 5_000_000)
    for rank, failure in ((0, aborted), (1, raised)):
        board.sink(RankStateChanged(rank, RankState.RUNNING, RankState.FAILED, failure.pid,
                                    failure.exitcode, failure=failure))
    rc = board.local_record()["rc"]
    assert (rc["local_rank"], rc["knock_on"]) == (1, False), rc
    assert "fails on purpose" in rc["message"]


def test_a_rank_that_raised_then_was_aborted_by_its_peers_closing_is_the_candidate(
        tmp_path: Path) -> None:
    """Rank 1 raised; on its way out its peers, going down with it, closed their
    connections and gloo's IoException aborted it (SIGABRT, the exception's what() last in
    its stderr), after rank 0's own abort: rank 1 raised first and says so; rank 0 is the
    knock-on."""
    from rankvisor.engine.errors import ProcessFailure
    from rankvisor.engine.events import RankStateChanged
    from rankvisor.engine.states import RankState

    closed = ("terminate called after throwing an instance of 'gloo::IoException'\n"
              "  what():  [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
              "Connection closed by peer [10.0.0.2]:1234\n")
    err0 = tmp_path / "stderr0.log"
    err0.write_text(closed)
    err1 = tmp_path / "stderr1.log"
    err1.write_text("Traceback (most recent call last):\n  File \"job.py\", line 3, in main\n"
                    "[rank1]: RuntimeError: rank 1 fails on purpose\n" + closed)
    board = StatusBoard(host="node-a", stderr_paths=lambda: {0: str(err0), 1: str(err1)})
    first = ProcessFailure(0, 100, -6, "/x", exit_time_ns=10 * 10**9)
    raised = ProcessFailure(1, 101, -6, "/x", exit_time_ns=10 * 10**9 + 5_000_000)
    for rank, failure in ((0, first), (1, raised)):
        board.sink(RankStateChanged(rank, RankState.RUNNING, RankState.FAILED, failure.pid,
                                    failure.exitcode, failure=failure))
    rc = board.local_record()["rc"]
    assert (rc["local_rank"], rc["knock_on"], rc["signal"]) == (1, False, "SIGABRT"), rc
    assert rc["message"].endswith("RuntimeError: rank 1 fails on purpose"), rc


def test_every_node_whose_round_is_over_ends_its_wait_for_the_others_at_once() -> None:
    """A node's run finishes only after it waited for the others' last records: waiting for
    their "finished" made every node of every run wait out its whole bound (5 s). Each
    node's last record says its round is over; that is what the others wait for."""
    store = DictStore()
    boards = []
    for node in (0, 1):
        board = StatusBoard(host=f"node-{node}")
        board.attach(store, node_rank=node, nnodes=2, round_=0, base_rank=2 * node,
                     world_size=4)
        board.close()  # the test drives the reads and writes itself
        board.decorate(local_status())
        boards.append(board)
    boards[0].over = True
    boards[0].publish_now()
    boards[1].publish_now()  # node 1's round is not over yet: node 0's wait is bounded
    assert boards[0].wait_for_others(0.3) is False
    boards[1].over = True
    boards[1].publish_now()
    # Bounded by a minute, over at once: each sees the other's round over, none finished.
    assert boards[0].wait_for_others(60.0) is True
    assert boards[1].wait_for_others(60.0) is True
    assert not any(r.get("finished") for b in boards for r in b.remote_records().values())
