"""The Supervisor's Flight Recorder watch keeps each rank's last answer and is asked for its
verdicts at each of the live suspect's looks: an answer is parsed once and the verdicts drawn
once per set of answers, not at every look (at 64 ranks each answer is a JSON of hundreds of
entries). Real FR answers of a gloo hang (rank 1 never entered all_reduce #5)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from rankvisor.engine.forensics.worker_server import Answer
from rankvisor.engine.supervisor import collective_watch
from rankvisor.engine.supervisor.collective_watch import CollectiveWatch
from rankvisor.engine.supervisor.state import RunState

DATA = Path(__file__).parent / "data" / "fr_gloo"
NOW = time.time_ns()  # the answers' time: after the dumps' own (they were recorded then)


def test_answers_are_parsed_once_and_the_verdicts_drawn_once_per_set_of_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = {"parse": 0, "verdicts": 0}
    parse, draw = collective_watch.parse_answer, collective_watch.verdicts

    def counted_parse(*args: Any) -> Any:
        calls["parse"] += 1
        return parse(*args)

    def counted_verdicts(*args: Any) -> Any:
        calls["verdicts"] += 1
        return draw(*args)

    monkeypatch.setattr(collective_watch, "parse_answer", counted_parse)
    monkeypatch.setattr(collective_watch, "verdicts", counted_verdicts)
    watch = CollectiveWatch(RunState({}, max_restarts=0), lambda: None)
    for r in (0, 1, 2):
        watch._last[r] = (f"/r{r}.sock", Answer(body=(DATA / f"{r}.json").read_bytes(),
                                                at_ns=NOW))
    watch._errors[3] = ("/r3.sock", "worker server: the rank is gone")
    first = watch.verdicts()
    for _ in range(5):
        assert watch.verdicts() == first
    [v] = first
    assert (v.op, v.seq, v.missing) == ("all_reduce", 5, (1,))
    assert calls == {"parse": 3, "verdicts": 1}
    assert [a is b for a, b in zip(watch.readings(), watch.readings(), strict=True)] == [True] * 4
    # A new answer of one rank: that one is parsed, the verdicts drawn again.
    watch._last[1] = ("/r1.sock", Answer(body=(DATA / "1.json").read_bytes(), at_ns=NOW + 1))
    assert watch.verdicts() == first
    assert calls == {"parse": 4, "verdicts": 2}


def test_a_poll_asks_on_the_beat_only_while_no_rank_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The poll runs on the supervisor's beat: ranks without a socket answer at once there;
    ranks with one are asked on a thread of their own (their answers wait on the rank)."""
    import threading

    watch = CollectiveWatch(RunState({}, max_restarts=0), lambda: None)
    paths = {0: str(tmp_path / "r0.sock"), 1: str(tmp_path / "r1.sock")}
    monkeypatch.setattr(watch, "live_paths", lambda only=None: dict(paths))
    asked: list[tuple[str, dict[int, str]]] = []
    release = threading.Event()

    def ask(p: dict[int, str], timeout_s: float) -> None:
        asked.append((threading.current_thread().name, dict(p)))
        if threading.current_thread() is not main:
            release.wait(10)

    main = threading.current_thread()
    monkeypatch.setattr(watch, "ask", ask)
    watch._poll()
    assert asked == [(main.name, paths)]
    Path(paths[1]).touch()  # rank 1 serves now
    watch._poll()
    watch._poll()  # the first asks still wait: no second thread
    release.set()
    watch.stop()
    assert asked[1:] == [("rankvisor-collectives", paths)]


def test_while_no_rank_serves_the_looks_back_off_onto_the_status_refresh_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nobody serves yet: a look a second at first, then every 2 s, then every 4 s (even
    seconds, when the status refresh wakes the run anyway); a rank that serves is asked at
    every look; new sockets (a restart) start over. A changed answer is passed on."""
    from rankvisor.engine import clock

    fake = clock.FakeClock(monotonic=1000.0)
    watch = CollectiveWatch(RunState({}, max_restarts=0), lambda: None)
    paths = {0: str(tmp_path / "r0.sock"), 1: str(tmp_path / "r1.sock")}
    monkeypatch.setattr(watch, "live_paths", lambda only=None: dict(paths))
    monkeypatch.setattr(watch, "ask", lambda p, timeout_s: None)
    with clock.using(fake):
        for step, (at, due) in enumerate([
            (1000.0, None),    # the ranks just started: in a second
            (1001.0, 1002.0),  # then on the 2 s grid
            (1002.0, 1004.0),  # then on the 4 s grid
            (1004.0, 1008.0),
            (1008.0, 1012.0),
            ("restart", None),  # new sockets: a second again
            (1013.0, 1014.0),
        ]):
            if at == "restart":
                paths = {0: str(tmp_path / "r0b.sock"), 1: str(tmp_path / "r1b.sock")}
                at = 1012.0
            fake.advance(at - fake.monotonic())
            assert watch._poll() == due, step
    told: list[int] = []
    watch.on_change(lambda: told.append(1))
    monkeypatch.undo()
    monkeypatch.setattr(collective_watch, "ask_all", lambda p, *_a, **_k: answers)
    answers = {0: Answer(error="not serving"), 1: Answer(error="not serving")}
    watch.ask(paths, 0.1)
    watch.ask(paths, 0.1)  # the same again: nothing new
    answers = {0: Answer(body=b"{}", at_ns=1), 1: Answer(error="not serving")}
    watch.ask(paths, 0.1)
    watch.ask(paths, 0.1)
    answers = {0: Answer(error="gone"), 1: Answer(error="not serving")}
    watch.ask(paths, 0.1)  # rank 0's last answer still stands
    assert told == [1, 1]
