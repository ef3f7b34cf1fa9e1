"""torch's Flight Recorder read: dumps recorded from a real 3-rank gloo job where rank 1
skipped all_reduce #5 (tests/engine/data/fr_gloo), the verdict in words and JSON, a stale
answer never blamed, the suspect's rule above silence, and the worker server's socket paths
and answers (a real unix socket)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from rankvisor.engine.forensics.activity import RankActivity
from rankvisor.engine.forensics.collectives import (
    Collective,
    GroupState,
    RankCollectives,
    desyncs,
    parse_answer,
    parse_fr,
    ranks_words,
    snapshot_json,
    verdicts,
)
from rankvisor.engine.forensics.collectives_run import TORCH_SOCKET_ENV, ask_workers
from rankvisor.engine.forensics.suspect import RankFacts, find_suspect
from rankvisor.engine.forensics.worker_server import Answer, ask, prepare, socket_path
from rankvisor.engine.names.refusals import NO_WORKER_SERVER

pytestmark = pytest.mark.processes

DATA = Path(__file__).parent / "data" / "fr_gloo"
S = 1_000_000_000


def _dumps() -> dict[int, dict]:
    return {r: json.loads((DATA / f"{r}.json").read_text()) for r in (0, 1, 2)}


def _readings(at_ns: int | None = None) -> list[RankCollectives]:
    out = []
    for r, d in _dumps().items():
        created = max(e["time_created_ns"] for e in d["entries"])
        out.append(parse_fr(r, d, at_ns if at_ns is not None else created + S))
    return out


def test_a_recorded_gloo_hang_reads_as_rank_1_missing_from_all_reduce_5() -> None:
    readings = _readings()
    g0 = readings[0].group("0")
    assert g0 is not None and g0.desc == "default_pg"
    assert (g0.last_enqueued.op, g0.last_enqueued.seq) == ("all_reduce", 5)  # type: ignore[union-attr]
    assert g0.last_completed.seq == 4 and g0.last_started is None  # type: ignore[union-attr]
    assert readings[1].group("0").last_enqueued.seq == 4  # type: ignore[union-attr]
    [v] = verdicts(readings)
    assert (v.pg, v.op, v.seq, v.entered, v.missing) == ("0", "all_reduce", 5, (0, 2), (1,))
    assert v.words() == ("all_reduce #5 on pg 0 (default_pg): ranks 0 and 2 entered it; "
                         "rank 1 did not (its last was #4)")
    data = snapshot_json(readings)
    assert data["verdicts"][0]["missing"] == [1] and data["verdicts"][0]["entered"] == [0, 2]
    assert data["ranks"][1]["groups"][0]["last_enqueued"] == {
        "op": "all_reduce", "seq": 4, "sizes": [[4]]}


def test_an_answer_older_than_the_peers_entry_blames_nobody() -> None:
    readings = _readings()
    early = min(e["time_created_ns"] for e in _dumps()[0]["entries"])
    stale = [r if r.rank != 1 else RankCollectives(1, r.groups, at_ns=early) for r in readings]
    [v] = verdicts(stale) or [None]  # type: ignore[list-item]
    assert v is None or not v.missing
    # Every rank at the same collective: nothing to say.
    same = [r for r in readings if r.rank != 1]
    assert verdicts(same) == []


def test_a_rank_asked_a_moment_after_its_peers_entered_is_not_blamed_yet() -> None:
    # Ranks that all fail at once (a mismatch torch detects) were each read a moment apart:
    # one behind by a few milliseconds was on its way in, not hanging.
    readings = _readings()
    entries = _dumps()[0]["entries"]
    entered = min(e["time_created_ns"] for e in entries if e["collective_seq_id"] == 5)
    soon = [r if r.rank != 1 else RankCollectives(1, r.groups, at_ns=entered + S // 10)
            for r in readings]
    [v] = verdicts(soon) or [None]  # type: ignore[list-item]
    assert v is None or (not v.missing and v.unknown == (1,))
    later = [r if r.rank != 1 else RankCollectives(1, r.groups, at_ns=entered + 6 * S // 10)
             for r in readings]
    [v] = verdicts(later)
    assert v.missing == (1,)


def test_a_rank_that_could_not_be_asked_is_listed_with_its_error() -> None:
    r = parse_answer(3, Answer(error="worker server: the rank is gone"))
    assert r.to_json() == {"rank": 3, "groups": [], "error": "worker server: the rank is gone"}
    assert parse_answer(3, Answer(body=b"not json", at_ns=1)).error
    assert ranks_words([1]) == "rank 1" and ranks_words([0, 1, 3]) == "ranks 0, 1 and 3"


def _facts(rank: int, *, failed: bool, last_s: float, t_fail: int) -> RankFacts:
    return RankFacts(
        rank=rank, failed=failed, exitcode=1 if failed else -15,
        exit_time_ns=t_fail if failed else t_fail + S, stopped_by=None if failed else "teardown",
        message="RuntimeError: Timed out waiting 5000ms for recv operation to complete"
        if failed else "",
        activity=RankActivity(rank, t_fail - int(last_s * S), 0.4, 30, last_line="heartbeat"),
    )


def test_the_suspect_is_the_rank_that_never_entered_above_any_silence() -> None:
    t_fail = 2_000_000_000 * S
    # Every rank printed a heartbeat until the end; rank 0 failed first in the collective;
    # rank 2 even fell silent. The Flight Recorder says rank 1 never entered #5.
    facts = [_facts(0, failed=True, last_s=0.1, t_fail=t_fail),
             _facts(1, failed=False, last_s=0.1, t_fail=t_fail),
             _facts(2, failed=False, last_s=8.0, t_fail=t_fail)]
    without = find_suspect(facts)
    assert without is not None and without.rank != 1
    s = find_suspect(facts, collectives=verdicts(_readings()))
    assert s is not None and (s.rank, s.kind) == (1, "collective")
    assert s.reason.startswith(
        "rank 1: never entered all_reduce #5 on pg 0, where ranks 0 and 2 waited")


class _Server(threading.Thread):
    """A unix socket answering one HTTP request, as torch's worker server does."""

    def __init__(self, path: str, body: bytes) -> None:
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(path)
        self.sock.listen(1)
        self.body = body
        self.request = b""

    def run(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            self.request = conn.recv(4096)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(self.body), self.body))


