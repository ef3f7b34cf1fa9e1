"""``RunKernel.step``: what happens on its own to a run (exits, a signal to the supervisor,
time passing), as tables of inputs at given ``now``s and the effects each answers.

The Supervisor's monitor and the scripted double feed the same inputs; what an exit or a
deadline brings is proven here, in microseconds, with no process and no clock.
"""

from __future__ import annotations

import pytest
from rankvisor.engine.kernel.run import (
    Deliver,
    EscalationDone,
    FailedOnOwn,
    KillSurvivors,
    Moved,
    NewAttempt,
    Over,
    RankExited,
    RankLife,
    Respawn,
    RunKernel,
    Say,
    SignalReceived,
    Tick,
)
from rankvisor.engine.states import RankState as S

from .test_run import kernel, kinds


def run(k: RunKernel[RankLife], steps: list[tuple[float, object]]) -> list[list[str]]:
    """Feed ``(now, input)`` in order; each answer's effect kinds. A ``Deliver`` is
    answered as an edge would: every rank named got the signal at ``now``."""
    answers = []
    for now, event in steps:
        effects = k.step(event, now)  # type: ignore[arg-type]
        for e in effects:
            if isinstance(e, Deliver):
                for r in e.ranks:
                    k.lives[r].noted(e.sig, int(now * 1e9), stop=True, caught=True)
                k.delivered(e, e.ranks, now)
        answers.append(kinds(effects))
    return answers


def test_a_failure_is_noted_before_its_teardown_and_the_deadline_kills_who_is_left() -> None:
    k = kernel()
    assert run(k, [
        (10.0, RankExited(0, 1, 10, caused=False)),
        (39.9, Tick()),
        (40.0, Tick()),                               # SIGKILL at 10 + 30 s
        (40.1, RankExited(1, -9, 40, caused=True)),
        (40.2, RankExited(2, -9, 40, caused=True)),
        (40.3, Tick()),
    ]) == [
        # the note comes before any teardown signal: the edge reads the collectives then
        ["Moved", "FailedOnOwn", "Say", "Moved", "Moved", "Deliver"],
        [],
        ["KillSurvivors", "Say"],
        ["Moved"],
        ["Moved", "EscalationDone"],
        ["Over"],
    ]


def test_only_the_attempts_first_failure_is_first() -> None:
    k = kernel(teardown_on_failure=False)
    a = k.step(RankExited(0, 1, 5, caused=False), 1.0)
    b = k.step(RankExited(1, 1, 6, caused=False), 2.0)
    assert [e for e in a + b if isinstance(e, FailedOnOwn)] == [
        FailedOnOwn(0, 5, first=True), FailedOnOwn(1, 6, first=False)]
    k.step(RankExited(2, 0, 7, caused=False), 3.0)
    k.begin_attempt(first=False)
    for life in k.lives.values():
        life.reset(k.attempt, 0)
        life.state = S.RUNNING
    (*_, note) = k.step(RankExited(2, 1, 8, caused=False), 4.0)
    assert note == FailedOnOwn(2, 8, first=True)  # a new attempt's first again


@pytest.mark.parametrize("code,caused,notes", [
    (0, False, []),        # a success is no failure
    (-15, True, []),       # our own signal ended it
    (1, False, ["FailedOnOwn"]),
    (-9, False, ["FailedOnOwn"]),  # a SIGKILL we did not send (the OOM killer)
])
def test_which_exits_are_failures_on_their_own(code, caused, notes) -> None:
    effects = kernel().step(RankExited(0, code, 5, caused=caused), 1.0)
    assert [k for k in kinds(effects) if k == "FailedOnOwn"] == notes


@pytest.mark.parametrize("held,teardown_now", [
    ((), True),
    ((1,), False),        # a person at rank 1's post-mortem prompt
    ((0,), True),         # the rank that failed holds nothing once it has exited
])
def test_a_debug_hold_delays_the_teardown(held, teardown_now) -> None:
    k = kernel()
    effects = k.step(RankExited(0, 1, 5, caused=False, held=held), 1.0)
    assert ("Deliver" in kinds(effects)) == teardown_now
    assert k.teardown_held == (not teardown_now)


