"""The run kernel as one object: inputs at given times in, effects out, no process.

The Supervisor and its scripted double both carry out these effects, so what a run does
after a failure, a restart or a deadline is proven here once.
"""

from __future__ import annotations

import pytest
from rankvisor.engine.kernel.policy import Refused
from rankvisor.engine.kernel.run import (
    Deliver,
    KillSurvivors,
    Moved,
    NewAttempt,
    Over,
    RankLife,
    Respawn,
    RunKernel,
    Say,
    Scheduled,
)
from rankvisor.engine.states import RankState as S


def kernel(n: int = 3, **kw: object) -> RunKernel[RankLife]:
    k = RunKernel({r: RankLife(r, S.RUNNING) for r in range(n)}, term_timeout_s=30.0,
                  kill_wait_s=5.0, **kw)  # type: ignore[arg-type]
    k.started = True
    return k


def kinds(effects: list) -> list[str]:
    return [type(e).__name__ for e in effects]


def test_a_failure_tears_down_the_others_and_the_deadline_kills_the_survivors() -> None:
    k = kernel()
    assert kinds(k.exited(0, 1, 5, caused=False)) == ["Moved"]
    assert k.tears_down(0)
    effects = k.failed(0)
    assert kinds(effects) == ["Say", "Moved", "Moved", "Deliver"]
    assert effects[0] == Say("rank 0 failed (exit code 1): stopping the other ranks", "warning")
    deliver = effects[-1]
    assert deliver == Deliver((1, 2), 15, "teardown", 30.0)
    (sched,) = k.delivered(deliver, (1, 2), now=100.0)
    assert isinstance(sched, Scheduled) and sched.escalation.deadline == 130.0
    assert k.next_deadline() == 130.0 and k.deadlines(129.9) == []
    k.lives[1].noted(15, 101, stop=True, caught=True)
    # rank 1 exits in time: the escalation still waits for rank 2
    assert kinds(k.exited(1, -15, 102, caused=True)) == ["Moved"]
    due = k.deadlines(130.0)
    assert due[0] == KillSurvivors(sched.escalation, (2,))
    assert isinstance(due[1], Say) and "outlived the 30 s deadline" in due[1].text
    k.exited(2, -9, 131, caused=True)
    assert k.settle() == [] and k.end(finished=False) == [Over("finish")]


@pytest.mark.parametrize("max_restarts,shutting_down,end", [
    (1, False, [Say("restarting all ranks as attempt 1 (0 restart(s) left)", "warning"),
                NewAttempt()]),
    (0, False, [Over("finish")]),
    (1, True, [Over("finish")]),
])
def test_torchs_restart_policy_after_a_failure(max_restarts, shutting_down, end) -> None:
    k = kernel(2, max_restarts=max_restarts, teardown_on_failure=False)
    k.exited(0, 1, 5, caused=False)
    assert not k.tears_down(0)  # no teardown: the run waits for rank 1
    assert k.end(finished=False) == []
    k.shutting_down = shutting_down
    k.exited(1, 0, 6, caused=False)
    assert k.end(finished=False) == end


def test_a_rank_restarted_alone_is_no_failure_any_more() -> None:
    k = kernel(2, max_restarts=3)
    k.exited(0, 1, 5, caused=False)
    effects, note = k.restart_rank(0)
    assert effects == [] and note == "rank 0 had exited (failed): starting it again"
    assert k.settle() == [Respawn(0)]
    k.begin_respawn(0)
    k.lives[0].reset(0, k.lives[0].incarnation)
    k.lives[0].to(S.STARTING)
    assert not k.real_failure and k.lives[0].incarnation == 1
    with pytest.raises(Refused, match="already restarting"):
        k.lives[0].after_exit = "restart"
        k.restart_rank(0)


def test_restart_all_stops_every_rank_then_starts_attempt_n_plus_1() -> None:
    k = kernel(2)
    effects, _ = k.restart_all()
    assert effects[:2] == [Moved(0, S.RUNNING, S.RESTARTING), Moved(1, S.RUNNING, S.RESTARTING)]
    with pytest.raises(Refused, match="being restarted already"):
        k.restart_all()
    k.exited(0, -15, 5, caused=True)
    assert k.settle() == []
    k.exited(1, -15, 5, caused=True)
    assert k.settle() == [NewAttempt()]
    k.begin_attempt(first=False)
    assert (k.attempt, k.attempt_pending, k.lives[1].restart_count) == (1, False, 1)


def test_a_debug_hold_delays_the_teardown_until_it_ends() -> None:
    k = kernel()
    k.exited(0, 1, 5, caused=False)
    (say,) = k.failed(0, held=[1])
    assert "debug hold: rank(s) 1" in say.text and k.teardown_held
    assert k.failed(0, held=[1]) == []
    assert kinds(k.hold_ended()) == ["Say", "Moved", "Moved", "Deliver"]


def test_expire_kills_at_once_but_waits_for_the_reap() -> None:
    k = kernel(1)
    (*_, deliver) = k.stop([0], "terminate", 15, 30.0)
    k.delivered(deliver, (0,), now=0.0)
    assert kinds(k.expire()) == ["KillSurvivors", "Say"]
    assert kinds(k.exited(0, -9, 1, caused=True)) == ["Moved", "EscalationDone"]


@pytest.mark.parametrize("timeout,sig,last", [
    (30.0, 15, Deliver((0, 1, 2), 15, "shutdown", 30.0)),   # a stop, or SIGTERM to us
    (30.0, 2, Deliver((0, 1, 2), 2, "shutdown", 30.0)),     # SIGINT to us: forwarded
    (None, 15, Deliver((0, 1, 2), 9, "shutdown", None)),    # the monitor failed: SIGKILL
])
def test_shutting_down_drops_every_pending_restart_and_the_run_ends(timeout, sig,
                                                                    last) -> None:
    k = kernel()
    k.restart_rank(0)                   # rank 0 still running: stopped, to start again
    assert k.lives[0].after_exit == "restart"
    effects = k.shut_down(timeout, sig)
    assert effects[-1] == last and k.lives[0].after_exit is None
    for rank in range(3):
        k.exited(rank, -sig, 10 + rank, caused=True)
    assert k.settle() == [] and k.end(finished=False) == [Over("finish")]  # none restarts