def test_ask_posts_to_the_handler_and_reads_its_answer(tmp_path: Path) -> None:
    path = socket_path(str(tmp_path))
    assert path == str(tmp_path / "worker" / "sock")
    prepare(path)
    server = _Server(path, b'{"entries": []}')
    server.start()
    a = ask(path, "fr_trace_json")
    server.join(5)
    assert a.ok and a.body == b'{"entries": []}' and a.at_ns > 0
    assert server.request.startswith(b"POST /handler/fr_trace_json ")
    assert "no worker server" in ask(str(tmp_path / "none.sock"), "fr_trace_json").error


def test_a_torchrun_worker_is_asked_at_the_socket_its_environment_names(tmp_path: Path) -> None:
    """``attach --torchrun``: torchrun starts no worker server; a worker under
    ``worker_main()`` names its socket in its environment, the others cannot be asked."""
    path = str(tmp_path / "w0.sock")
    server = _Server(path, json.dumps(_dumps()[0]).encode())
    server.start()
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    served = subprocess.Popen(sleep, env={**os.environ, TORCH_SOCKET_ENV: path})
    plain = subprocess.Popen(sleep, env={k: v for k, v in os.environ.items()
                                         if k != TORCH_SOCKET_ENV})
    try:
        assert ask_workers({1: plain.pid}) is None  # nothing to ask: the handle says so
        data = ask_workers({0: served.pid, 1: plain.pid})
        server.join(5)
        assert data is not None and data["source"] == "live"
        by_rank = {r["rank"]: r for r in data["ranks"]}
        assert by_rank[0]["groups"][0]["last_enqueued"]["seq"] == 5
        assert by_rank[1]["error"] == NO_WORKER_SERVER
    finally:
        for p in (served, plain):
            p.kill()
            p.wait()


def test_a_deep_directory_gets_a_short_socket_path_both_sides_agree_on(tmp_path: Path) -> None:
    deep = str(tmp_path / ("d" * 60) / ("e" * 60))
    path = socket_path(deep)
    assert len(path.encode()) <= 100 and path == socket_path(deep)
    assert os.path.basename(path).endswith(".sock")


def _stack(rank: int, *names: str) -> object:
    from rankvisor.engine.forensics.stacks import Frame, RankStack, ThreadStack

    frames = tuple(Frame(n, "/x/torch/distributed/distributed_c10d.py" if n == "all_reduce"
                         else "/job/train.py", 10) for n in names)
    return RankStack(rank, 100 + rank, (ThreadStack(100 + rank, "MainThread", frames, True),))