def test_the_held_teardown_goes_on_at_the_first_tick_without_the_hold() -> None:
    k = kernel()
    k.step(RankExited(0, 1, 5, caused=False, held=(1,)), 1.0)
    assert run(k, [(2.0, Tick(held=(1,))), (3.0, Tick(held=()))]) == [
        [], ["Say", "Moved", "Moved", "Deliver"]]
    assert not k.teardown_held


def test_a_signal_to_the_supervisor_stops_all_then_a_second_kills_all() -> None:
    k = kernel(2)
    first = k.step(SignalReceived(2), 1.0)
    assert first[0] == Say("got SIGINT: stopping all ranks (SIGKILL in 30 s)", "warning")
    assert first[-1] == Deliver((0, 1), 2, "shutdown", 30.0)
    assert k.received_signal == 2 and k.shutting_down
    second = k.step(SignalReceived(15), 2.0)
    assert second == [Say("got SIGTERM again: killing all ranks", "warning"),
                      Deliver((0, 1), 9, "shutdown", None)]
    assert k.received_signal == 2  # the first one is the run's


@pytest.mark.parametrize("now,due", [
    (129.999, []),
    (130.0, ["KillSurvivors", "Say"]),
])
def test_an_escalation_is_due_at_its_deadline_to_the_microsecond(now, due) -> None:
    k = kernel(1)
    (*_, deliver) = k.stop([0], "terminate", 15, 30.0)
    k.delivered(deliver, (0,), 100.0)
    assert kinds(k.step(Tick(), now)) == due


def test_a_rank_sigkill_did_not_end_is_given_up_after_the_kill_wait() -> None:
    k = kernel(1)
    (*_, deliver) = k.stop([0], "terminate", 15, 30.0)
    k.delivered(deliver, (0,), 100.0)
    effects = run(k, [(130.0, Tick()), (134.9, Tick()), (135.0, Tick())])
    assert effects[:2] == [["KillSurvivors", "Say"], []]
    assert effects[2][:2] == ["EscalationDone", "Say"]
    done = k.step(Tick(), 136.0)
    assert not any(isinstance(e, (EscalationDone, KillSurvivors)) for e in done)


def test_a_tick_that_starts_ranks_leaves_the_end_to_the_next() -> None:
    k = kernel(1, max_restarts=1)
    k.lives[0].after_exit = "restart"
    k.step(RankExited(0, 1, 5, caused=False), 1.0)
    assert k.step(Tick(), 2.0) == [Respawn(0)]  # no end judged beside a start
    # the edge's start failed: its rank is final again, and the next tick judges the end
    k.begin_respawn(0)
    k.lives[0].reset(0, k.lives[0].incarnation)
    k.lives[0].state = S.FAILED
    k.lives[0].exitcode = 1
    assert k.step(Tick(), 3.0) == [
        Say("restarting all ranks as attempt 1 (0 restart(s) left)", "warning"), NewAttempt()]


@pytest.mark.parametrize("finished,driven,end", [
    (False, False, [Over("finish")]),
    (True, False, []),                 # published already
    (False, True, [Over("round")]),    # an agent decides what follows
])
def test_the_end_once_every_rank_is_final(finished, driven, end) -> None:
    k = kernel(1)
    k.driven = driven
    k.step(RankExited(0, 0, 5, caused=False), 1.0)
    assert k.step(Tick(finished=finished), 2.0) == end


def test_an_exit_during_the_shutdown_brings_no_teardown_and_no_restart() -> None:
    k = kernel(2, max_restarts=3)
    k.step(SignalReceived(15), 1.0)
    effects = k.step(RankExited(0, 1, 5, caused=False), 2.0)
    assert kinds(effects) == ["Moved", "FailedOnOwn"]
    k.step(RankExited(1, -15, 6, caused=True), 3.0)
    assert k.step(Tick(), 4.0)[-1] == Over("finish")


def test_a_move_is_recorded_before_it_is_answered() -> None:
    k = kernel(1)
    (moved, *_) = k.step(RankExited(0, 1, 5, caused=False), 1.0)
    assert moved == Moved(0, S.RUNNING, S.FAILED) and k.lives[0].state is S.FAILED


def test_an_input_it_does_not_know_is_a_bug() -> None:
    with pytest.raises(TypeError, match="not an input"):
        kernel().step("exit", 1.0)  # type: ignore[arg-type]
