"""The run kernel's lifecycle rules as tables: plain values in, a decision out, no process.

Each row is one situation a run can be in; the Supervisor, its scripted double and the
torchrun handle carry out whatever the kernel decides, so a rule is proven here once.
"""

from __future__ import annotations

import pytest
from rankvisor.engine.kernel import policy
from rankvisor.engine.kernel.escalation import EscalationTable
from rankvisor.engine.kernel.policy import Refused
from rankvisor.engine.states import RankState

S = RankState
RUN, TERM, RESTART, START = S.RUNNING, S.TERMINATING, S.RESTARTING, S.STARTING
OK, FAIL, SIG = S.SUCCEEDED, S.FAILED, S.SIGNALLED


@pytest.mark.parametrize("ranks,expected", [
    (None, [0, 1, 2, 3]),
    ((2, 0, 2), [0, 2]),
    ((3,), [3]),
])
def test_resolve_names_each_rank_once_in_order(ranks, expected) -> None:
    assert policy.resolve(ranks, range(4)) == expected


@pytest.mark.parametrize("ranks,shown,words", [
    ((7, 5), lambda r: r, "no rank 5, 7 (ranks are 0..3)"),
    ((9,), lambda r: r + 4, "no rank 13 (ranks are 4..7)"),  # node 1 of 2: global numbers
])
def test_resolve_refuses_unknown_ranks_naming_them(ranks, shown, words) -> None:
    with pytest.raises(Refused, match=words.replace("(", r"\(").replace(")", r"\)")):
        policy.resolve(ranks, range(4), shown)


@pytest.mark.parametrize("ranks,live,result", [
    ([0, 1], {0, 1}, ([0, 1], "")),
    ([0, 1, 2], {1}, ([1], "skipped rank(s) 0, 2: not running")),
    ([1], {0}, "rank 1 is not running (failed): nothing to terminate"),
    ([1, 2], set(), "no running rank to terminate"),
])
def test_running_reaches_the_live_ones_and_says_who_was_skipped(ranks, live, result) -> None:
    states = {0: RUN, 1: FAIL, 2: OK}
    if isinstance(result, str):
        with pytest.raises(Refused) as refused:
            policy.running(ranks, live, states, "terminate")
        assert result in str(refused.value)
    else:
        reached, note = policy.running(ranks, live, states, "terminate")
        assert reached == result[0]
        assert (note == "") == (result[1] == "")


@pytest.mark.parametrize("started,stopping,refusal", [
    (False, False, "the run has not started"),
    (True, True, "the run is shutting down"),
    (True, False, None),
])
def test_a_lifecycle_command_waits_for_the_start_and_stops_at_the_end(
    started, stopping, refusal
) -> None:
    assert policy.lifecycle_refusal(started=started, stopping=stopping) == refusal


@pytest.mark.parametrize("state,reason,moves_to", [
    (RUN, "terminate", TERM),
    (START, "teardown", TERM),
    (RUN, "restart", RESTART),
    (RUN, "attempt", RESTART),
    (TERM, "restart", RESTART),   # a restart asked while it was stopping
    (TERM, "terminate", None),    # stopping already
    (RESTART, "terminate", None),  # it starts again: a terminate does not take that back
    (RESTART, "attempt", None),
    (FAIL, "terminate", None),    # over
])
def test_where_a_stop_moves_a_rank(state, reason, moves_to) -> None:
    assert policy.stop_move(state, reason) is moves_to


@pytest.mark.parametrize("state,moves_to", [
    (RUN, TERM), (START, TERM), (TERM, None), (RESTART, None), (SIG, None),
])
def test_a_kill_moves_a_started_rank_to_terminating(state, moves_to) -> None:
    assert policy.kill_move(state) is moves_to


T = 1_000_000_000  # a second, in nanoseconds
TERM_SIG, KILL_SIG, USR1 = 15, 9, 10


@pytest.mark.parametrize("code,exit_ns,signals,stop_ns,caught,ours", [
    # died of a signal we delivered, or its 128+N from a shell in between
    (-TERM_SIG, 5 * T, {TERM_SIG: 4 * T}, 4 * T, True, True),
    (128 + TERM_SIG, 5 * T, {TERM_SIG: 4 * T}, 4 * T, True, True),
    # escalation's SIGKILL
    (-KILL_SIG, 9 * T, {TERM_SIG: 4 * T, KILL_SIG: 9 * T}, 4 * T, True, True),
    # SIGTERM's handler exited 1 after our signal
    (1, 5 * T, {TERM_SIG: 4 * T}, 4 * T, True, True),
    # exited 1 before our stop signal reached it: its own failure
    (1, 3 * T, {TERM_SIG: 4 * T}, 4 * T, True, False),
    # no handler for SIGTERM, yet it exited 1: it did that by itself
    (1, 5 * T, {TERM_SIG: 4 * T}, 4 * T, False, False),
    # never signalled
    (1, 5 * T, {}, None, None, False),
    (-KILL_SIG, 5 * T, {}, None, None, False),  # a SIGKILL from outside (the OOM killer)
    # a person's SIGUSR1 owns a death by SIGUSR1, not a later crash
    (-USR1, 5 * T, {USR1: 4 * T}, None, None, True),
    (-11, 5 * T, {USR1: 4 * T}, None, None, False),
    # the exit's time is unknown: after our stop, it counts as ours
    (0, None, {TERM_SIG: 4 * T}, 4 * T, None, True),
])
def test_whose_exit_it_was(code, exit_ns, signals, stop_ns, caught, ours) -> None:
    assert policy.exit_is_ours(code, exit_ns, signals, stop_ns, caught) is ours