def test_ranks_in_one_frame_at_different_collective_numbers_are_two_groups() -> None:
    from rankvisor.engine.forensics.collectives import Collective, GroupState
    from rankvisor.engine.forensics.stack_evidence import outside_collective, regrouped
    from rankvisor.engine.forensics.stacks import StackDump, merge

    ranks = tuple(_stack(r, "all_reduce", "loop", "main") for r in range(3))
    dump = StackDump(0.0, ranks, merge(ranks))  # type: ignore[arg-type]
    assert [g.ranks for g in dump.groups] == [(0, 1, 2)]

    def fr(rank: int, seq: int) -> RankCollectives:
        c = Collective("all_reduce", seq, ((4,),), created_ns=seq)
        return RankCollectives(rank, (GroupState("0", "default_pg", c, None,
                                                 Collective("all_reduce", seq - 1)),), at_ns=9)

    split = regrouped(dump, [fr(0, 5), fr(1, 5), fr(2, 4)])
    assert [(g.ranks, g.collective, g.odd) for g in split.groups] == [
        ((2,), "all_reduce #4 on pg 0", True), ((0, 1), "all_reduce #5 on pg 0", False)]
    assert split.groups[0].who() == "rank 2 (in all_reduce #4 on pg 0)"
    assert StackDump.from_dict(split.to_dict()).groups[0].collective == "all_reduce #4 on pg 0"
    # One rank outside any collective while the others wait in one: said in words.
    odd_ranks = (_stack(0, "all_reduce", "loop"), _stack(1, "loop"),
                 _stack(2, "all_reduce", "loop"))
    odd = outside_collective(StackDump(0.0, odd_ranks, merge(odd_ranks)))  # type: ignore[arg-type]
    assert odd is not None and odd.words() == (
        "rank 1: its main thread is outside any collective (at train.py:10 in loop) while "
        "ranks 0 and 2 wait in all_reduce (py-spy stacks)")


def test_gloo_dumps_are_normalised_for_torchfrtrace(tmp_path: Path) -> None:
    import pickle

    from rankvisor.engine.forensics.fr_dump import write_for_torchfrtrace

    dumps = _dumps()
    assert set(dumps[0]["pg_config"]) == {""}  # as gloo writes it
    paths = write_for_torchfrtrace(str(tmp_path), dumps)
    assert [os.path.basename(p) for p in paths] == ["rank_0", "rank_1", "rank_2"]
    with open(paths[0], "rb") as f:
        fixed = pickle.load(f)
    assert fixed["pg_config"]["0"] == {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}
    assert all(e["frames"] == [] for e in fixed["entries"])
    assert [e["collective_seq_id"] for e in fixed["entries"]] == [
        e["collective_seq_id"] for e in dumps[0]["entries"]]


def _last(
    op: str, seq: int, sizes: tuple = ((4,),), dtypes: tuple = ("Float",)
) -> tuple[int, Collective]:
    return seq, Collective(op, seq, sizes, 1_000, dtypes)


def test_the_same_number_entered_as_another_collective_is_a_desync() -> None:
    ar = _last("all_reduce", 30)
    table = [
        # (each rank's last collective, the odd ranks, what rank 2 entered instead)
        ({0: ar, 1: ar, 2: _last("barrier", 30, ()), 3: ar}, (2,), "barrier"),
        ({0: ar, 1: ar, 2: _last("all_reduce", 30, ((8,),))}, (2,),
         "all_reduce of sizes [[8]]"),
        ({0: ar, 1: ar, 2: _last("all_reduce", 30, dtypes=("Double",))}, (2,),
         "all_reduce of Double"),
        # A tie: the lowest rank's collective is the expected one (as torch's analyser).
        ({0: ar, 2: _last("barrier", 30, ())}, (2,), "barrier"),
        # One rank a collective behind is no desync (the missing verdict's case).
        ({0: ar, 1: ar, 2: _last("all_reduce", 29)}, (), ""),
        ({0: ar, 1: ar}, (), ""),
    ]
    for last, odd, instead in table:
        found = desyncs("0", "default_pg", last)
        assert tuple(r for v in found for r in v.missing) == odd, last
        for v in found:
            assert (v.kind, v.seq, v.op, v.odd_of[2]) == ("desync", 30, "all_reduce", instead)
            assert v.suspect_words(2) == (
                f"rank 2: entered {instead} #30 on pg 0 where {ranks_words(v.entered)} "
                "entered all_reduce #30 (a desync, torch's Flight Recorder)")


def test_a_desync_is_a_verdict_of_the_group() -> None:
    ranks = [RankCollectives(r, (GroupState("0", "default_pg", c, None, None),))
             for r, c in ((0, _last("all_reduce", 5)[1]), (1, _last("barrier", 5, ())[1]),
                          (2, _last("all_reduce", 5)[1]))]
    (v,) = verdicts(ranks)
    assert (v.kind, v.missing, v.entered) == ("desync", (1,), (0, 2))
    assert v.words() == ("all_reduce #5 on pg 0 (default_pg): ranks 0 and 2 entered it; "
                         "rank 1 entered barrier #5 instead (a desync: the same collective "
                         "number, another collective)")
