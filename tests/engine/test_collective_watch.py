"""The Supervisor's Flight Recorder watch keeps each rank's last answer and is asked for its
verdicts twice a second by the live suspect: an answer is parsed once and the verdicts drawn
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