def test_a_failure_tears_down_only_the_ranks_nobody_asked_to_stop() -> None:
    reasons = {0: None, 1: "terminate", 2: None, 3: "restart"}
    assert policy.teardown_targets([0, 1, 2, 3], reasons) == [0, 2]
    assert policy.failure_notice(6, 1) == "rank 6 failed (exit code 1)"


@pytest.mark.parametrize("driven,pending,restarting,refusal", [
    (False, False, False, None),
    (False, True, False, "all ranks are being restarted already"),
    (False, False, True, "rank 2 is already restarting"),
    (True, False, False, "rank 2 cannot be restarted alone in a multi-node run"),
])
def test_when_one_rank_cannot_restart_alone(driven, pending, restarting, refusal) -> None:
    got = policy.restart_rank_refusal(2, driven=driven, attempt_pending=pending,
                                      restarting=restarting)
    assert got == refusal if refusal is None else got.startswith(refusal)


@pytest.mark.parametrize("states,asked,shutting_down,pending,respawn,new_attempt", [
    ({0: FAIL, 1: RUN}, [0], False, False, (0,), False),
    ({0: TERM, 1: RUN}, [0], False, False, (), False),      # not exited yet
    ({0: FAIL, 1: OK}, [0, 1], True, False, (), False),      # nothing starts while stopping
    ({0: SIG, 1: SIG}, [], False, True, (), True),           # every rank out: attempt n+1
    ({0: SIG, 1: RESTART}, [], False, True, (), False),      # one still stopping
    ({0: SIG, 1: SIG}, [1], False, True, (1,), False),       # a respawn first, then wait
])
def test_what_starts_once_ranks_have_exited(states, asked, shutting_down, pending, respawn,
                                             new_attempt) -> None:
    got = policy.settle(states, asked, shutting_down=shutting_down, attempt_pending=pending)
    assert (got.respawn, got.new_attempt) == (respawn, new_attempt)


BASE = dict(started=True, finished=False, attempt_pending=False, driven=False,
            real_failure=False, restarts_left=0, shutting_down=False)


@pytest.mark.parametrize("states,waiting,changes,end", [
    ({0: OK, 1: OK}, [], {}, "finish"),
    ({0: OK, 1: RUN}, [], {}, "wait"),
    ({0: OK, 1: FAIL}, [1], {}, "wait"),                       # a restart alone is due
    ({0: OK, 1: FAIL}, [1], {"shutting_down": True}, "finish"),  # it never comes
    ({0: FAIL, 1: SIG}, [], {"real_failure": True, "restarts_left": 2}, "restart"),
    ({0: FAIL, 1: SIG}, [], {"real_failure": True, "restarts_left": 0}, "finish"),
    ({0: FAIL, 1: SIG}, [], {"real_failure": True, "restarts_left": 2,
                             "shutting_down": True}, "finish"),
    ({0: FAIL, 1: SIG}, [], {"real_failure": True, "driven": True}, "round"),
    ({0: OK, 1: OK}, [], {"attempt_pending": True}, "wait"),
    ({0: OK, 1: OK}, [], {"finished": True}, "wait"),
    ({0: OK, 1: OK}, [], {"started": False}, "wait"),
])
def test_the_end_of_a_run_and_torchs_restart_policy(states, waiting, changes, end) -> None:
    assert policy.end_of_run(states, waiting, **{**BASE, **changes}) == end
    assert policy.restart_notice(3, 1) == "restarting all ranks as attempt 3 (1 restart(s) left)"


def test_an_escalation_at_given_times() -> None:
    """SIGTERM at t=100 with 30 s: nothing due before 130; at 130 the survivors are to be
    SIGKILLed; the reap is waited for 5 s more, then given up on (stuck in the kernel)."""
    table = EscalationTable(kill_wait_s=5.0)
    first = table.add((0, 1, 2), TERM_SIG, 30.0, now=100.0)
    other = table.add((3,), TERM_SIG, 10.0, now=101.0)
    assert table.next_deadline() == 111.0
    assert table.deadlines() == {0: 130.0, 1: 130.0, 2: 130.0, 3: 111.0}
    assert table.rank_gone(3) == [other]  # it exited in time: finished, nothing killed
    assert table.next_deadline() == 130.0
    assert table.due(129.999) == []
    table.rank_gone(0)
    assert table.due(130.0) == [(first, [1, 2])]
    assert table.next_deadline() == 135.0
    table.rank_gone(1)
    assert table.overdue(134.0) == []
    assert table.overdue(135.0) == [first] and first.stuck == [2] and first.killed == [1, 2]
    assert table.next_deadline() is None and len(table) == 0
